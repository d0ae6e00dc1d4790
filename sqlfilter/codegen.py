"""Code generation: the folded expression tree → the Python source of ``_evaluate(view)``.

Strategy: the tree is compiled once into straight-line Python (``compile()`` + ``exec``), so a
message costs one function call, a few dict lookups and type checks, instead of a tree walk.
Each sub-expression becomes a statement assigning a temporary ``tN``:
- a field is a raw ``dict.get`` on a section read once at the top of the function (only the
  sections the expression names are read, so a lazy view decodes nothing else); a message
  whose sections cannot be decoded (``MessageFormatError``) gives unknown, never an exception;
- the properties and application properties are read with one ``view.pick(...)`` call when
  the view is the reader's own (``sqlfilter.view.Reader.view_type``), with pickers made by
  the reader (``Reader.picker``) for the keys the expression names: from stored bytes the
  sections are found in one pass and only those values are decoded (decoding whole maps was
  most of the cost of a message). Any other view is read through its plain section
  attributes;
- operators with a literal operand get a fast path for the common value type (``str`` for a
  string literal, a finite ``int``/``float`` for a number, tested as ``x - x == 0``) and fall
  back to ``sqlfilter.runtime`` (after ``norm``) for anything else, so the fast path can never
  change a result;
- AND/OR are ``if`` blocks that skip the right side when the left side decides (three-valued:
  FALSE AND x is FALSE, TRUE OR x is TRUE, otherwise both sides are looked at).
Literals of type str/int/bytes/bool and finite floats are written with ``repr`` (exact);
anything else (INF, NAN, LIKE matchers, IN sets) is bound as a global ``_kN``.
"""

from __future__ import annotations

import math
from typing import Any

from sqlfilter import ast, runtime
from sqlfilter.like import LikeMatcher, compile_like
from sqlfilter.view import Reader

__all__ = ["generate", "Generated"]

_SECTION_VAR = {"header": "_h", "properties": "_p", "application_properties": "_ap",
                "message_annotations": "_ma", "footer": "_f"}

#: AMQP header defaults (RabbitMQ: priority 4); other fields are our extension
_HEADER_DEFAULTS: dict[str, Any] = {"priority": 4, "durable": False, "first_acquirer": False,
                                    "delivery_count": 0}

_PY_OP = {"=": "==", "<>": "!=", "<": "<", ">": ">", "<=": "<=", ">=": ">="}
_RT_OP = {"=": "_eq", "<>": "_ne", "<": "_lt", ">": "_gt", "<=": "_le", ">=": "_ge"}
_ARITH = {"+": "_add", "-": "_sub", "*": "_mul", "/": "_div", "%": "_mod"}
_CALLS = {"LOWER": "_lower", "UPPER": "_upper", "LEFT": "_left", "RIGHT": "_right",
          "SUBSTRING": "_substring", "DATE": "_date"}

#: sections read through ``KeyedView.pick`` with a picker, in its argument order
_PICKED = ("properties", "application_properties")

#: names every generated function may use
BASE_GLOBALS: dict[str, Any] = {
    "_norm": runtime.norm, "_cond": runtime.cond, "_eq": runtime.eq, "_ne": runtime.ne,
    "_lt": runtime.lt, "_gt": runtime.gt, "_le": runtime.le, "_ge": runtime.ge,
    "_add": runtime.add, "_sub": runtime.sub, "_mul": runtime.mul, "_div": runtime.div,
    "_mod": runtime.mod, "_neg": runtime.neg, "_pos": runtime.pos, "_in": runtime.in_,
    "_between": runtime.between, "_utc": runtime.utc, "_lower": runtime.lower,
    "_upper": runtime.upper, "_left": runtime.left, "_right": runtime.right,
    "_substring": runtime.substring, "_date": runtime.date, "_elem": runtime.element,
    "_has": runtime.has_element, "_NUM": frozenset((int, float)),
    "__builtins__": {"type": type, "str": str, "len": len}, "_jcond": runtime.jms_cond,
    **{f"_{name}": function for name, function in runtime.JMS_CALLS.items()},
}

_PREDICATES = (ast.Compare, ast.And, ast.Or, ast.Not, ast.Like, ast.In, ast.Between, ast.IsNull,
               ast.Exists)


class _NoReader:
    """The view type and format error of a filter compiled with no reader installed: no view
    is of this type, and nothing raises it (views are read through their attributes)."""


class _NoFormatError(Exception):
    pass


class Generated:
    """The generated source, the globals it needs and the sections it reads."""

    def __init__(self, source: str, globals_: dict[str, Any], sections: frozenset[str]):
        self.source = source
        self.globals = globals_
        self.sections = sections


def _is_number(v: Any) -> bool:
    return type(v) is int or type(v) is float


class _Emitter:
    def __init__(self, matchers: dict[ast.Like, LikeMatcher], cond: str):
        self.lines: list[str] = []
        self.indent = 1
        self.temps = 0
        self.consts: dict[str, Any] = {}
        self.sections: set[str] = set()
        self.keys: dict[str, set[str]] = {}  # section -> the names the expression reads
        self.matchers = matchers
        self.cond = cond  # what a field used as a condition is: _cond (SQL) or _jcond (JMS)

    # ---- helpers ----
    def emit(self, line: str) -> None:
        self.lines.append("    " * self.indent + line)

    def temp(self) -> str:
        self.temps += 1
        return f"t{self.temps}"

    def const(self, value: Any) -> str:
        """A source expression for a constant value."""
        t = type(value)
        if value is None or t is bool or t is int or t is str or t is bytes:
            return repr(value)
        if t is float and math.isfinite(value):
            return repr(value)
        name = f"_k{len(self.consts)}"
        self.consts[name] = value
        return name

    def assign(self, expr: str) -> str:
        name = self.temp()
        self.emit(f"{name} = {expr}")
        return name

    # ---- values ----
    def raw(self, node: ast.Node) -> str:
        """A temp/constant holding the value, NOT yet normalised for fields and elements."""
        if isinstance(node, ast.Field):
            var = _SECTION_VAR[node.section]
            self.sections.add(node.section)
            self.keys.setdefault(node.section, set()).add(node.name)
            if node.section == "header" and node.name in _HEADER_DEFAULTS:
                return self.assign(f"{var}.get({node.name!r}, {_HEADER_DEFAULTS[node.name]!r})")
            return self.assign(f"{var}.get({node.name!r})")
        if isinstance(node, ast.Element):
            base = self.raw(node.base)
            return self.assign(f"_elem({base}, {node.key!r})")
        return self.value(node)

    def value(self, node: ast.Node) -> str:
        """A temp/constant holding the normalised value of any node."""
        if isinstance(node, ast.Literal):
            return self.const(node.value)
        if isinstance(node, (ast.Field, ast.Element)):
            return self.assign(f"_norm({self.raw(node)})")
        if isinstance(node, _PREDICATES):
            return self.boolean(node)
        if isinstance(node, ast.Utc):
            return self.assign("_utc()")
        if isinstance(node, ast.Neg):
            return self.assign(f"_neg({self.value(node.operand)})")
        if isinstance(node, ast.Pos):
            return self.assign(f"_pos({self.value(node.operand)})")
        if isinstance(node, ast.Arith):
            left = self.value(node.left)
            right = self.value(node.right)
            return self.assign(f"{_ARITH[node.op]}({left}, {right})")
        if isinstance(node, ast.Call) and node.name in runtime.JMS_CALLS:
            args = ", ".join(self.raw(a) for a in node.args)  # JMS headers see the raw field
            return self.assign(f"_{node.name}({args})")
        if isinstance(node, ast.Call):
            args = ", ".join(self.value(a) for a in node.args)
            return self.assign(f"{_CALLS[node.name]}({args})")
        raise TypeError(f"codegen: unexpected node {node!r}")  # pragma: no cover

    # ---- conditions: always True / False / None ----
    def boolean(self, node: ast.Node) -> str:
        if isinstance(node, ast.Compare):
            return self.compare(node)
        if isinstance(node, ast.And):
            return self.and_or(node, decides=False)
        if isinstance(node, ast.Or):
            return self.and_or(node, decides=True)
        if isinstance(node, ast.Not):
            inner = self.boolean(node.operand)
            return self.assign(f"None if {inner} is None else not {inner}")
        if isinstance(node, ast.Like):
            return self.like(node)
        if isinstance(node, ast.In):
            return self.in_(node)
        if isinstance(node, ast.Between):
            return self.between(node)
        if isinstance(node, ast.IsNull):
            return self.assign(f"_norm({self.raw(node.ref)}) is None")
        if isinstance(node, ast.Exists):
            return self.exists(node.ref)
        if isinstance(node, ast.Literal):
            return self.const(runtime.cond(node.value))
        if isinstance(node, (ast.Field, ast.Element)):
            return self.assign(f"{self.cond}({self.raw(node)})")
        return self.assign(f"_cond({self.value(node)})")

    def _fields_first(self, node: ast.Compare) -> tuple[ast.Node, ast.Literal, str] | None:
        """(field-ish side, literal side, op as seen from the field) when one side is literal."""
        flip = {"<": ">", ">": "<", "<=": ">=", ">=": "<=", "=": "=", "<>": "<>"}
        if isinstance(node.right, ast.Literal) and not isinstance(node.left, ast.Literal):
            return node.left, node.right, node.op
        if isinstance(node.left, ast.Literal) and not isinstance(node.right, ast.Literal):
            return node.right, node.left, flip[node.op]
        return None

    def compare(self, node: ast.Compare) -> str:
        split = self._fields_first(node)
        if split is not None:
            other, lit, op = split
            value = lit.value
            if isinstance(other, (ast.Field, ast.Element)) and (type(value) is str
                                                                or _is_number(value)):
                x = self.raw(other)
                k = self.const(value)
                guard = (f"type({x}) is str" if type(value) is str
                         else f"type({x}) in _NUM and {x} - {x} == 0")
                return self.assign(f"({x} {_PY_OP[op]} {k}) if {guard} "
                                   f"else {_RT_OP[op]}(_norm({x}), {k})")
            x = self.value(other)
            return self.assign(f"{_RT_OP[op]}({x}, {self.const(value)})")
        left = self.value(node.left)
        right = self.value(node.right)
        return self.assign(f"{_RT_OP[node.op]}({left}, {right})")

    def and_or(self, node: ast.And | ast.Or, decides: bool) -> str:
        """AND (decides=False: a FALSE left side decides) or OR (a TRUE left side decides)."""
        a = self.boolean(node.left)
        result = self.temp()
        self.emit(f"if {a} is {decides}:")
        self.indent += 1
        self.emit(f"{result} = {decides}")
        self.indent -= 1
        self.emit("else:")
        self.indent += 1
        b = self.boolean(node.right)
        # a is now (not decides) or None
        self.emit(f"{result} = {b} if {a} is {not decides} else "
                  f"({decides} if {b} is {decides} else None)")
        self.indent -= 1
        return result

    def like(self, node: ast.Like) -> str:
        matcher = self.matchers.get(node) or compile_like(node.pattern, node.escape, node.pos)
        match_value = matcher.match_value
        if self.cond == "_jcond":  # JMS: LIKE on a value that is not a string is false
            match_value = runtime.jms_like(match_value)
        slow = self.const(match_value)
        if not isinstance(node.subject, (ast.Field, ast.Element)):
            return self.assign(f"{slow}({self.value(node.subject)})")
        x = self.raw(node.subject)
        if matcher.kind == "exact":
            fast = f"{x} == {self.const(matcher.exact)}"
        elif matcher.kind == "prefix_suffix" and not matcher.suffix:
            fast = f"{x}.startswith({self.const(matcher.prefix)})"
        elif matcher.kind == "prefix_suffix" and not matcher.prefix:
            fast = f"{x}.endswith({self.const(matcher.suffix)})"
        elif matcher.kind == "prefix_suffix":
            need = len(matcher.prefix) + len(matcher.suffix)
            fast = (f"len({x}) >= {need} and {x}.startswith({self.const(matcher.prefix)}) "
                    f"and {x}.endswith({self.const(matcher.suffix)})")
        else:
            fast = f"{self.const(matcher.match_str)}({x})"
        return self.assign(f"({fast}) if type({x}) is str else {slow}(_norm({x}))")

    def in_(self, node: ast.In) -> str:
        items = node.items
        literals = [i.value for i in items if isinstance(i, ast.Literal)]
        literal = len(literals) == len(items)
        values = literals if literal else []
        if literal and isinstance(node.subject, (ast.Field, ast.Element)):
            if all(type(v) is str for v in values):
                x = self.raw(node.subject)
                kset = self.const(frozenset(values))
                return self.assign(f"({x} in {kset}) if type({x}) is str "
                                   f"else _in(_norm({x}), {self.const(tuple(values))})")
            if all(_is_number(v) and v == v for v in values):
                x = self.raw(node.subject)
                kset = self.const(frozenset(values))
                return self.assign(f"({x} in {kset}) if type({x}) in _NUM and {x} - {x} == 0 "
                                   f"else _in(_norm({x}), {self.const(tuple(values))})")
        x = self.value(node.subject)
        if literal:
            return self.assign(f"_in({x}, {self.const(tuple(values))})")
        parts = [self.value(i) for i in items]
        return self.assign(f"_in({x}, ({', '.join(parts)},))")

    def between(self, node: ast.Between) -> str:
        low, high = node.low, node.high
        if (isinstance(node.subject, (ast.Field, ast.Element)) and isinstance(low, ast.Literal)
                and isinstance(high, ast.Literal) and _is_number(low.value)
                and _is_number(high.value)):
            x = self.raw(node.subject)
            lo, hi = self.const(low.value), self.const(high.value)
            return self.assign(f"({lo} <= {x} <= {hi}) if type({x}) in _NUM and {x} - {x} == 0 "
                               f"else _between(_norm({x}), {lo}, {hi})")
        x = self.value(node.subject)
        return self.assign(f"_between({x}, {self.value(low)}, {self.value(high)})")

    def exists(self, ref: ast.Field | ast.Element) -> str:
        if isinstance(ref, ast.Field):
            self.sections.add(ref.section)
            self.keys.setdefault(ref.section, set()).add(ref.name)
            return self.assign(f"{ref.name!r} in {_SECTION_VAR[ref.section]}")
        base = self.raw(ref.base)
        return self.assign(f"_has({base}, {ref.key!r})")


def generate(tree: ast.Node, matchers: dict[ast.Like, LikeMatcher] | None = None, *,
             jms: bool = False, reader: Reader | None = None) -> Generated:
    """The source of ``_evaluate(view) -> True | False | None`` for a folded tree; ``jms``: the
    selector dialect's semantics (a property used as a condition is false unless boolean);
    ``reader``: whose views are picked from (None: every view is read by its attributes)."""
    em = _Emitter(matchers or {}, "_jcond" if jms else "_cond")
    picker = reader.picker if reader is not None else lambda names: None
    result = em.boolean(tree)
    body = em.lines
    head = []
    picked = [s for s in _PICKED if s in em.sections]
    if len(picked) == 1:  # one of them: one call, which returns a decoded dict at once
        s = picked[0]
        keys = em.const(picker(em.keys.get(s, ())))
        head += [f"        {_SECTION_VAR[s]} = view.pick_{s}({keys}) if type(view) is _MV "
                 f"else view.{s}"]
    elif picked:  # both: one pick of just the keys named
        args = ", ".join(em.const(picker(em.keys.get(s, ()))) if s in em.sections else "None"
                         for s in _PICKED)
        names = ", ".join(_SECTION_VAR[s] if s in em.sections else "_" for s in _PICKED)
        plain = "; ".join(f"{_SECTION_VAR[s]} = view.{s}" for s in picked)
        head += ["        if type(view) is _MV:", f"            {names} = view.pick({args})",
                 "        else:", f"            {plain}"]
    for s in ast.SECTIONS:
        if s in em.sections and s not in _PICKED:
            head.append(f"        {_SECTION_VAR[s]} = view.{s}")
    if head:  # a message whose sections cannot be decoded matches nothing (unknown)
        head = ["    try:", *head, "    except _MessageFormatError:", "        return None"]
    source = "\n".join(["def _evaluate(view):", *head, *body, f"    return {result}", ""])
    globals_ = dict(BASE_GLOBALS)
    globals_["_MV"] = reader.view_type if reader is not None else _NoReader
    globals_["_MessageFormatError"] = reader.format_error if reader is not None else _NoFormatError
    globals_.update(em.consts)
    return Generated(source, globals_, frozenset(em.sections))
