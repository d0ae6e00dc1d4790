"""What taking a Publish frame of one message size apart costs per message, four ways, in one
interpreter (pure Python and the standard library only).

Why: a Publish v1 entry is ``publishing id u64 | size u32 | message`` and a chunk's simple
entry ``size u32 | message``, so a frame could be stored almost as it came. This times, for a
frame of ``--count`` messages of ``--size`` bytes, from the frame's bytes to what storage is
handed and the ids a PublishConfirm needs:
- ``walk``: the per-message decode and copy (a tuple, a memoryview and ``bytes()`` each: the
  path before ``PackedEntries``);
- ``packed``: ``PackedEntries`` (strided size checks, ids and bodies in one ``struct`` call each:
  what the broker does now);
- ``iter_unpack``: one buffer of chunk entries by ``b"".join`` over ``Struct.iter_unpack``
  (C loops, one bytes object per message still), ids likewise;
- ``re-pack``: one buffer of chunk entries with no object per message: the frame copied into a
  ``bytearray`` and the 8 id bytes of every entry deleted by 8 strided ``del``s; the ids as the
  PublishConfirm's bytes, interleaved from 8 strided slices.

    .venv/bin/python -m bench.publish_repack [--count 1000] [--size 105]
"""

from __future__ import annotations

import argparse
import os
import struct
import timeit
from operator import itemgetter

from amqp_stream.streamproto import Publish
from amqp_stream.streamproto.frames import decode, encode

SIMPLE = struct.Struct(">QI")


def walk(raw: bytes) -> tuple[list[bytes], list[int]]:
    view = memoryview(raw)
    _, count = struct.unpack_from(">Bi", view, 4)
    pos, bodies, ids = 9, [], []
    for _ in range(count):
        pid, size = SIMPLE.unpack_from(view, pos)
        m = (pid, None, view[pos + 12:pos + 12 + size], None)
        pos += 12 + size
        bodies.append(bytes(m[2]))
        ids.append(m[0])
    return bodies, ids


def packed(raw: bytes) -> tuple[tuple[bytes, ...], tuple[int, ...]]:
    m = decode(raw).messages
    return m.bodies(), m.ids()  # type: ignore[union-attr]


def iter_unpack(raw: bytes, size: int) -> tuple[bytes, tuple[int, ...]]:
    view = memoryview(raw)[9:]
    entries = b"".join(map(itemgetter(0), struct.Struct(f"8x{4 + size}s").iter_unpack(view)))
    ids = tuple(map(itemgetter(0), struct.Struct(f">Q{4 + size}x").iter_unpack(view)))
    return entries, ids


def repack(raw: bytes, count: int, size: int) -> tuple[bytearray, bytearray]:
    stride = 12 + size
    src = raw[9:]
    out = bytearray(src)
    for k in range(8):
        del out[::stride - k]
    ids = bytearray(8 * count)
    for k in range(8):
        ids[k::8] = src[k::stride]
    return out, ids


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--size", type=int, default=105)
    args = parser.parse_args()
    count, size = args.count, args.size
    raw = encode(Publish(1, tuple((i, None, bytes([i % 251]) * size, None)
                                  for i in range(count))))[4:]
    out, ids = repack(raw, count, size)  # the ways agree
    assert bytes(out) == iter_unpack(raw, size)[0]
    assert bytes(ids) == struct.pack(f">{count}Q", *range(count)) and packed(raw)[1] == tuple(range(count))
    ways = {"walk": lambda: walk(raw), "packed": lambda: packed(raw),
            "iter_unpack": lambda: iter_unpack(raw, size),
            "re-pack": lambda: repack(raw, count, size)}
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; a frame of {count} "
          f"messages of {size} bytes; best of 7 (2 shared cores)")
    for name, fn in ways.items():
        n = max(1, 200_000 // count)
        best = min(timeit.repeat(fn, number=n, repeat=7)) / n / count * 1e9
        print(f"  {name:12s} {best:7.1f} ns per message")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
