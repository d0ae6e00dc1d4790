"""storage.offsets: the one grammar of offset specs and intervals (the broker's AMQP offset spec,
x-max-age, the CLI's --from and Spark's options all parse through it)."""

from __future__ import annotations

import pytest

from storage import TIMESTAMP_FROM_MS, OffsetSpec, StorageError, parse_interval_ms

DAY = 86_400_000


@pytest.mark.parametrize("text,ms", [("30s", 30_000), ("10m", 600_000), ("2h", 7_200_000),
                                     ("7D", 7 * DAY), ("7d", 7 * DAY), ("2w", 14 * DAY),
                                     ("1M", 30 * DAY), ("1Y", 365 * DAY), ("250ms", 250),
                                     (" 5m ", 300_000)])
def test_intervals(text, ms):
    assert parse_interval_ms(text) == ms


@pytest.mark.parametrize("text", ["3D", "12h", "1Y", "2M", "30m", "9s"])
def test_rabbitmq_intervals_are_a_subset(text):
    assert parse_interval_ms(text, rabbitmq=True) == parse_interval_ms(text)


@pytest.mark.parametrize("text", ["", "0m", "10", "10 m", "m10", " 5m", "3d", "2w", "250ms",
                                  "10m\n", "١m"])
def test_rabbitmq_intervals_refuse_the_rest(text):
    with pytest.raises(StorageError, match="not an interval"):
        parse_interval_ms(text, rabbitmq=True)


def test_offset_spec_text_forms():
    now = 10 * DAY
    assert OffsetSpec.parse("first") == OffsetSpec.first()
    assert OffsetSpec.parse(" next ") == OffsetSpec.next()
    assert OffsetSpec.parse("42") == OffsetSpec.offset(42)
    assert OffsetSpec.parse("@1234") == OffsetSpec.timestamp(1234)
    assert OffsetSpec.parse("10m", now_ms=now) == OffsetSpec.timestamp(now - 600_000)
    big = str(TIMESTAMP_FROM_MS + 5)
    assert OffsetSpec.parse(big) == OffsetSpec.offset(TIMESTAMP_FROM_MS + 5)
    assert OffsetSpec.parse(big, timestamp_from=TIMESTAMP_FROM_MS) == OffsetSpec.timestamp(
        TIMESTAMP_FROM_MS + 5)
    assert str(OffsetSpec.parse("last")) == "last" and str(OffsetSpec.offset(7)) == "offset:7"


def test_rabbitmq_offset_spec_strings_are_names_and_intervals_only():
    assert OffsetSpec.parse("last", rabbitmq=True) == OffsetSpec.last()
    assert OffsetSpec.parse("2M", now_ms=100 * DAY, rabbitmq=True) == OffsetSpec.timestamp(40 * DAY)
    for text in ("42", "@1234", "first ", "0m", "3d"):
        with pytest.raises(StorageError, match="not an offset spec"):
            OffsetSpec.parse(text, rabbitmq=True)
