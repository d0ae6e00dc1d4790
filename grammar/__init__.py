"""The Lark grammar files of the SQL filter language (data, loaded by ``sqlfilter``)."""

from pathlib import Path

GRAMMAR_DIR = Path(__file__).parent
__all__ = ["GRAMMAR_DIR"]
