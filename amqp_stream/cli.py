"""The ``amqp-stream`` command: one entry point, one module per subcommand.

Each subcommand lives in ``amqp_stream.commands.<module>`` and exposes
``add_arguments(parser)`` and ``run(args) -> int`` (the exit code); a module serving several
commands (``manage``) reads ``args.command``. Modules are imported only
when their command runs, so ``amqp-stream inspect`` does not pay for importing proton or Spark.

Exit codes shared by all commands: 0 success, 1 failure at run time (e.g. the broker refused),
2 bad usage (argparse), 130 interrupted.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Sequence

from amqp_stream.commands import interrupt
from amqp_stream.words import did_you_mean

# command name -> (module under amqp_stream.commands, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("serve", "run the broker"),
    "inspect": ("inspect", "show the segments and chunks of a stream directory"),
    "read": ("read", "print the records of a stream directory (stage-1 filtering only)"),
    "declare": ("manage", "declare a stream through the management node"),
    "delete": ("manage", "delete a stream through the management node"),
    "info": ("manage", "show a stream's info through the management node"),
    "declare-exchange": ("exchanges", "declare an exchange through the management node"),
    "delete-exchange": ("exchanges", "delete an exchange through the management node"),
    "exchanges": ("exchanges", "list the exchanges through the management node"),
    "bind": ("exchanges", "bind a stream (or an exchange) to an exchange"),
    "unbind": ("exchanges", "remove a binding of a stream (or an exchange) to an exchange"),
    "bindings": ("exchanges", "list bindings by source, destination and key"),
    "create-super-stream": ("super_streams", "create a super stream over the stream protocol"),
    "delete-super-stream": ("super_streams", "delete a super stream over the stream protocol"),
    "super-streams": ("super_streams", "list the super streams and their partitions"),
    "publish": ("publish", "publish lines or JSON lines to a stream"),
    "consume": ("consume", "consume a stream with filters and print the messages"),
    "tracking": ("tracking", "list a stream's stored consumer offsets and publisher sequences"),
    "reset-offset": ("tracking", "move a consumer name's stored offset (where it resumes)"),
    "perf": ("perf", "a load generator for publishers and filtered consumers"),
    "cluster": ("cluster", "a cluster's nodes, their liveness and the leaders they hold "
                           "(read from ZooKeeper); drain or revive a node for maintenance"),
    "stream": ("replicas", "a replicated stream's members, leader, epoch, tails and lag "
                           "(stream status NAME), as rabbitmq-streams stream_status"),
    "add-replica": ("replicas", "add a member to a replicated stream on a node (catches up, "
                                "then counts toward the quorum)"),
    "delete-replica": ("replicas", "remove a stream's member on a node (its log is deleted)"),
    "transfer-leadership": ("replicas", "move a stream's leadership to another member, with no "
                                        "confirmed publish lost"),
    "list": ("listing", "list streams, connections, consumers, publishers or users (management "
                        "HTTP API), as rabbitmqctl list_* does"),
    "users": ("users", "users, tags and permissions (add, delete, list, change-password, set-tags, "
                       "set-permissions, clear-permissions, list-permissions)"),
}


# what `amqp-stream --help` says first: for a user, not the module's docstring
DESCRIPTION = ("A RabbitMQ-compatible stream broker (serve) with broker-side filtering, and its "
               "client and offline tools. 'amqp-stream COMMAND --help' describes each; docs/cli.md "
               "all of them.")


class _Parser(argparse.ArgumentParser):
    """The top-level parser, which keeps its commands' parsers: unknown options are reported
    by the command's parser, with the nearest option it has (argparse before 3.14 suggests
    nothing)."""

    commands: dict[str, argparse.ArgumentParser]


def build_parser(only: str | None = None) -> _Parser:
    """The full parser; with ``only``, import just that command's module."""
    parser = _Parser(prog="amqp-stream", description=DESCRIPTION)
    parser.commands = {}
    from amqp_stream import __version__

    parser.add_argument("--version", action="version", version=f"amqp-stream {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (module_name, help_text) in COMMANDS.items():
        cmd = sub.add_parser(name, help=help_text, description=help_text)
        parser.commands[name] = cmd
        if only is None or name == only:
            module = importlib.import_module(f"amqp_stream.commands.{module_name}")
            module.add_arguments(cmd)
            cmd.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    only = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(only if only in COMMANDS else None)
    if only is not None and only not in COMMANDS and not any(a in ("-h", "--help", "--version") for a in argv):
        parser.error(f"argument COMMAND: invalid choice: {only!r}{did_you_mean(only, COMMANDS)} "
                     f"(choose from {', '.join(COMMANDS)})")
    args, extra = parser.parse_known_args(argv)
    if extra:
        unknown_options(parser.commands[args.command], extra)
    if args.command != "serve":  # serve refuses them (amqp_stream.config.load)
        from amqp_stream.config import unknown_environment

        for problem in unknown_environment(os.environ):
            print(f"amqp-stream {args.command}: warning: {problem}", file=sys.stderr)
    try:
        with interrupt.handled():
            return int(args._run(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


def unknown_options(command: argparse.ArgumentParser, extra: list[str]) -> None:
    """Exit 2 through ``command``'s parser, naming the nearest option to each unknown one."""
    options = [o for action in command._actions for o in action.option_strings]
    hints = []
    for word in extra:
        flag = word.split("=", 1)[0]
        if flag.startswith("-"):
            best = did_you_mean(flag, options)
            if best:
                hints.append(f"{flag}{best}")
    command.error(f"unrecognized arguments: {' '.join(extra)}" + (f"; {'; '.join(hints)}" if hints else ""))


if __name__ == "__main__":
    raise SystemExit(main())
