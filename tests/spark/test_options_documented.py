"""docs/spark.md's option table is the data source's: every option ``SourceOptions`` reads is
in it under its name and nothing else is, each key the code reads is a documented option, and
the defaults the table gives are the parsed ones. Reads the repository's files; no Spark."""

from __future__ import annotations

import re
from pathlib import Path

from amqp_stream.spark.options import OPTION_NAMES, SourceOptions

ROOT = Path(__file__).resolve().parents[2]
# option -> the SourceOptions field its default lands in
FIELDS = {"timeout": "timeout", "declare": "declare", "window": "window",
          "startingOffset": "starting_offset", "endingOffset": "ending_offset",
          "maxRecordsPerPartition": "max_records_per_partition", "credit": "credit",
          "failOnDataLoss": "fail_on_data_loss", "routingHash": "routing_hash",
          "routingType": "routing_type", "exactlyOnce": "exactly_once"}
DEFAULT = re.compile(r"`(\w+)` \(default|[Dd]efault:? `?(\w+)`?")


def _table() -> dict[str, str]:
    """option -> its row's text, from the table under "## Options"."""
    text = (ROOT / "docs" / "spark.md").read_text()
    section = text.split("\n## Options", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for row in section.splitlines():
        if row.startswith("| `"):
            for name in re.findall(r"`([\w.-]+)`", row.split(" | ")[0]):
                rows[name] = row
    return rows


def test_the_option_table_is_the_options_the_source_reads():
    table = _table()
    assert set(table) - {"x-..."} == set(OPTION_NAMES)
    read = set()
    for path in (ROOT / "amqp_stream" / "spark").glob("*.py"):
        read.update(re.findall(r'opts\.get\("(\w+)"|"(\w+)" in opts|_int\(\w+, "(\w+)"|opts\["(\w+)"\]',
                               path.read_text()))
    keys = {key for found in read for key in found if key}
    # Spark hands the options over lower-cased: what the code reads is each option's lower case
    assert keys == {name.lower() for name in OPTION_NAMES}


def test_the_defaults_the_table_gives_are_the_parsed_ones():
    table = _table()
    parsed = SourceOptions.parse({"url": "amqp://h", "stream": "s"})
    wrong = {}
    for option, name in FIELDS.items():
        found = DEFAULT.search(table[option])
        assert found, f"docs/spark.md gives no default for {option}"
        documented = found.group(1) or found.group(2)
        real = getattr(parsed, name)
        if documented != (str(real).lower() if isinstance(real, bool) else str(real).removesuffix(".0")):
            wrong[option] = (documented, real)
    assert not wrong, f"docs/spark.md's defaults differ (doc, parsed): {wrong}"
