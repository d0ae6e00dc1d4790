"""The floors of the house: what each lower package may import, read from the source.

``bloom`` stands alone, ``storage`` on ``bloom``, ``sqlfilter`` on ``grammar`` (and lark), and
``amqp_stream.wire`` on nothing else of ours; the broker (``amqp_stream``) joins them. A lower
floor reaching up (``sqlfilter`` reading messages through ``amqp_stream.wire``, say) would tie
it to the broker's codec. Every import statement counts, wherever it stands (inside a function
or under ``TYPE_CHECKING`` too), so the walk is over each module's whole syntax tree.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
OURS = ("bloom", "storage", "sqlfilter", "grammar", "amqp_stream", "bench", "conformance", "tests")

#: package -> (packages of ours it may import, third-party packages it may import; None: any
#: that setup.cfg installs)
RULES: dict[str, tuple[frozenset[str], frozenset[str] | None]] = {
    "bloom": (frozenset(), None),
    "storage": (frozenset({"bloom"}), None),
    "grammar": (frozenset(), frozenset()),
    "sqlfilter": (frozenset({"grammar"}), frozenset({"lark"})),
    "amqp_stream.wire": (frozenset(), None),
}


def imports_of(path: Path) -> set[str]:
    """The absolute names of every module ``path`` imports (relative imports resolved)."""
    here = list(path.relative_to(ROOT).parts[:-1])  # the package the module is in
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
            base = here[:len(here) - node.level + 1] if node.level else []
            if node.module:
                names.add(".".join(base + [node.module]))
            else:  # from . import x: x is a module of that package
                names.update(".".join(base + [alias.name]) for alias in node.names)
    return names


def allowed(package: str, name: str) -> bool:
    ours, third_party = RULES[package]
    top = name.split(".")[0]
    if name == package or name.startswith(package + "."):
        return True
    if top in OURS:
        return any(name == p or name.startswith(p + ".") for p in ours)
    return top in sys.stdlib_module_names or third_party is None or top in third_party


def modules(package: str) -> list[Path]:
    return sorted((ROOT / package.replace(".", "/")).rglob("*.py"))


@pytest.mark.parametrize("package", sorted(RULES))
def test_a_lower_floor_imports_only_what_is_below_it(package: str) -> None:
    found = modules(package)
    assert found, package
    wrong = {f"{path.relative_to(ROOT)}: {name}" for path in found
             for name in imports_of(path) if not allowed(package, name)}
    assert not wrong, f"{package} may import {sorted(RULES[package][0]) or 'nothing'} of ours " \
                      f"and {sorted(RULES[package][1] or ()) or 'no'} third-party package: {sorted(wrong)}"


def test_the_walk_sees_every_kind_of_import() -> None:
    """A check that cannot fail proves nothing: the walk finds imports in functions, relative
    ones and ``from x import y`` alike, and ``allowed`` refuses what the rules leave out."""
    assert imports_of(ROOT / "sqlfilter" / "view.py") <= {"typing"}
    assert "sqlfilter.view" in imports_of(ROOT / "sqlfilter" / "base.py")
    assert not allowed("sqlfilter", "amqp_stream.wire")
    assert not allowed("sqlfilter", "proton")
    assert not allowed("storage", "sqlfilter.required")
    assert not allowed("bloom", "storage")
    assert allowed("storage", "bloom") and allowed("sqlfilter", "lark.lexer")
    probe = ROOT / "sqlfilter" / "_layering_probe.py"
    try:
        probe.write_text("def f():\n    from amqp_stream import wire\n    from . import view\n"
                         "    from .. import storage\n", encoding="utf-8")
        assert imports_of(probe) == {"amqp_stream", "sqlfilter.view", "storage"}
    finally:
        probe.unlink()


def test_sqlfilter_alone_loads_no_broker_code() -> None:
    """In a fresh interpreter, importing and using ``sqlfilter`` (over views of its own
    protocol, no reader installed) brings in nothing of ``amqp_stream`` nor proton."""
    import subprocess

    code = (
        "import sys, sqlfilter\n"
        "class V:\n"
        "    header = {}; properties = {'subject': 'a'}; message_annotations = {}; footer = {}\n"
        "    application_properties = {'n': 5}\n"
        "f = sqlfilter.compile_sql(\"n > 1 AND p.subject = 'a'\")\n"
        "assert f.matches(V()) and sqlfilter.compile_selector('n IN (\\'5\\')').evaluate(V()) is False\n"
        "try:\n"
        "    f.matches(b'\\x00')\n"
        "except TypeError as e:\n"
        "    assert 'no reader' in str(e), e\n"
        "else:\n"
        "    raise AssertionError('bytes without a reader')\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('amqp_stream', 'proton', '_cproton'))\n"
        "assert not bad, bad\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
