"""docs/http-api.md's "Endpoints" table is the API the broker serves: every path a module of
``amqp_stream/http`` routes is in it, with each method routed on it, and every path in it is
routed. Reads the repository's files (the routes are the ``add(METHOD, PATH, ...)`` calls)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ROUTE = re.compile(r'\badd\("([A-Z]+)",\s*"(/[^"]*)"')


def _shape(path: str) -> str:
    """A path with each {placeholder} as {}: the doc and the code name them differently."""
    return re.sub(r"\{[^}]*\}", "{}", path)


def _routes() -> set[tuple[str, str]]:
    """(method, path shape) of every route; `{kind:[qe]}` is a stream (q) or an exchange (e)."""
    routes = set()
    for module in (ROOT / "amqp_stream" / "http").glob("*.py"):
        for method, path in ROUTE.findall(module.read_text()):
            for kind in ("q", "e") if "{kind:[qe]}" in path else ("",):
                routes.add((method, _shape(path.replace("{kind:[qe]}", kind))))
    return routes


def _expand(path: str) -> list[str]:
    """`/api/exchanges[/{vhost}[/{name}]]` -> the three paths it stands for."""
    start = path.find("[")
    if start < 0:
        return [path]
    depth = 0
    for end in range(start, len(path)):
        depth += {"[": 1, "]": -1}.get(path[end], 0)
        if depth == 0:
            break
    return _expand(path[:start] + path[end + 1:]) + _expand(path[:start] + path[start + 1:end] + path[end + 1:])


def _documented() -> dict[str, set[str]]:
    """path shape -> the methods its row names."""
    text = (ROOT / "docs" / "http-api.md").read_text()
    section = text.split("\n## Endpoints", 1)[1].split("\n## ", 1)[0]
    out: dict[str, set[str]] = {}
    for row in section.splitlines():
        if row.startswith("| `/"):
            cells = row.split(" | ")
            methods = set(re.findall(r"\b(GET|PUT|POST|DELETE)\b", cells[1]))
            for span in re.findall(r"`(/[^`]*)`", cells[0]):
                for path in _expand(span):
                    out.setdefault(_shape(path), set()).update(methods)
    return out


def test_every_route_is_in_the_endpoints_table_and_every_row_is_routed():
    routes, documented = _routes(), _documented()
    assert len(routes) > 40  # the pattern still finds the routes
    paths = {path for _, path in routes}
    assert not sorted(paths - set(documented)), "routed, not in docs/http-api.md"
    assert not sorted(set(documented) - paths), "in docs/http-api.md, not routed"
    missing = sorted((m, p) for m, p in routes if m not in documented[p])
    assert not missing, f"methods routed that the table does not give: {missing}"
