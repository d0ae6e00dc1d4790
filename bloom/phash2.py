"""Erlang's portable term hash (``erlang:phash2``) for the two terms osiris hashes.

Why this exists: RabbitMQ's stream log (osiris) places each filter value at
``phash2(V) mod (bits-1) + 1`` and ``phash2([V]) mod (bits-1) + 1``. To read and write chunk
filters that RabbitMQ understands (scheme 0) we must reproduce ``make_hash2`` of
``erts/emulator/beam/utils.c`` bit for bit, but only for a binary and a one-element list
holding a binary; no other term type ever reaches a chunk filter.

Strategy:
- ``make_hash2`` of a binary is Bob Jenkins' 1996 ``lookup2`` block hash (12-byte blocks
  read little-endian into three 32-bit words, the total length added to ``c`` before the
  last mix) seeded with ``HCONST_13 + hash`` (``hash`` = 0 for a bare binary).
- ``make_hash2([Bin])`` walks the cons cell: the head is not a byte, so nothing is mixed for
  it; the binary is hashed as above (its seed is still ``HCONST_13 + 0``), then the tail
  ``[]`` is mixed in with ``UINT32_HASH(NIL_DEF = 2, HCONST_2)``, i.e. one more Jenkins mix
  of ``a = HCONST_2 + 2, b = HCONST_2, c = hash`` (or the constant 3468870702 when the running
  hash happens to be 0).
- ``phash2(T, Range)`` is ``make_hash2(T) mod Range``; callers apply the modulo.
- Everything runs on the write path once per distinct value per chunk, so results are cached
  per value (``lru_cache``); pure-Python cost is a few µs per uncached value.

Reference values: ``tests/bloom/data/osiris_bloom_vectors.json`` (produced by the original).
"""

from __future__ import annotations

import struct
from functools import lru_cache

__all__ = ["phash2_binary", "phash2_list", "phash2_pair"]

# One 12-byte block of the Jenkins hash: three 32-bit words, little-endian.
BLOCK = struct.Struct("<III")

_M32 = 0xFFFFFFFF
HCONST = 0x9E3779B9  # golden ratio; lookup2's initial a and b
HCONST_2 = 0x3C6EF372  # HCONST * 2 mod 2**32: constant for the list terminator []
HCONST_13 = 0x08D12E65  # HCONST * 13 mod 2**32: constant for binaries
NIL_DEF = 2  # tag_val_def of [] in erl_term.h, the value mixed for a list's tail
NIL_WHEN_HASH_ZERO = 3468870702  # make_hash2 shortcut for [] while the running hash is 0


def _mix_abc(a: int, b: int, c: int) -> tuple[int, int, int]:
    """Jenkins' ``mix(a, b, c)`` on 32-bit words: all three new words (between 12-byte blocks)."""
    a = (a - b - c) & _M32
    a ^= c >> 13
    b = (b - c - a) & _M32
    b ^= (a << 8) & _M32
    c = (c - a - b) & _M32
    c ^= b >> 13
    a = (a - b - c) & _M32
    a ^= c >> 12
    b = (b - c - a) & _M32
    b ^= (a << 16) & _M32
    c = (c - a - b) & _M32
    c ^= b >> 5
    a = (a - b - c) & _M32
    a ^= c >> 3
    b = (b - c - a) & _M32
    b ^= (a << 10) & _M32
    c = (c - a - b) & _M32
    c ^= b >> 15
    return a, b, c


def _mix(a: int, b: int, c: int) -> int:
    """Jenkins' ``mix(a, b, c)``'s new ``c`` (the last mix of a hash needs no more)."""
    return _mix_abc(a, b, c)[2]


def _block_hash(data: bytes, initval: int) -> int:
    """``block_hash(data, len, initval)`` of utils.c (lookup2)."""
    a = b = HCONST
    c = initval
    length = len(data)
    full = length - length % 12
    for x, y, z in BLOCK.iter_unpack(data[:full]) if full else ():
        a, b, c = _mix_abc((a + x) & _M32, (b + y) & _M32, (c + z) & _M32)
    # Tail: up to 11 bytes. Bytes 0-3 go to a, 4-7 to b, 8-10 to the upper three bytes of c
    # (c's low byte is reserved for the length, which is added in full).
    tail = data[full:] + bytes(12 - (length - full))
    x, y, z = BLOCK.unpack(tail)
    return _mix((a + x) & _M32, (b + y) & _M32, (c + length + (z << 8)) & _M32)


@lru_cache(maxsize=1 << 14)
def phash2_binary(value: bytes) -> int:
    """``make_hash2(Value)`` for a binary: the full 32-bit hash (``phash2/2`` is this mod Range)."""
    if not value:
        return HCONST_13
    return _block_hash(bytes(value), HCONST_13)


@lru_cache(maxsize=1 << 14)
def phash2_list(value: bytes) -> int:
    """``make_hash2([Value])`` for a one-element list holding the binary ``value``."""
    h = phash2_binary(value)
    if h == 0:
        return NIL_WHEN_HASH_ZERO
    return _mix((HCONST_2 + NIL_DEF) & _M32, HCONST_2, h)


def phash2_pair(value: bytes) -> tuple[int, int]:
    """Both osiris hashes of ``value``: (``phash2(V)``, ``phash2([V])``), full 32-bit."""
    return phash2_binary(value), phash2_list(value)
