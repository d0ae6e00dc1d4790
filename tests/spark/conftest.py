"""One SparkSession (local[2]) for the whole test session, with the data source registered.

PySpark's Python workers must run the interpreter running the tests (it has our packages).
"""

from __future__ import annotations

import os
import sys
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable


@pytest.fixture(scope="session")
def spark():
    from pyspark.sql import SparkSession

    from amqp_stream.spark import register

    session = (SparkSession.builder.master("local[2]").appName("amqp-stream-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.task.maxFailures", "1")
               .config("spark.sql.session.timeZone", "UTC")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()


def metric(broker, name: str, stream: str) -> float:
    """A counter of the broker's Prometheus endpoint for one stream (0 when not reported yet)."""
    text = urllib.request.urlopen(broker.metrics_url, timeout=10).read().decode()
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels.get("stream") == stream:
                total += sample.value
    return total
