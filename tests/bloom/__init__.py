"""Tests of bloom/. ``VECTORS``: RabbitMQ's reference vectors (shared/testdata, beside the checkout)."""

import json
from pathlib import Path

#: produced by running osiris; the one copy lives in ../shared/testdata (see its README)
VECTORS_PATH = Path(__file__).resolve().parents[3] / "shared" / "testdata" / "osiris_bloom_vectors.json"
VECTORS = json.loads(VECTORS_PATH.read_text())
