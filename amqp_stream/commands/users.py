"""``amqp-stream users ACTION ...``: users, tags and permissions, in the way of ``rabbitmqctl``.

Why this way: the command edits the data directory's user store (``amqp_stream.users``) under
its lock, and a running broker takes the change up within a second (it watches the file); a
stopped broker reads it at start. So it needs no broker, no password and no network listener:
who may run it is who may write the data directory (the file is mode 0600), as ``rabbitmqctl``
is who holds the node's Erlang cookie. Anyone else is refused by the file system.

Actions (``rabbitmqctl`` names in brackets): ``add NAME [PASSWORD]`` (add_user; the password is
read from stdin when not given), ``delete NAME`` (delete_user), ``list`` (list_users),
``change-password NAME [PASSWORD]`` (change_password), ``set-tags NAME [TAG ...]``
(set_user_tags), ``set-permissions [-p VHOST] USER CONF WRITE READ`` (set_permissions),
``clear-permissions [-p VHOST] USER`` (clear_permissions), ``list-permissions [-p VHOST]``
(list_permissions; ``--user NAME`` for list_user_permissions).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from amqp_stream.config import ConfigError, load
from amqp_stream.errors import BrokerError

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", help="the broker's data directory (default: as "
                                           "'amqp-stream serve' would use: config file, "
                                           "AMQP_STREAM_DATA_DIR, ./data)")
    parser.add_argument("--config", help="the broker's config file (for its data_dir)")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)

    def action(name: str, help_text: str, usage: str | None = None) -> argparse.ArgumentParser:
        """An action whose --help starts with the line the list of actions gives it."""
        return actions.add_parser(name, help=help_text, description=help_text, usage=usage)

    add = action("add", "add a user (rabbitmqctl add_user)",
                 usage="amqp-stream users add NAME [PASSWORD] [--tags TAG ...]")
    add.add_argument("name", help="the user's name")
    add.add_argument("password", nargs="?", help="read from stdin when not given")
    add.add_argument("--tags", nargs="*", default=[], metavar="TAG",
                     help="tags, e.g. administrator (after NAME and PASSWORD: every word after "
                          "--tags is a tag)")
    delete = action("delete", "delete a user and its permissions")
    delete.add_argument("name", help="the user's name")
    listing = action("list", "list users and their tags")
    listing.add_argument("--format", choices=("table", "json"), default="table",
                         help="a table (the default) or one JSON array")
    change = action("change-password", "set a user's password")
    change.add_argument("name", help="the user's name")
    change.add_argument("password", nargs="?", help="read from stdin when not given")
    tags = action("set-tags", "replace a user's tags (none: clear them)")
    tags.add_argument("name", help="the user's name")
    tags.add_argument("tags", nargs="*", help="e.g. administrator, monitoring, management")
    perms = action("set-permissions", "set a user's configure, write and read regexes on a vhost")
    perms.add_argument("-p", "--vhost", default="/", help="the virtual host (default: /)")
    perms.add_argument("user", help="the user's name")
    perms.add_argument("configure", help="regex of the streams and exchanges it may declare "
                                         "and delete ('' none, '.*' all)")
    perms.add_argument("write", help="regex of those it may publish to")
    perms.add_argument("read", help="regex of those it may consume from")
    clear = action("clear-permissions", "remove a user's permissions on a vhost")
    clear.add_argument("-p", "--vhost", default="/", help="the virtual host (default: /)")
    clear.add_argument("user", help="the user's name")
    listp = action("list-permissions", "list permissions (of a vhost or a user)")
    listp.add_argument("-p", "--vhost", default=None, help="only this virtual host's")
    listp.add_argument("--user", default=None, help="only this user's")
    listp.add_argument("--format", choices=("table", "json"), default="table",
                       help="a table (the default) or one JSON array")
    for each in actions.choices.values():
        # the data directory may follow the action too, as users.md's examples put it
        # (`users add NAME --data-dir DIR`); SUPPRESS keeps the one given before the action
        each.add_argument("--data-dir", default=argparse.SUPPRESS, help="as before ACTION")
        each.add_argument("--config", default=argparse.SUPPRESS, help="as before ACTION")


def _password(given: str | None) -> str:
    if given is not None:
        return given
    if sys.stdin.isatty():
        import getpass

        return getpass.getpass("password: ")
    return sys.stdin.readline().rstrip("\n")


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def run(args: argparse.Namespace) -> int:
    from amqp_stream.security import read_users
    from amqp_stream.users import FILE, UserStore

    prog = "amqp-stream users"
    try:
        config = load({"data_dir": args.data_dir, "config": args.config})
        file_users = read_users(config.users_file) if config.users_file else {}
    except ConfigError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    store = UserStore(os.path.join(os.path.abspath(config.data_dir), FILE), file_users)
    try:
        store.load()
        action = args.action
        if action == "add":
            store.add_user(args.name, _password(args.password), args.tags)
            print(f"user {args.name!r} added")
        elif action == "delete":
            store.delete_user(args.name)
            print(f"user {args.name!r} deleted")
        elif action == "change-password":
            store.change_password(args.name, _password(args.password))
            print(f"password of {args.name!r} changed")
        elif action == "set-tags":
            store.set_tags(args.name, args.tags)
            print(f"tags of {args.name!r} set to [{', '.join(args.tags)}]")
        elif action == "set-permissions":
            store.set_permissions(args.user, args.vhost, args.configure, args.write, args.read)
            print(f"permissions of {args.user!r} on vhost {args.vhost!r} set")
        elif action == "clear-permissions":
            cleared = store.clear_permissions(args.user, args.vhost)
            print(f"permissions of {args.user!r} on vhost {args.vhost!r} "
                  f"{'cleared' if cleared else 'were not set'}")
        elif action == "list":
            users = store.users()
            if args.format == "json":
                print(json.dumps([{"name": u.name, "tags": list(u.tags)} for u in users], indent=1))
            else:
                print(_table([["user", "tags"]] + [[u.name, f"[{', '.join(u.tags)}]"] for u in users]))
        elif action == "list-permissions":
            perms = store.permissions(user=args.user, vhost=args.vhost)
            if args.format == "json":
                print(json.dumps([p.to_json() for p in perms], indent=1))
            else:
                print(_table([["user", "vhost", "configure", "write", "read"]]
                             + [[p.user, p.vhost, p.configure, p.write, p.read] for p in perms]))
    except BrokerError as exc:
        print(f"{prog} {args.action}: error: {exc.description}", file=sys.stderr)
        return 1
    except (OSError, ValueError) as exc:
        print(f"{prog} {args.action}: error: {store.path}: {exc}", file=sys.stderr)
        return 1
    return 0
