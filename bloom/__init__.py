"""Stage-1 chunk filters: a Bloom filter per chunk so readers skip chunks without their values.

``build(values, size, scheme)`` makes a chunk's filter on the write path;
``Matcher(values, match_unfiltered).matches(bits, scheme, param)`` decides on the read path.
Scheme 0 (``Scheme.OSIRIS``) is byte-compatible with RabbitMQ streams; scheme 1
(``Scheme.MMH3``, the project default) picks the number of hash positions per chunk.
Layout and semantics: ``../shared/design/storage-format.md``, "Chunk filter (stage 1)".
"""

from bloom.errors import BloomError
from bloom.filter import ChunkFilter, build, build_distinct
from bloom.matcher import Matcher
from bloom.phash2 import phash2_binary, phash2_list
from bloom.schemes import (
    DEFAULT_SIZE,
    MAX_K,
    MAX_SIZE,
    MIN_SIZE,
    Scheme,
    choose_k,
    theoretical_fpr,
)

__all__ = [
    "DEFAULT_SIZE",
    "MAX_K",
    "MAX_SIZE",
    "MIN_SIZE",
    "BloomError",
    "ChunkFilter",
    "Matcher",
    "Scheme",
    "build",
    "build_distinct",
    "choose_k",
    "phash2_binary",
    "phash2_list",
    "theoretical_fpr",
]
