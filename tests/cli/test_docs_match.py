"""The docs say what the commands do (issue 25 item 23): every `serve` setting is in
docs/broker.md's table with the flag and the default `serve --help` gives it, and nothing else
is there; every option of every client command is in its usage in docs/cli.md, and every
option docs/cli.md names exists; README.md's table lists every command."""

from __future__ import annotations

import argparse
import re
from dataclasses import fields
from pathlib import Path

from amqp_stream.cli import COMMANDS, build_parser
from amqp_stream.config import BrokerConfig

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
FLAG = re.compile(r"(?<![\w-])(--[a-z][\w-]*)")
# documented elsewhere: serve in docs/broker.md (above), users in docs/users.md, and the
# offline tools inspect and read in docs/storage.md
ELSEWHERE = {"serve": "broker.md", "users": "users.md", "inspect": "storage.md", "read": "storage.md"}
# the options every client command shares: docs/cli.md's "Connection options" table
CONNECTION = {"--url", "--user", "--password", "--tls-ca", "--tls-cert", "--tls-key",
              "--tls-insecure", "--timeout"}
# hidden on purpose: consume's --strict, a no-op kept for old scripts (failing is the default)
HIDDEN = {("consume", "--strict")}
# docs/cli.md also names other tools' flags: RabbitMQ's `rabbitmq-streams` and Stream
# PerfTest's, and a misspelt flag in the example of what an unknown option answers
OTHER_TOOLS = {"--preferred-leader-node", "--store-every", "--fitler-value"}


def _settings_table() -> dict[str, str]:
    """setting name -> the flag the table gives it (None when it gives none)."""
    text = (DOCS / "broker.md").read_text()
    table = text.split("## Settings", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    out = {}
    for row in rows:
        first_cell = row.split(" | ")[0]
        for name, flag in re.findall(r"`(\w+)`(?: \(`(--[\w-]+)`\))?", first_cell):
            out[name] = flag or None
    return out


def test_every_serve_setting_is_documented_with_its_flag():
    serve = build_parser("serve").commands["serve"]
    flags = {action.dest: action.option_strings[0] for action in serve._actions
             if action.option_strings and action.dest not in ("help", "config")}
    table = _settings_table()
    assert {f.name for f in fields(BrokerConfig)} == set(flags)  # serve has a flag for each
    missing = sorted(set(flags) - set(table))
    assert not missing, f"settings missing from docs/broker.md: {missing}"
    stale = sorted(set(table) - set(flags))
    assert not stale, f"docs/broker.md documents settings serve does not have: {stale}"
    wrong = {name: (table[name], flag) for name, flag in flags.items() if table[name] != flag}
    assert not wrong, f"documented flag differs from serve --help (doc, real): {wrong}"


def _options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """Every long option of a command and of its actions (users add, ...)."""
    out: dict[str, argparse.Action] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                out.update(_options(sub))
        out.update((o, action) for o in action.option_strings if o.startswith("--") and o != "--help")
    return out


def _usages(text: str) -> dict[str, set[str]]:
    """command -> the options its usage lines name (`amqp-stream COMMAND ...` lines of the
    doc's code blocks, with their indented continuation lines)."""
    usages: dict[str, set[str]] = {}
    in_block, current = False, None
    for line in text.splitlines():
        if line.startswith("```"):
            in_block, current = not in_block, None
            continue
        if not in_block:
            continue
        words = line.split()
        if line.startswith("amqp-stream ") and len(words) > 1 and words[1] in COMMANDS:
            current = words[1]
        elif not line.startswith(" "):
            current = None
        if current:
            usages.setdefault(current, set()).update(FLAG.findall(line))
    return usages


def test_every_option_of_each_client_command_is_in_its_usage_in_cli_md():
    parser = build_parser()
    usages = _usages((DOCS / "cli.md").read_text())
    problems = []
    for name in COMMANDS:
        if name in ELSEWHERE:
            continue
        options = set(_options(parser.commands[name])) - {o for c, o in HIDDEN if c == name}
        if name not in usages:
            problems.append(f"{name}: no usage line in docs/cli.md")
            continue
        if missing := sorted(options - CONNECTION - usages[name]):
            problems.append(f"{name}: options missing from its usage: {missing}")
        if stale := sorted(usages[name] - set(_options(parser.commands[name]))):
            problems.append(f"{name}: usage names options it does not have: {stale}")
    assert not problems, "\n".join(problems)


def test_every_option_docs_name_exists_and_every_option_is_shown_by_help():
    parser = build_parser()
    every = {name: _options(parser.commands[name]) for name in COMMANDS}
    known = set().union(*every.values())
    named = set(FLAG.findall((DOCS / "cli.md").read_text()))
    assert not sorted(named - known - OTHER_TOOLS - {"--help"}), "docs/cli.md names options no command has"
    hidden = {(name, option) for name, options in every.items()
              for option, action in options.items() if action.help == argparse.SUPPRESS}
    assert hidden == HIDDEN, f"options --help does not show: {sorted(hidden - HIDDEN)}"
    for name, doc in ELSEWHERE.items():
        text = (DOCS / doc).read_text()
        missing = sorted(o for o in every[name] if o not in text and (name, o) not in HIDDEN)
        assert not missing, f"{name}: options missing from docs/{doc}: {missing}"


def test_readme_s_table_lists_every_command():
    text = (ROOT / "README.md").read_text()
    table = text.split("## Command-line tools", 1)[1].split("\n## ", 1)[0]
    listed = set()
    for row in table.splitlines():
        if row.startswith("| `"):
            first = row.split(" | ")[0]
            listed.update(m.split()[0] for m in re.findall(r"`([^`]+)`", first))
    assert not sorted(set(COMMANDS) - listed), "commands missing from README.md's table"


def _default_cell(cell: str) -> object:
    """The default a table cell gives: its first code span (or word) as a literal; none and
    off are None and False."""
    code = re.match(r"`([^`]*)`", cell.strip())
    word = code.group(1) if code else cell.strip().split()[0]
    if word in ("none", "off"):
        return {"none": None, "off": False}[word]
    for convert in (int, float):
        try:
            return convert(word)
        except ValueError:
            pass
    return word


# None in BrokerConfig, worked out at start; the table says from what
COMPUTED = {"container_id", "stream_advertised_host"}


def test_broker_md_gives_each_setting_s_default_and_serve_help_shows_it():
    text = (DOCS / "broker.md").read_text()
    table = text.split("## Settings", 1)[1].split("\n## ", 1)[0]
    defaults = BrokerConfig()
    helps = {action.dest: action.help or "" for action in build_parser("serve").commands["serve"]._actions}
    documented = {}
    for row in (line for line in table.splitlines() if line.startswith("| `")):
        cells = row.split(" | ")
        for name in re.findall(r"`(\w+)` \(`--", cells[0]):
            documented[name] = _default_cell(cells[1])
    wrong = {}
    for f in fields(BrokerConfig):
        real = getattr(defaults, f.name)
        real = str(real) if isinstance(real, Path) else real
        if f.name not in COMPUTED and documented[f.name] != real:
            wrong[f.name] = (documented[f.name], real)
        if real is not None and not isinstance(real, bool):
            assert "(default" in helps[f.name], f"serve --help does not give {f.name}'s default"
    assert not wrong, f"docs/broker.md's default differs from BrokerConfig's (doc, real): {wrong}"


def test_broker_md_names_the_environment_variables_serve_lets_through():
    """serve refuses an AMQP_STREAM_* variable that is not a setting: broker.md lists the client
    commands' that it lets through."""
    from amqp_stream.config import CLIENT_ENV

    text = (DOCS / "broker.md").read_text()
    listed = text.split("the client commands' (", 1)[1].split(")", 1)[0]
    assert set(re.findall(r"`(\w+)`", listed)) == {*CLIENT_ENV, "CONFIG"}


def test_cli_md_s_list_table_gives_each_kind_s_columns_and_defaults():
    from amqp_stream.commands.listing import KINDS

    section = (DOCS / "cli.md").read_text().split("\n## list", 1)[1].split("\n## ", 1)[0]
    table = {}
    for row in section.splitlines():
        cells = row.split(" | ")
        if row.startswith("| `") and len(cells) == 3:
            kind = cells[0].strip("| `")
            default = re.match(r"`([^`]*)`", cells[1]).group(1).split()
            other = re.match(r"`([^`]*)`", cells[2]).group(1).split()
            table[kind] = (default, other)
    assert set(table) == set(KINDS)
    for kind, (_, columns, default) in KINDS.items():
        assert table[kind][0] == list(default), kind
        assert set(table[kind][0]) | set(table[kind][1]) == set(columns), kind


def test_every_option_and_argument_has_a_help_line():
    """`amqp-stream COMMAND --help` says what each option and argument is (and each command and
    action what it does)."""
    silent = []

    def walk(name: str, parser: argparse.ArgumentParser) -> None:
        if not parser.description:
            silent.append(f"{name}: no description")
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub_name, sub in action.choices.items():
                    walk(f"{name} {sub_name}", sub)
            elif not action.help and action.dest != "help":
                silent.append(f"{name} {'/'.join(action.option_strings) or action.dest}")

    parser = build_parser()
    for name in COMMANDS:
        walk(name, parser.commands[name])
    assert not silent, f"without help: {silent}"


def test_broker_md_s_stream_arguments_are_those_a_declare_takes():
    """The "Stream arguments" paragraph of docs/broker.md names every argument a stream
    understands (x-queue-type is in the PUT row above it), the leader locators, the alias; the
    other queue types' arguments it names are refused; and each stream-argument flag of
    `declare` maps to one of them."""
    from amqp_stream import arguments
    from amqp_stream.commands.manage import STREAM_ARGUMENTS as FLAGS

    text = (DOCS / "broker.md").read_text()
    paragraph = text.split("\nStream arguments:", 1)[1].split("\n\n", 1)[0]
    named = set(re.findall(r"`(x-[\w-]+)`", paragraph))
    refused = named - set(arguments.STREAM_ARGUMENTS) - set(arguments._ALIASES)
    assert set(arguments.STREAM_ARGUMENTS) - {"x-queue-type"} <= named
    assert set(arguments._ALIASES) <= named
    assert refused <= set(arguments._NOT_FOR_STREAMS), refused
    assert set(re.findall(r"`([a-z-]+)`", paragraph)) >= set(arguments.LEADER_LOCATORS)
    assert set(FLAGS.values()) <= set(arguments.STREAM_ARGUMENTS)


def test_readme_lists_every_doc():
    text = (ROOT / "README.md").read_text()
    listed = set(re.findall(r"`docs/([\w-]+\.md)`", text.split("## Documentation", 1)[1]))
    assert not sorted({p.name for p in DOCS.glob("*.md")} - listed), "docs missing from README.md"
