"""Cost of the broker's message byte work (``amqp_stream.wire``) against proton.Message.

Why: the broker must not build ``proton.Message`` objects on its hot paths. This measures, on the
same encoded messages and in the same run, ``proton.Message.decode`` (the baseline) and what the
broker does instead: ``MessageView.from_bytes`` + reading one section, + picking the few keys a filter reads
(``MessageView.pick``: what the compiled filters do), ``filter_value``, ``stored_form`` (the
publish path's one walk: with and without delivery annotations to cut out, and a message whose
sections come out of order), ``with_stream_offset`` (extending the annotations map, and
inserting a new section), a compiled application-properties filter on bytes; and for the byte
edits, the proton way too (decode, change, encode).

The message is a typical filtered-stream message: header (durable), message annotations with
``x-stream-filter-value``, properties (message-id, subject, creation-time), 5 application
properties (string, long, double, boolean, string), a 100-byte data body.

Each figure is the best of ``--repeat`` rounds of ``--number`` calls (µs per call); each round
times every operation in turn, so a change of machine load hits all of them alike. Ratios are
baseline time / time (higher is faster than proton.Message.decode).

Run: ``.venv/bin/python -m bench.message_codec`` (``--quick`` for a smaller run).
"""

from __future__ import annotations

import argparse
import os
import timeit

import proton

from amqp_stream.wire import (KeyPicker, MessageView, filter_value, split_sections, stored_form,
                              with_stream_offset)
from amqp_stream.filtering import install
from sqlfilter import compile_property_filter

install()  # filters read messages through the wire, as in the broker

sym = proton.symbol


def typical_message(delivery_annotations: bool = False, annotations: bool = True) -> bytes:
    m = proton.Message()
    m.durable = True
    m.id = "msg-000123"
    m.subject = "orders"
    m.creation_time = 1_700_000_000.123
    m.properties = {"region": "eu-west", "n": 12345, "price": 9.5, "ok": True, "tag": "abc"}
    if annotations:
        m.annotations = {sym("x-stream-filter-value"): "eu-west"}
    if delivery_annotations:
        m.instructions = {sym("x-opt-delivery"): "x"}
    m.inferred = True
    m.body = bytes(range(100))
    return bytes(m.encode())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    number = 2000 if args.quick else args.number
    repeat = 3 if args.quick else args.repeat

    data = typical_message()
    with_da = typical_message(delivery_annotations=True)
    no_ma = typical_message(annotations=False)
    # properties before the message annotations (as the Node amqp10 client sends them)
    swap = {0x72: 0x73, 0x73: 0x72}
    out_of_order = b"".join(data[start:end] for _, start, _, end in sorted(
        split_sections(data), key=lambda section: swap.get(section[0], section[0])))
    assert stored_form(out_of_order)[0] == data
    stored = with_stream_offset(data, 1)  # what a reader finds after a first delivery edit
    app_filter = compile_property_filter(application_properties={"region": "eu-west", "ok": True})
    prop_filter = compile_property_filter(properties={sym("subject"): "&p:ord"})
    two_keys = KeyPicker(["region", "ok"])  # what a filter naming two keys asks for
    subject = KeyPicker(["subject"])

    def proton_decode():
        proton.Message().decode(data)

    def proton_app_props():
        m = proton.Message()
        m.decode(data)
        return m.properties

    def proton_strip():
        m = proton.Message()
        m.decode(with_da)
        m.instructions = None
        return m.encode()

    def proton_offset():
        m = proton.Message()
        m.decode(data)
        m.annotations[sym("x-stream-offset")] = 12345
        return m.encode()

    cases = [
        ("proton.Message.decode (baseline)", proton_decode),
        ("proton decode + application properties", proton_app_props),
        ("from_bytes + application_properties", lambda: MessageView.from_bytes(data).application_properties),
        ("from_bytes + properties", lambda: MessageView.from_bytes(data).properties),
        ("from_bytes + header", lambda: MessageView.from_bytes(data).header),
        ("from_bytes + message_annotations", lambda: MessageView.from_bytes(data).message_annotations),
        ("from_bytes + pick 2 application properties",
         lambda: MessageView.from_bytes(data).pick(None, two_keys)),
        ("from_bytes + pick subject + 2 app properties",
         lambda: MessageView.from_bytes(data).pick(subject, two_keys)),
        ("app-properties filter .matches(bytes)", lambda: app_filter.matches(data)),
        ("properties filter .matches(bytes)", lambda: prop_filter.matches(data)),
        ("filter_value", lambda: filter_value(data)),
        ("filter_value (no annotations)", lambda: filter_value(no_ma)),
        ("stored_form (delivery annotations cut)", lambda: stored_form(with_da)),
        ("stored_form (nothing to change)", lambda: stored_form(data)),
        ("stored_form (out of order: rewritten)", lambda: stored_form(out_of_order)),
        ("proton: decode, drop DA, encode", proton_strip),
        ("with_stream_offset (extend map)", lambda: with_stream_offset(data, 12345)),
        ("with_stream_offset (replace)", lambda: with_stream_offset(stored, 12345)),
        ("with_stream_offset (new section)", lambda: with_stream_offset(no_ma, 12345)),
        ("proton: decode, add offset, encode", proton_offset),
    ]
    print(f"message: {len(data)} bytes; load average {os.getloadavg()[0]:.2f}; "
          f"best of {repeat} rounds x {number} calls (rounds interleave all operations)")
    timings = {name: float("inf") for name, _ in cases}
    for _ in range(repeat):  # round-robin, so load changes hit every operation alike
        for name, fn in cases:
            timings[name] = min(timings[name], timeit.timeit(fn, number=number) / number * 1e6)
    baseline = timings[cases[0][0]]
    print(f"{'operation':44} {'µs/op':>8} {'ops/s':>10} {'vs decode':>10}")
    for name, _ in cases:
        us = timings[name]
        print(f"{name:44} {us:8.2f} {1e6 / us:10,.0f} {baseline / us:9.1f}x")
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
