"""The docs say what the commands do (issue 25 item 23): every `serve` setting is in
docs/broker.md's table with the flag `serve --help` gives it, and nothing else is there."""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

from amqp_stream.cli import build_parser
from amqp_stream.config import BrokerConfig

DOCS = Path(__file__).resolve().parents[2] / "docs"


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
