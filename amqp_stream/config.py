"""The broker's settings: one typed object, loaded from a file, the environment and CLI flags.

Strategy: every setting is a field of ``BrokerConfig`` with its default, its type and a short help
text (the table ``FIELDS`` drives the CLI flags, the environment names and the file keys, so the
three cannot drift apart). Precedence, lowest first: built-in defaults, the config file
(``--config FILE`` or ``AMQP_STREAM_CONFIG``; TOML, or JSON when the name ends in ``.json``), the
environment (``AMQP_STREAM_<FIELD>``, e.g. ``AMQP_STREAM_PORT=5673``), then CLI flags. Values are
checked once, here; a bad value is a ``ConfigError`` naming the setting and where it came from.
The defaults run out of the box: data in ``./data``, listening on 127.0.0.1:5672.
"""

from __future__ import annotations

import json
import os
import tomllib
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Mapping

import bloom

__all__ = ["BrokerConfig", "ConfigError", "load", "ENV_PREFIX", "CLIENT_ENV", "unknown_environment"]

ENV_PREFIX = "AMQP_STREAM_"
# the client commands' variables (amqp_stream.commands.connect, perf), beside the broker's
# AMQP_STREAM_<FIELD> and AMQP_STREAM_CONFIG: every other AMQP_STREAM_* name is a typo
CLIENT_ENV = ("URL", "USER", "PASSWORD", "STREAM_URL", "MANAGEMENT_URL")


class ConfigError(ValueError):
    """Settings that cannot work (a bad value, an unreadable file, an unsafe combination)."""


@dataclass(frozen=True)
class BrokerConfig:
    host: str = "127.0.0.1"
    port: int = 5672
    data_dir: Path = Path("data")
    fsync: str = "always"
    fsync_interval_ms: int = 200
    filter_size: int = 16
    filter_scheme: str = "mmh3"
    metrics_port: int = 15692
    management_port: int = 15672
    log_level: str = "INFO"
    allow_anonymous: bool = False
    users_file: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    max_message_size: int = 16 * 1024 * 1024
    publisher_credit: int = 170
    max_unconfirmed: int = 4096
    max_unconfirmed_bytes: int = 64 * 1024 * 1024
    max_unconfirmed_bytes_total: int = 512 * 1024 * 1024
    max_connections: int = 10_000
    handshake_timeout: float = 10.0
    idle_timeout: float = 60.0
    event_loop: str = "uvloop"
    container_id: str | None = None
    stream_port: int = 5552
    stream_tls_port: int = 5551
    stream_advertised_host: str | None = None
    stream_advertised_port: int = 0
    stream_send_threads: int = -1
    stream_join_bytes: int = 0  # off: each stored chunk as it is, as RabbitMQ sends it
    auth_failure_delay: float = 3.0
    offset_store_every: int = 10_000
    offset_store_interval_ms: int = 5000
    cluster: str | None = None
    node_name: str | None = None
    replication_port: int = 5553
    cluster_session_timeout: float = 6.0
    cluster_quorum_timeout: float = 0.0
    cluster_static: Path | None = None
    cluster_user: str = "guest"
    cluster_password: str = "guest"
    cluster_secret: str | None = None

    def __post_init__(self) -> None:
        check(self)


HELP: dict[str, str] = {
    "host": "address to listen on",
    "port": "AMQP port",
    "data_dir": "directory holding the streams",
    "fsync": "durability before a publish is accepted: always (fsync each chunk), "
             "interval (fsync every --fsync-interval-ms), never (after the write)",
    "fsync_interval_ms": "fsync period for --fsync interval",
    "filter_size": f"chunk filter size in bytes of a stream without x-stream-filter-size-bytes "
                   f"({bloom.MIN_SIZE}..{bloom.MAX_SIZE})",
    "filter_scheme": "chunk filter hash scheme: mmh3 (default) or osiris (RabbitMQ-compatible)",
    "metrics_port": "Prometheus metrics port (0 = off)",
    "management_port": "management HTTP API port, compatible with RabbitMQ's (0 = off)",
    "log_level": "DEBUG, INFO, WARNING or ERROR",
    "allow_anonymous": "allow SASL ANONYMOUS beyond loopback / alongside a users file",
    "users_file": "file of user:password lines for SASL PLAIN",
    "tls_cert": "PEM certificate: amqps on --port, and the stream protocol over TLS on --stream-tls-port",
    "tls_key": "PEM private key of --tls-cert (unencrypted)",
    "max_message_size": "largest message accepted, in bytes",
    "publisher_credit": "link credit granted to each publisher (topped up at half)",
    "max_unconfirmed": "unconfirmed messages per publisher before credit stops being topped up",
    "max_unconfirmed_bytes": "bytes of unconfirmed messages per publisher link before it gets no "
                             "more credit (and, far over, its connection is not read)",
    "max_unconfirmed_bytes_total": "bytes of unconfirmed messages in the whole broker before "
                                   "publishers get no more credit and are not read",
    "max_connections": "connections served at once (all listeners); more are accepted and "
                       "closed at once, with a log line",
    "handshake_timeout": "seconds a new connection has to finish its handshake (SASL, TLS, open)",
    "event_loop": "uvloop (default; asyncio's loop when uvloop is not installed) or asyncio",
    "idle_timeout": "seconds of silence after which an AMQP client is disconnected (the open "
                    "frame announces half, as proton does, so clients heartbeat in time), and "
                    "that a stream client has to send a frame above the frame max; 0 = off",
    "container_id": "container id sent in the open frame (default: amqp-stream@<hostname>)",
    "stream_port": "RabbitMQ stream protocol port (0 = off)",
    "stream_tls_port": "RabbitMQ stream protocol port with TLS, when --tls-cert/--tls-key are "
                       "given (0 = off)",
    "stream_advertised_host": "host stream clients are told to connect to (Open, Metadata); "
                              "default: --host, or this machine's name when --host is a wildcard",
    "stream_advertised_port": "port stream clients are told to connect to (0 = --stream-port)",
    "stream_send_threads": "threads that send stream consumers' chunks (os.sendfile) off the "
                           "event loop: -1 = one per core, 0 = the loop sends them itself",
    "stream_join_bytes": "stored chunks that follow on go to a stream consumer joined into one "
                         "Deliver of up to this many data bytes (one credit; 0 = each as stored)",
    "auth_failure_delay": "seconds a stream client waits for the answer to a failed login or an "
                          "unknown vhost before its connection is closed, and an AMQP client "
                          "for its unknown vhost's socket to close (RabbitMQ: 3; slows "
                          "password guessing; 0 = at once; the handshake timeout still applies)",
    "offset_store_every": "a named AMQP consumer's offset is stored every N accepted settlements "
                          "(also every --offset-store-interval-ms and at detach; 0 = not by count)",
    "offset_store_interval_ms": "a named AMQP consumer's offset is stored this many ms after a "
                                "settlement moved it, if not stored since (0 = no timer)",
    "cluster": "join a cluster coordinated by ZooKeeper: zk://HOST:PORT[,HOST:PORT...]/PATH "
               "(docs/cluster.md; without it the broker is one node and needs no ZooKeeper)",
    "node_name": "this node's name in the cluster (unique among its nodes; needed with --cluster)",
    "replication_port": "port other nodes of the cluster replicate from (advertised with "
                        "--stream-advertised-host)",
    "cluster_session_timeout": "seconds of silence after which ZooKeeper ends a node's session "
                               "(its streams then elect new leaders); also how long a start, "
                               "a declare or a delete waits for an unreachable ZooKeeper",
    "cluster_quorum_timeout": "seconds a stream's leader goes without hearing from a quorum "
                              "of its members before it gives the leadership up, so the "
                              "members that reach each other elect another (0: 3 x "
                              "--cluster-session-timeout)",
    "cluster_user": "the stream-protocol user a cluster node logs in as to forward AMQP "
                    "publishes to a stream's leader (write on every stream; guest works on "
                    "loopback only)",
    "cluster_password": "that user's password (prefer the environment or the config file)",
    "cluster_secret": "the secret the cluster's nodes prove to each other (and the cluster "
                      "commands to them) on the replication port; default: the one under "
                      "--cluster's ZooKeeper path, made by the first node (prefer the "
                      "environment or the config file)",
    "cluster_static": "internal (tests, hand-made clusters): a JSON file of nodes and stream "
                      "layouts standing in for coordination, with this node's name "
                      "(amqp_stream.cluster.layouts.StaticLayouts; docs/cluster.md)",
}

# CLI flag names that differ from the field name
FLAGS: dict[str, str] = {"users_file": "--users"}

_CHOICES = {
    "fsync": ("always", "interval", "never"),
    "filter_scheme": ("mmh3", "osiris"),
    "log_level": ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"),
    "event_loop": ("uvloop", "asyncio"),
}


def flag_name(field_name: str) -> str:
    return FLAGS.get(field_name, "--" + field_name.replace("_", "-"))


def _field_types() -> dict[str, str]:
    return {f.name: str(f.type) for f in fields(BrokerConfig)}


def convert(name: str, value: Any, source: str) -> Any:
    """Convert a raw value (a string from env/CLI, or a file value) to the field's type."""
    kind = _field_types().get(name)
    if kind is None:
        from amqp_stream.words import did_you_mean

        raise ConfigError(f"unknown setting {name!r} in {source}{did_you_mean(name, _field_types())}")
    if value is None:
        return None
    try:
        if kind == "int":
            if isinstance(value, bool) or isinstance(value, float):
                raise ValueError("not an integer")
            return int(value)
        if kind == "float":
            if isinstance(value, bool):
                raise ValueError("not a number")
            return float(value)
        if kind == "bool":
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off"):
                return False
            raise ValueError("not a boolean")
        if kind.startswith("Path"):
            return Path(str(value)) if str(value) != "" else None
        if kind.startswith("str"):
            if not isinstance(value, (str, int)):
                raise ValueError("not a string")
            value = str(value)
            if name == "log_level":
                value = value.upper()
            return value
    except ValueError as exc:
        raise ConfigError(f"{source}: {name} = {value!r}: {exc}") from None
    return value


def check(config: BrokerConfig) -> None:
    """Raise ``ConfigError`` for values out of range."""
    for name, choices in _CHOICES.items():
        if getattr(config, name) not in choices:
            raise ConfigError(f"{name} must be one of {', '.join(choices)}, not {getattr(config, name)!r}")
    if not 0 < config.port < 65536:
        raise ConfigError(f"port must be 1..65535, not {config.port}")
    if not 0 <= config.stream_port < 65536 or not 0 <= config.stream_tls_port < 65536:
        raise ConfigError(f"stream_port and stream_tls_port must be 0..65535, not "
                          f"{config.stream_port} and {config.stream_tls_port}")
    if not -1 <= config.stream_send_threads <= 256:
        raise ConfigError(f"stream_send_threads must be -1..256, not {config.stream_send_threads}")
    if not 0 <= config.stream_join_bytes <= 1 << 30:
        raise ConfigError(f"stream_join_bytes must be 0..{1 << 30}, not {config.stream_join_bytes}")
    if not 0 <= config.stream_advertised_port < 65536:
        raise ConfigError(f"stream_advertised_port must be 0..65535, not "
                          f"{config.stream_advertised_port}")
    if not 0 <= config.metrics_port < 65536:
        raise ConfigError(f"metrics_port must be 0..65535, not {config.metrics_port}")
    if not 0 <= config.management_port < 65536:
        raise ConfigError(f"management_port must be 0..65535, not {config.management_port}")
    if not bloom.MIN_SIZE <= config.filter_size <= bloom.MAX_SIZE:
        raise ConfigError(f"filter_size must be {bloom.MIN_SIZE}..{bloom.MAX_SIZE}, "
                          f"not {config.filter_size}")
    if config.fsync_interval_ms <= 0:
        raise ConfigError("fsync_interval_ms must be > 0")
    if config.max_message_size <= 0:
        raise ConfigError("max_message_size must be > 0")
    if not 1 <= config.publisher_credit <= 100_000:
        raise ConfigError("publisher_credit must be 1..100000")
    if config.max_unconfirmed < 1:
        raise ConfigError("max_unconfirmed must be >= 1")
    if config.max_unconfirmed_bytes < 1 or config.max_unconfirmed_bytes_total < 1:
        raise ConfigError("max_unconfirmed_bytes and max_unconfirmed_bytes_total must be >= 1")
    if config.max_connections < 1:
        raise ConfigError("max_connections must be >= 1")
    if config.handshake_timeout <= 0:
        raise ConfigError("handshake_timeout must be > 0 seconds")
    if config.idle_timeout < 0:
        raise ConfigError("idle_timeout must be >= 0 seconds (0 = off)")
    if config.auth_failure_delay < 0:
        raise ConfigError("auth_failure_delay must be >= 0 seconds (0 = answer at once)")
    if config.offset_store_every < 0 or config.offset_store_interval_ms < 0:
        raise ConfigError("offset_store_every and offset_store_interval_ms must be >= 0 (0 = off)")
    _check_cluster(config)
    if (config.tls_cert is None) != (config.tls_key is None):
        raise ConfigError("--tls-cert and --tls-key go together")


def _check_cluster(config: BrokerConfig) -> None:
    if not 0 <= config.replication_port < 65536:
        raise ConfigError(f"replication_port must be 0..65535, not {config.replication_port}")
    if config.cluster_secret is not None and not config.cluster_secret.strip():
        raise ConfigError("cluster_secret must not be empty (leave it out to use the one under "
                          "--cluster's ZooKeeper path)")
    if not 1.0 <= config.cluster_session_timeout <= 120.0:
        raise ConfigError(f"cluster_session_timeout must be 1..120 seconds, not "
                          f"{config.cluster_session_timeout}")
    if config.cluster_quorum_timeout != 0 and not 1.0 <= config.cluster_quorum_timeout <= 600.0:
        raise ConfigError(f"cluster_quorum_timeout must be 0 (3 x the session timeout) or "
                          f"1..600 seconds, not {config.cluster_quorum_timeout}")
    if config.cluster is None:
        return
    from amqp_stream.cluster.address import check_node_name, parse_url  # no kazoo

    try:
        parse_url(config.cluster)
        if config.node_name is None:
            raise ValueError("--cluster needs --node-name (this node's name in the cluster)")
        check_node_name(config.node_name)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def read_file(path: Path) -> dict[str, Any]:
    """Settings from a TOML file (or JSON when the name ends in .json); keys as field names
    (``data_dir`` or ``data-dir``), optionally under a ``[broker]`` table; other tables are
    ignored."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    try:
        if path.suffix == ".json":
            data = json.loads(raw)
        else:
            data = tomllib.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file {path}: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path}: expected a table of settings")
    if isinstance(data.get("broker"), dict):
        data = data["broker"]
    # other tables ([spark], [client] ...) belong to other tools
    return {str(k).replace("-", "_"): v for k, v in data.items() if not isinstance(v, dict)}


def unknown_environment(env: Mapping[str, str]) -> list[str]:
    """One message per ``AMQP_STREAM_*`` variable that no setting reads, with the nearest known
    name: a misspelt variable would otherwise be ignored without a word (``serve`` refuses
    them, the client commands warn)."""
    from amqp_stream.words import did_you_mean

    known = [ENV_PREFIX + n for n in ("CONFIG", *CLIENT_ENV, *(f.upper() for f in _field_types()))]
    return [f"unknown environment variable {key}{did_you_mean(key, known)}"
            for key in sorted(env) if key.startswith(ENV_PREFIX) and key not in known]


def load(cli: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None,
         config_file: str | os.PathLike | None = None) -> BrokerConfig:
    """Defaults < file < environment < CLI. ``cli`` maps field names to values, ``None`` meaning
    "not given". ``env`` defaults to ``os.environ``."""
    env = os.environ if env is None else env
    unknown = unknown_environment(env)
    if unknown:
        raise ConfigError("; ".join(unknown))
    cli = dict(cli or {})
    values: dict[str, Any] = {}
    path = config_file or cli.pop("config", None) or env.get(ENV_PREFIX + "CONFIG")
    if path:
        for name, value in read_file(Path(path)).items():
            values[name] = convert(name, value, f"config file {path}")
    known = _field_types()
    for name in known:
        key = ENV_PREFIX + name.upper()
        if key in env:
            values[name] = convert(name, env[key], f"environment {key}")
    for name, value in cli.items():
        if name in known and value is not None:
            values[name] = convert(name, value, flag_name(name))
    try:
        return replace(BrokerConfig(), **values)
    except TypeError as exc:
        raise ConfigError(str(exc)) from None
