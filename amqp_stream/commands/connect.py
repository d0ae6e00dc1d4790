"""Connection options shared by the client commands (declare, delete, info, publish, consume, perf).

Why one module: every client command takes the same `--url`/credentials/TLS options, turns a
failure to connect into exit code 1 with one clear line on stderr, and decides the same way
whether it is talking to a terminal (progress bars and colour only then). The AMQP work itself
is `amqp_stream.client`; this is only the command-line side of it.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TextIO

from amqp_stream.client import Client, ClientError, TlsOptions, check_url, connect

__all__ = ["add_connection_arguments", "add_stream_url_argument", "open_client", "fail",
           "is_terminal", "DEFAULT_URL"]

DEFAULT_URL = "amqp://127.0.0.1:5672"


def add_connection_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("connection")
    g.add_argument("--url", default=os.environ.get("AMQP_STREAM_URL", DEFAULT_URL), type=_amqp_url,
                   help="broker URL, amqp:// or amqps:// (default: $AMQP_STREAM_URL or %(default)s)")
    g.add_argument("--user", default=os.environ.get("AMQP_STREAM_USER"),
                   help="SASL PLAIN user (default: $AMQP_STREAM_USER; none = ANONYMOUS)")
    g.add_argument("--password", default=os.environ.get("AMQP_STREAM_PASSWORD"),
                   help="SASL PLAIN password (default: $AMQP_STREAM_PASSWORD)")
    g.add_argument("--tls-ca", metavar="FILE", help="CA certificates to verify an amqps:// broker")
    g.add_argument("--tls-cert", metavar="FILE", help="client certificate (amqps://)")
    g.add_argument("--tls-key", metavar="FILE", help="client private key (amqps://)")
    g.add_argument("--tls-insecure", action="store_true",
                   help="do not verify the broker's certificate (testing only)")
    g.add_argument("--timeout", type=float, default=30.0, metavar="S",
                   help="seconds to wait for the broker before failing (default: %(default)s)")


def add_stream_url_argument(parser: argparse.ArgumentParser, help_text: str) -> None:
    """``--stream-url``: the stream-protocol port, for the commands that can speak it."""
    from amqp_stream.client.stream import DEFAULT_STREAM_URL

    parser.add_argument("--stream-url", default=os.environ.get("AMQP_STREAM_STREAM_URL", DEFAULT_STREAM_URL),
                        metavar="URL", help=f"{help_text}: rabbitmq-stream://host:port "
                                            "(default: $AMQP_STREAM_STREAM_URL or %(default)s)")


def _amqp_url(text: str) -> str:
    try:
        check_url(text)
    except ClientError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def open_client(args: argparse.Namespace) -> Client:
    """Connect as the options say; raises `ClientError` (exit code 1 for the caller)."""
    tls = None
    if args.url.startswith("amqps://"):
        tls = TlsOptions(ca_file=args.tls_ca, cert_file=args.tls_cert, key_file=args.tls_key,
                         verify=not args.tls_insecure)
    try:
        return connect(args.url, user=args.user, password=args.password, tls=tls, timeout=args.timeout)
    except ClientError as exc:
        from amqp_stream.commands.probe import listener_hint

        hint = listener_hint(args.url)  # another protocol's port, named
        if hint:
            raise ClientError(f"{exc}{hint}", exc.condition) from exc
        raise


def fail(command: str, error: BaseException | str, stream: TextIO | None = None) -> int:
    """Print `amqp-stream COMMAND: error: ...` on stderr and return exit code 1."""
    print(f"amqp-stream {command}: error: {error}", file=stream or sys.stderr)
    return 1


def is_terminal(stream: TextIO) -> bool:
    """Progress bars and colour only for a terminal (and not when TERM=dumb)."""
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        return False
    return tty and os.environ.get("TERM") != "dumb"

