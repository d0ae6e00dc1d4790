"""What a fresh page costs on this machine: an anonymous page and a page-cache page, recycled
(memory a process or a deleted file has just given back) and new (beyond what was given back).

Why: a broker writes every byte of a stream to the page cache, and on some virtual machines a
page the guest takes for the first time, or takes back after it was reported free to the host
(virtio-balloon free page reporting, as on the Firecracker VMs this project is benchmarked on),
costs several microseconds of the guest's CPU, where bare metal pays ~0.3 µs. A write bench that
writes hundreds of MB of uncompressed log against Parquet's few compressed MB then measures the
machine as much as the software. This prints the figures, so that a bench's result can be read
with them, and whether the machine reports free pages.

Run: ``.venv/bin/python -m bench.page_cost [--mib 256]``
"""

from __future__ import annotations

import argparse
import mmap
import os
import time
from pathlib import Path

from bench import scratch_dir

PAGE = mmap.PAGESIZE
_BALLOON_REPORTING_BIT = 5  # VIRTIO_BALLOON_F_REPORTING


def free_page_reporting() -> bool | None:
    """Whether a virtio balloon with free page reporting is present (None: no virtio balloon)."""
    for dev in Path("/sys/bus/virtio/devices").glob("*"):
        try:
            if int((dev / "device").read_text(), 16) != 5:  # virtio device id 5: balloon
                continue
            return (dev / "features").read_text()[_BALLOON_REPORTING_BIT] == "1"
        except (OSError, ValueError, IndexError):
            continue
    return None


def anonymous(mib: int) -> float:
    """Microseconds a page of touching ``mib`` MiB of a fresh anonymous mapping."""
    size = mib << 20
    m = mmap.mmap(-1, size)
    t = time.perf_counter()
    for off in range(0, size, PAGE):
        m[off] = 1
    secs = time.perf_counter() - t
    m.close()
    return secs / (size // PAGE) * 1e6


def page_cache(path: Path, mib: int) -> float:
    """Microseconds a page of appending ``mib`` MiB to a new file (one 1 MiB write a call)."""
    block = os.urandom(1 << 20)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        t = time.perf_counter()
        for _ in range(mib):
            os.write(fd, block)
        secs = time.perf_counter() - t
    finally:
        os.close(fd)
    return secs / (mib * (1 << 20) // PAGE) * 1e6


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=256, help="MiB a measurement (default 256)")
    ap.add_argument("--new-mib", type=int, default=3072,
                    help="MiB of page cache kept (not deleted), in rounds of --mib: the rounds show "
                         "where what was given back runs out (default 3072)")
    args = ap.parse_args(argv)
    tmp = scratch_dir("page-cost-")
    reporting = free_page_reporting()
    print(f"free page reporting (virtio balloon): "
          f"{'none (no balloon)' if reporting is None else 'on' if reporting else 'off'}")
    print(f"  anonymous page, fresh mapping        {anonymous(args.mib):6.2f} us a page")
    # recycled: write a file, delete it, write again (the pages the deleted file gave back)
    page_cache(tmp / "a", args.mib)
    (tmp / "a").unlink()
    print(f"  page-cache page, recycled            {page_cache(tmp / 'b', args.mib):6.2f} us a page")
    # then pages kept in use, 256 MiB at a time: once what was given back is used up, the
    # kernel takes pages it has not touched lately (on a reporting VM: from the host)
    rounds = [page_cache(tmp / f"keep{i}", args.mib) for i in range(max(1, args.new_mib // args.mib))]
    print("  page-cache page, kept, by round      "
          + " ".join(f"{us:.2f}" for us in rounds) + f" us a page ({args.mib} MiB a round)")
    for p in tmp.iterdir():
        p.unlink()
    print(f"  a 233-byte row costs {233 / PAGE:.3f} page-cache pages")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
