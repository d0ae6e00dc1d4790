"""info's message_count right after publish confirms, while tracking chunks are being written.

A confirm means the message is stored, so a count read after it holds it: never one short
(a tracking chunk's index record is on disk before the committed end moves past it) and never
over (a segment's last records, written after a count read it, still count once a newer
segment exists). Small segments make rollovers, each with a tracking snapshot, happen often.
"""

from __future__ import annotations

import threading

from amqp_stream import client as amqp

ROUNDS = 150


def _store_offsets(url: str, stream: str, stop: threading.Event, errors: list) -> None:
    """Store consumer offsets as fast as the broker answers: a tracking chunk after another."""
    try:
        with amqp.connect(url) as c:
            i = 0
            while not stop.is_set():
                c.store_offset(stream, f"reader-{i % 3}", i)
                i += 1
    except Exception as exc:  # noqa: BLE001 - reported by the test
        errors.append(exc)


def test_message_count_after_confirms_is_the_confirmed_count_while_offsets_are_stored(broker, stream_name):
    with amqp.connect(broker.url) as c:
        c.declare(stream_name, {"x-stream-max-segment-size-bytes": 2000})
        stop, errors = threading.Event(), []
        storer = threading.Thread(target=_store_offsets, args=(broker.url, stream_name, stop, errors))
        storer.start()
        counts = []
        try:
            with c.publisher(stream_name) as pub:
                for r in range(1, ROUNDS + 1):
                    for _ in range(5):
                        pub.publish(b"m" * 40)
                    pub.flush()  # every message confirmed
                    counts.append(c.info(stream_name)["message_count"] - 5 * r)
        finally:
            stop.set()
            storer.join(30)
        assert not errors, errors
        off = [(r, d) for r, d in enumerate(counts, 1) if d]
        assert not off, f"message_count - confirmed (round, difference): {off[:10]} ({len(off)} rounds)"
        assert c.info(stream_name)["next_offset"] > 5 * ROUNDS + 10  # the stores took offsets
        assert _segments(broker, stream_name) > 10
        with c.consumer(stream_name, offset="first", credit=1024) as con:
            assert sum(1 for _ in con.read_available()) == 5 * ROUNDS == c.info(stream_name)["message_count"]


def _segments(broker, name: str) -> int:
    """How many segments the stream's directory holds."""
    for d in (broker.data_dir / "streams").iterdir():
        meta = d / "stream.json"
        if meta.is_file() and f'"name": "{name}"' in meta.read_text():
            return len(list((d / "log").glob("*.segment")))
    raise AssertionError(f"no directory for {name}")
