"""Tests of bloom/. ``VECTORS``: RabbitMQ's reference vectors (``data/``, with their provenance)."""

import json
from pathlib import Path

#: produced by running osiris (see data/README.md)
VECTORS_PATH = Path(__file__).resolve().parent / "data" / "osiris_bloom_vectors.json"
VECTORS = json.loads(VECTORS_PATH.read_text())
