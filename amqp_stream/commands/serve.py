"""``amqp-stream serve``: run the broker in the foreground until SIGTERM/SIGINT.

The flags are generated from ``amqp_stream.config`` (one home for settings); a flag not given
leaves the value from the environment, the config file or the default.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import fields

from amqp_stream import config as config_mod


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE",
                        help="settings file (TOML, or JSON by extension); also AMQP_STREAM_CONFIG")
    for f in fields(config_mod.BrokerConfig):
        flag = config_mod.flag_name(f.name)
        help_text = config_mod.HELP.get(f.name, "")
        default = getattr(config_mod.BrokerConfig(), f.name)
        if str(f.type) == "bool":
            parser.add_argument(flag, dest=f.name, action="store_const", const=True, default=None,
                                help=help_text)
        else:
            choices = config_mod._CHOICES.get(f.name) if f.name != "log_level" else None
            if default is not None and "(default" not in help_text:  # else the help says it better
                help_text += f" (default: {default})"
            parser.add_argument(flag, dest=f.name, default=None, metavar=f.name.upper() if not choices else None,
                                choices=choices, help=help_text)


def run(args: argparse.Namespace) -> int:
    cli = {f.name: getattr(args, f.name, None) for f in fields(config_mod.BrokerConfig)}
    try:
        config = config_mod.load(cli, config_file=args.config)
        if config.data_dir.exists() and not config.data_dir.is_dir():
            raise config_mod.ConfigError(f"data_dir {config.data_dir} is a file, not a directory "
                                         "(--data-dir names the directory holding the streams)")
        from amqp_stream.server import Broker
        broker = Broker(config)
    except config_mod.ConfigError as exc:
        print(f"amqp-stream serve: error: {exc}", file=sys.stderr)
        return 2
    return broker.run()
