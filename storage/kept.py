"""Large buffers kept and handed out again once nothing holds them.

Why: on a VM that gives freed pages back to its host (free page reporting), a page touched for
the first time costs ~3 µs (``bench.page_cost``), and glibc gives large freed blocks back
(``munmap``, heap trimming): a new 1 MiB buffer a Publish frame is 256 page faults. The
stream-protocol publish path needs such a buffer per large frame (its bytes live until storage
has written them) and one per chunk part the writer cuts from it; these are taken from here.

A buffer is handed out (``take``) and never given back explicitly: it is free again when
nothing but this object holds it (no ``memoryview``, array or slice of it either), which
``sys.getrefcount`` tells. What that count is for a free buffer is measured at import, the same
way it is read, rather than assumed.
"""

from __future__ import annotations

import sys
import threading

__all__ = ["KeptBuffers"]


def _refs(buf: bytearray) -> int:
    return sys.getrefcount(buf)


def _free_refs() -> int:
    """``_refs`` of a buffer that only a list holds, read as ``KeptBuffers.take`` reads it."""
    bufs = [bytearray(1)]
    buf = bufs[0]
    return _refs(buf)


_FREE = _free_refs()


class KeptBuffers:
    """At most ``count`` buffers of at most ``total`` bytes in all (their allocations), taken
    by any thread (a lock makes finding a free one and holding it one step).

    A buffer is taken again for a size between half its allocation and its allocation (a
    ``bytearray`` is resized in place then); else a new one is made, kept in place of a free
    one that does not fit, or beside the others while there is room, or not kept."""

    def __init__(self, count: int, total: int) -> None:
        self.count, self.total = count, total
        self._bufs: list[bytearray] = []
        self._lock = threading.Lock()

    def take(self, size: int) -> bytearray:
        """A buffer of ``size`` bytes (its content is what it was: write it all)."""
        with self._lock:
            bufs = self._bufs
            spare = -1
            kept = 0
            for k in range(len(bufs)):
                buf = bufs[k]
                room = buf.__alloc__()
                kept += room
                if _refs(buf) == _FREE:
                    if size < room <= 2 * size:
                        have = len(buf)
                        if have > size:
                            del buf[size:]
                        elif have < size:
                            buf += bytes(size - have)
                        return buf
                    spare = k
            new = bytearray(size + (size >> 3))  # room for the next ones' sizes
            del new[size:]
            room = new.__alloc__()
            if spare >= 0 and kept - bufs[spare].__alloc__() + room <= self.total:
                bufs[spare] = new
            elif len(bufs) < self.count and kept + room <= self.total:
                bufs.append(new)
            return new

    def holds(self, buf: object) -> bool:
        """``buf`` is one of the kept buffers (tests)."""
        return any(b is buf for b in self._bufs)

    def __len__(self) -> int:
        return len(self._bufs)
