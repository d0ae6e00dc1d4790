"""Data source options: one place that reads them, so reader, writer and docs agree.

Spark hands options over as a case-insensitive map of strings; ``SourceOptions.parse`` turns
them into typed fields once on the driver, and the (picklable) result travels to the tasks, which
open their own ``amqp_stream.client`` connection with ``connect()``.
"""

from __future__ import annotations

import datetime as _dt
import difflib
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, overload

from amqp_stream import client as amqp
from amqp_stream.spark.super_stream import ROUTING_HASHES, ROUTING_TYPES, partitions

__all__ = ["SourceOptions", "OptionError", "OPTION_NAMES", "MAX_WRITE_NAME"]


class OptionError(ValueError):
    """A missing or invalid data source option."""


def _bool(value: str | None, default: bool) -> bool:
    if value is None:
        return default
    v = str(value).strip().lower()
    if v in ("true", "1", "yes", "on"):
        return True
    if v in ("false", "0", "no", "off"):
        return False
    raise OptionError(f"expected true or false, got {value!r}")


@overload
def _int(options: Mapping[str, str], key: str, default: int) -> int: ...
@overload
def _int(options: Mapping[str, str], key: str, default: None) -> int | None: ...
def _int(options: Mapping[str, str], key: str, default: int | None) -> int | None:
    raw = options.get(key)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        raise OptionError(f"option {key} must be an integer, got {raw!r}") from None


MAX_WRITE_NAME = 240  # bytes: a reference is '<writeName>/<partition>', at most 255 bytes

#: every option the data source reads, as documented (Spark hands them over lower-cased)
OPTION_NAMES = (
    "url", "stream", "user", "password", "tlsCaFile", "tlsCertFile", "tlsKeyFile", "tlsKeyPassword",
    "tlsVerify", "tlsPeerName", "timeout", "declare", "filterValueColumn", "window", "properties",
    "startingOffset", "startingTimestamp", "endingOffset", "numPartitions", "maxRecordsPerPartition",
    "maxRecordsPerTrigger", "credit", "pushdown", "filterValues", "matchUnfiltered", "sqlFilter",
    "writeName", "exactlyOnce", "consumerName", "failOnDataLoss", "streamUrl",
    "superStream", "routingKeyColumn", "routingHash", "routingType",
)
# options Spark itself may pass along (``load(path)``, a streaming query's checkpoint)
_SPARK_OPTIONS = ("path", "checkpointlocation")
_KNOWN = {name.lower(): name for name in OPTION_NAMES}


def _check_names(opts: Mapping[str, str]) -> None:
    """An unknown option is an error naming the closest known one: a misspelt option (Kafka's
    ``startingOffsets``) would otherwise be ignored and, say, read everything."""
    for key in opts:
        if key in _KNOWN or key in _SPARK_OPTIONS or key.startswith("x-"):
            continue
        close = difflib.get_close_matches(key, list(_KNOWN), n=1, cutoff=0.6)
        hint = f"; did you mean {_KNOWN[close[0]]}?" if close else ""
        raise OptionError(f"unknown option {key!r}{hint} (options: {', '.join(OPTION_NAMES)}, "
                          f"and x-... stream arguments)")


def _timestamp_ms(value: str | None) -> int | None:
    """``startingTimestamp``: milliseconds since the epoch, or an ISO-8601 time (UTC if no zone)."""
    if value is None:
        return None
    text = value.strip()
    if text.isdigit():
        return int(text)
    try:
        t = _dt.datetime.fromisoformat(text)
    except ValueError:
        raise OptionError(f"option startingTimestamp must be milliseconds since the epoch or an "
                          f"ISO-8601 time, got {value!r}") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=_dt.timezone.utc)
    return int(t.timestamp() * 1000)


def _stream_url(url: str | None, tls: amqp.TlsOptions | None) -> str | None:
    """``streamUrl``: a ``rabbitmq-stream://`` URL (plain TCP only: the stream client has no TLS)."""
    if url is None:
        return None
    from amqp_stream.client.stream import parse_stream_url
    try:
        parse_stream_url(url)
    except amqp.ClientError as exc:
        raise OptionError(f"option streamUrl: {exc}") from None
    if tls is not None:
        raise OptionError("option streamUrl: the stream-protocol client has no TLS; leave streamUrl out to "
                          "read and write over AMQP 1.0 with TLS")
    return url


def _check_super_stream(opts: Mapping[str, str], stream: str | None, super_stream: str | None) -> None:
    """``superStream`` instead of ``stream``; its partitions are asked with the stream
    protocol, so it needs ``streamUrl``; the routing options are a super stream's."""
    if super_stream is None:
        for key, name in (("routingkeycolumn", "routingKeyColumn"), ("routinghash", "routingHash"),
                          ("routingtype", "routingType")):
            if key in opts:
                raise OptionError(f"option {name} is for writes to a super stream (option superStream)")
        return
    if not super_stream:
        raise OptionError("option superStream must name a super stream")
    if stream is not None:
        raise OptionError("options stream and superStream are alternatives: give one")
    if "streamurl" not in opts:
        raise OptionError("option superStream needs streamUrl (rabbitmq-stream://host:5552): the super "
                          "stream's partitions are asked with the stream protocol's Partitions command")
    if _bool(opts.get("declare"), False):
        raise OptionError("declare=true is for streams: create the super stream first (CLI or a stream client)")
    scheme = opts.get("routinghash", "murmur3").strip().lower()
    if scheme not in ROUTING_HASHES:
        raise OptionError(f"option routingHash must be one of {', '.join(ROUTING_HASHES)}, got {scheme!r}")
    kind = opts.get("routingtype", "hash").strip().lower()
    if kind not in ROUTING_TYPES:
        raise OptionError(f"option routingType must be one of {', '.join(ROUTING_TYPES)}, got {kind!r}")
    if kind == "key" and "routinghash" in opts:
        raise OptionError("option routingHash is for routingType=hash: routingType=key asks the broker "
                          "which partitions a key's binding goes to")


def _argument(value: str) -> Any:
    """Stream arguments arrive as strings; the integer ones go to the broker as integers."""
    return int(value) if value.strip().lstrip("-").isdigit() else value


@dataclass(frozen=True)
class SourceOptions:
    url: str
    stream: str
    user: str | None = None
    password: str | None = None
    tls: amqp.TlsOptions | None = None
    timeout: float = 30.0
    # writing
    filter_value_column: str | None = None
    window: int = 512
    declare: bool = False
    arguments: dict = field(default_factory=dict)
    write_name: str | None = None                  # batch: the write's name, for exactly once
    exactly_once: bool = False                     # publish under deduplicating references
    stream_url: str | None = None                  # write over the stream protocol at this URL
    # a super stream (``stream`` holds its name too): its partitions, asked at ``stream_url``
    super_stream: str | None = None
    routing_key_column: str | None = None          # writing to a super stream: the routing key
    routing_hash: str = "murmur3"                  # ... hashed as these clients hash it
    routing_type: str = "hash"                     # ... or "key": the partitions bound with it
    # reading: start at this consumer's stored offset (streaming: store progress there)
    consumer_name: str | None = None
    # reading
    properties_ddl: str | None = None
    starting_offset: str = "first"
    starting_timestamp_ms: int | None = None       # instead of starting_offset
    ending_offset: str = "latest"
    num_partitions: int | None = None
    max_records_per_partition: int = 100_000
    credit: int = 512
    pushdown: bool = True
    filter_values: tuple[str, ...] | None = None  # explicit stage 1 (streaming has no pushFilters)
    match_unfiltered: bool = False
    sql_filter: str | None = None                  # explicit stage 2
    max_records_per_trigger: int | None = None     # streaming: offsets per micro-batch
    fail_on_data_loss: bool = True                 # streaming: offsets removed before being read

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> "SourceOptions":
        # Spark's map is case-insensitive but lower-cases keys when iterated.
        opts = {str(k).lower(): v for k, v in options.items()}
        _check_names(opts)
        if "startingoffset" in opts and "startingtimestamp" in opts:
            raise OptionError("startingOffset and startingTimestamp are alternatives: give one")
        url, stream, super_stream = opts.get("url"), opts.get("stream"), opts.get("superstream")
        if not url:
            raise OptionError("option url is required (e.g. amqp://127.0.0.1:5672)")
        _check_super_stream(opts, stream, super_stream)
        stream = stream or super_stream
        if not stream:
            raise OptionError("option stream (or superStream) is required")
        tls = None
        if any(k.startswith("tls") for k in opts):
            tls = amqp.TlsOptions(ca_file=opts.get("tlscafile"), cert_file=opts.get("tlscertfile"),
                                  key_file=opts.get("tlskeyfile"), key_password=opts.get("tlskeypassword"),
                                  verify=_bool(opts.get("tlsverify"), True), peer_name=opts.get("tlspeername"))
        write_name, consumer_name = opts.get("writename"), opts.get("consumername")
        if write_name is not None and not 0 < len(write_name.encode("utf-8")) <= MAX_WRITE_NAME:
            raise OptionError(f"option writeName must be 1..{MAX_WRITE_NAME} bytes of UTF-8 (it names "
                              f"the publisher references '<writeName>/<partition>'), got {write_name!r}")
        if consumer_name is not None and not 0 < len(consumer_name.encode("utf-8")) <= 255:
            raise OptionError(f"option consumerName must be 1..255 bytes of UTF-8, got {consumer_name!r}")
        fv = opts.get("filtervalues")
        try:
            timeout = float(opts.get("timeout", "30"))
        except ValueError:
            raise OptionError(f"option timeout must be a number of seconds, got {opts['timeout']!r}") from None
        return cls(
            url=url, stream=stream, user=opts.get("user"), password=opts.get("password"), tls=tls,
            timeout=timeout,
            filter_value_column=opts.get("filtervaluecolumn"),
            window=_int(opts, "window", 512), declare=_bool(opts.get("declare"), False),
            arguments={k: _argument(v) for k, v in opts.items() if k.startswith("x-")},
            write_name=write_name, exactly_once=_bool(opts.get("exactlyonce"), write_name is not None),
            consumer_name=consumer_name, stream_url=_stream_url(opts.get("streamurl"), tls),
            properties_ddl=opts.get("properties"),
            starting_offset=opts.get("startingoffset", "first"),
            starting_timestamp_ms=_timestamp_ms(opts.get("startingtimestamp")),
            ending_offset=opts.get("endingoffset", "latest"),
            num_partitions=_int(opts, "numpartitions", None),
            max_records_per_partition=_int(opts, "maxrecordsperpartition", 100_000),
            credit=_int(opts, "credit", 512), pushdown=_bool(opts.get("pushdown"), True),
            filter_values=tuple(v.strip() for v in fv.split(",")) if fv else None,
            match_unfiltered=_bool(opts.get("matchunfiltered"), False),
            sql_filter=opts.get("sqlfilter"),
            max_records_per_trigger=_int(opts, "maxrecordspertrigger", None),
            fail_on_data_loss=_bool(opts.get("failondataloss"), True),
            super_stream=super_stream, routing_key_column=opts.get("routingkeycolumn"),
            routing_hash=opts.get("routinghash", "murmur3").strip().lower(),
            routing_type=opts.get("routingtype", "hash").strip().lower(),
        )

    def partition_streams(self) -> list[str]:
        """The super stream's partition streams in partition order, asked at ``streamUrl``."""
        assert self.super_stream is not None and self.stream_url is not None  # parse checks both
        return partitions(self.stream_url, self.super_stream, user=self.user, password=self.password,
                          timeout=self.timeout)

    def for_partition(self, stream: str) -> "SourceOptions":
        """These options for one partition stream of the super stream (an ordinary stream)."""
        return replace(self, stream=stream, super_stream=None)

    def connect(self) -> amqp.Client:
        """A new client connection for this task (``amqp.ClientError`` when unreachable)."""
        return amqp.connect(self.url, user=self.user, password=self.password, tls=self.tls, timeout=self.timeout)
