"""Hash schemes of a chunk filter: where a value's bits go, for a filter size and parameter.

Why: the writer (``bloom.filter.build``) and the reader (``bloom.matcher.Matcher``) must place
a value on exactly the same bits, for every filter size a stream has ever used, and a reader
must hash each value once however many sizes and hash counts it meets. So a scheme is split in
two steps, both here:

1. ``digest(value, scheme)``: the size-independent hash of the value (cached per value).
2. ``digest_mask(digest, size, scheme, param)``: the value's bits for one filter size and
   parameter, as an integer mask over the filter read as one big-endian integer.

Bit numbering (both schemes, as osiris): bits are MSB-first, bit N is byte ``N // 8`` mask
``0x80 >> (N % 8)``. Read as a big-endian integer of ``bits = 8 * size`` bits, bit N is
``1 << (bits - 1 - N)``. Bit 0 (``unfiltered_mask(size)``) says "the chunk has an entry without a
filter value"; value positions are always in ``1 .. bits-1`` (``m = bits - 1`` usable bits).

Scheme 0, ``OSIRIS`` (param 0): k = 2 positions, ``phash2(V) mod m + 1`` and
``phash2([V]) mod m + 1`` (see ``bloom.phash2``). Byte-compatible with RabbitMQ.

Scheme 1, ``MMH3`` (param = k, the number of positions, 1..255, chosen per chunk by
``choose_k`` for its number of distinct values and its size): one MurmurHash3 x64 128-bit
hash per value gives two 64-bit words ``h1, h2`` (low, high). Lane i (0-based) is
``z_i = splitmix64_finalizer((h1 + i * (h2 | 1)) mod 2**64)``, its position
``1 + ((z_i >> 32) * m >> 32)``; the value's k positions are the first k *distinct* positions
of lanes 0, 1, 2, ... (a lane that repeats an earlier position is skipped; at most
64k + 1024 lanes are tried, so a pathological digest cannot loop; k is capped at m).

Why this derivation, measured (``bench/bloom_fpr.py`` and the notes in ``bench/RESULTS.md``):
- plain or enhanced double hashing mod m, and double hashing in 2**64 reduced without the
  finalizer, put a value's positions on an arithmetic progression, which collides often when
  m is small or not prime (m = 127, 255, 511, 1023 for the usual sizes): FPRs from 1.3x to
  more than 60x the optimum;
- independent positions drawn with replacement are exactly the textbook Bloom filter, whose
  real FPR exceeds the textbook formula when k is large for m (16 B, 5 values, k = 18:
  exact 7.5e-6 vs formula 5.3e-6, 1.4x); distinct positions per value bring it to 1.03x.
"""

from __future__ import annotations

import math
from enum import IntEnum
from functools import lru_cache

import mmh3

from bloom.errors import BloomError
from bloom.phash2 import phash2_pair

__all__ = [
    "DEFAULT_SIZE",
    "MAX_K",
    "MAX_SIZE",
    "MIN_SIZE",
    "Scheme",
    "check_scheme",
    "check_size",
    "choose_k",
    "digest",
    "digest_mask",
    "mmh3_pair",
    "positions",
    "theoretical_fpr",
    "unfiltered_mask",
]

MIN_SIZE = 16  # bytes; osiris' smallest filter
MAX_SIZE = 255  # bytes; the header's filter size is one byte
DEFAULT_SIZE = 16  # osiris' default
MAX_K = 255  # MMH3 param is header byte 46
MMH3_SEED = 0

_M64 = (1 << 64) - 1
_SPLITMIX_1 = 0xBF58476D1CE4E5B9  # splitmix64 finalizer multipliers (Steele et al.)
_SPLITMIX_2 = 0x94D049BB133111EB
# Lanes tried per wanted MMH3 position before giving up (a bound so no digest loops forever;
# taking k of m positions needs about m * ln(m / (m - k)) lanes, far below this for k <= m).
_MAX_LANES_PER_POSITION = 64
_MAX_LANES_EXTRA = 1024


class Scheme(IntEnum):
    """Chunk filter scheme, header byte 45 (0 = what osiris writes)."""

    OSIRIS = 0
    MMH3 = 1


def check_size(size: int) -> int:
    """Return ``size`` if it is a valid filter size in bytes (16..255), else raise BloomError."""
    if isinstance(size, bool) or not isinstance(size, int) or not MIN_SIZE <= size <= MAX_SIZE:
        raise BloomError(f"filter size must be an integer {MIN_SIZE}..{MAX_SIZE} bytes, got {size!r}")
    return size


def check_scheme(scheme: int) -> Scheme:
    """Return ``scheme`` as a ``Scheme``, or raise BloomError if it is not one we write."""
    if isinstance(scheme, bool) or not isinstance(scheme, int):
        raise BloomError(f"filter scheme must be a bloom.Scheme, got {scheme!r}")
    try:
        return Scheme(scheme)
    except ValueError:
        known = ", ".join(f"{s.value} ({s.name.lower()})" for s in Scheme)
        raise BloomError(f"unknown filter scheme {scheme!r}; known: {known}") from None


def unfiltered_mask(size: int) -> int:
    """Mask of bit 0 (chunk has an unfiltered entry) for a filter of ``size`` bytes."""
    return 1 << (8 * size - 1)


def theoretical_fpr(m: int, n: int, k: int) -> float:
    """Standard Bloom false-positive rate ``(1 - (1 - 1/m)**(k*n))**k`` for m bits, n values."""
    if n <= 0:
        return 0.0
    return (1.0 - math.exp(k * n * math.log1p(-1.0 / m))) ** k


@lru_cache(maxsize=4096)
def choose_k(n: int, size: int) -> int:
    """Number of MMH3 positions for ``n`` distinct values in a ``size``-byte filter.

    The integer k in 1..MAX_K that minimises ``theoretical_fpr(8*size - 1, n, k)``; the
    optimum lies next to ``m/n * ln 2``, so only its neighbours are compared.
    """
    m = 8 * size - 1
    if n <= 0:
        return 1
    # (k never exceeds m: m >= 127 and the optimum is below m * ln 2.)
    centre = m / n * math.log(2)
    candidates = {max(1, min(MAX_K, c)) for c in range(int(centre) - 1, int(centre) + 3)}
    return min(sorted(candidates), key=lambda k: theoretical_fpr(m, n, k))


def mmh3_pair(value: bytes) -> tuple[int, int]:
    """The MMH3 hash pair of ``value``, uncached (for callers that keep their own cache)."""
    h = mmh3.hash128(value, MMH3_SEED, True, False)
    return h & _M64, h >> 64


_mmh3_digest = lru_cache(maxsize=1 << 14)(mmh3_pair)


def digest(value: bytes, scheme: Scheme) -> tuple[int, int]:
    """The size-independent hash pair of ``value`` under ``scheme`` (cached per value)."""
    if scheme == Scheme.MMH3:
        return _mmh3_digest(value)
    return phash2_pair(value)


def positions(dig: tuple[int, int], size: int, scheme: Scheme, param: int) -> list[int]:
    """Bit positions (1..8*size-1, MSB-first numbering) of a digest for one size and param.

    OSIRIS: the two osiris positions (they may coincide). MMH3: ``param`` distinct positions
    (at most m), taken from the lanes in order, skipping a lane whose position was already taken.
    """
    m = 8 * size - 1
    if scheme == Scheme.OSIRIS:
        return [dig[0] % m + 1, dig[1] % m + 1]
    h1, h2 = dig[0], dig[1] | 1
    want = min(param, m)
    out: list[int] = []
    seen: set[int] = set()
    for i in range(_MAX_LANES_PER_POSITION * want + _MAX_LANES_EXTRA):
        if len(out) == want:
            break
        z = (h1 + i * h2) & _M64
        z = ((z ^ (z >> 30)) * _SPLITMIX_1) & _M64
        z = ((z ^ (z >> 27)) * _SPLITMIX_2) & _M64
        p = 1 + ((((z ^ (z >> 31)) >> 32) * m) >> 32)
        if p not in seen:
            seen.add(p)
            out.append(p)
    return out


def digest_mask(dig: tuple[int, int], size: int, scheme: Scheme, param: int) -> int:
    """The value's bits as a mask over the filter read as a big-endian integer."""
    top = 8 * size - 1
    if scheme == Scheme.OSIRIS:
        return (1 << (top - 1 - dig[0] % top)) | (1 << (top - 1 - dig[1] % top))
    # Same arithmetic as ``positions``, inlined: this is the write path's inner loop.
    h1, h2 = dig[0], dig[1] | 1
    want = min(param, top)
    mask = 0
    taken = 0
    for i in range(_MAX_LANES_PER_POSITION * want + _MAX_LANES_EXTRA):
        if taken == want:
            break
        z = (h1 + i * h2) & _M64
        z = ((z ^ (z >> 30)) * _SPLITMIX_1) & _M64
        z = ((z ^ (z >> 27)) * _SPLITMIX_2) & _M64
        bit = 1 << (top - 1 - ((((z ^ (z >> 31)) >> 32) * top) >> 32))
        if not mask & bit:
            mask |= bit
            taken += 1
    return mask
