"""What a compiled filter requires of a message: the values a field must hold for the
expression to be true, read from the folded tree (never from the text).

Why: a broker that indexes the values of some fields per chunk (broker-derived filter keys,
docs/storage.md) can skip a chunk whose index holds none of the values the filter requires,
and still give exactly the deliveries of a full scan, because stage 2 decides every message
it reads. That is sound only if "required" is exact under three-valued logic:
- ``field = literal`` (either side) is true only when ``eq(norm(field), literal)`` is true;
- ``field IN (l1, l2, ...)`` of literals is true only when the field equals one of them;
- ``a AND b`` is true only when both are: the constraints of both hold (intersected per field);
- ``a OR b`` is true only when one is: a field constrained on both sides is constrained to the
  union; anything else (NOT, LIKE, a comparison with no literal, ...) constrains nothing.

A property filter (``amqp:properties-filter`` / ``amqp:application-properties-filter``) is an
AND of entries; an entry whose test is plain equality (not ``&p:``/``&s:``, not null) requires
its reference value (``requirement_of``). Its equality is mostly narrower than ``=`` (a binary
reference does not match a string), so the requirement is a superset there; where it is wider
(a one-character string reference matches an AMQP char, which ``=`` sees as a number), the
requirement holds both forms.

Numbers also bound a field (``required_bounds``): ``field > literal`` (``<``, ``>=``, ``<=``,
either side), ``BETWEEN`` two literals, and ``=``/``IN`` whose literals are all numbers are true
only when the field holds a number (an int or float, never a boolean: ``runtime`` orders no
other pair with a number) inside the interval; AND intersects intervals, OR takes the hull of
both sides' (a field bound on one side only is not bound). An index that keeps each block's
least and greatest number per key then skips the blocks whose numbers all lie outside.

Values are compared through ``canonical``, which is equal for two values exactly when
``runtime.eq`` says they are equal (numbers by value whatever their type, a string and binary
with the same UTF-8 bytes, booleans only with booleans), and ``index_token`` turns a field and
a value into the bytes an index holds. Only fields read as they are stored count: application
properties and the properties section (header fields have defaults, JMS headers are computed,
elements and message annotations are not indexed).
"""

from __future__ import annotations

import math
import re
import struct
from typing import Any, Callable

from sqlfilter import ast, runtime

__all__ = ["Requirement", "required_values", "Bound", "Bounds", "required_bounds", "bounds_of",
           "number_head", "parse_number", "requirement_of", "canonical", "index_token",
           "wanted_tokens", "Needles", "needles", "needles_of", "number_encodings", "prefiltered", "INDEXABLE_SECTIONS"]

#: sections whose fields are read as stored (no default, no computation): indexable
INDEXABLE_SECTIONS = frozenset(("application_properties", "properties"))

#: (section, field name) -> the canonical values one of which the field must hold
Requirement = dict[tuple[str, str], frozenset]


def canonical(value: Any) -> tuple | None:
    """A value as the equality of the filter language sees it: ``canonical(a) ==
    canonical(b)`` exactly when ``runtime.eq(norm(a), norm(b))`` is true; None for a value
    that equals nothing (null, NaN, a list...)."""
    v = runtime.norm(value)
    if v is None:
        return None
    if type(v) is bool:
        return ("b", v)
    if type(v) is float and v.is_integer():
        return ("n", int(v))  # 5.0 = 5; Python compares int and float exactly
    if type(v) is int or type(v) is float:
        return ("n", v)
    if type(v) is str:
        return ("s", v.encode("utf-8", "surrogatepass"))
    if type(v) is bytes:
        return ("s", v)
    return None  # pragma: no cover - norm returns only the types above


def _token(section: str, name: str, c: tuple) -> bytes:
    kind, v = c
    raw = v if kind == "s" else repr(v).encode("ascii")
    return b"\x00".join((section.encode(), name.encode("utf-8", "surrogatepass"),
                         kind.encode(), raw))


def index_token(section: str, name: str, value: Any) -> bytes | None:
    """The bytes an index holds for ``value`` of a field (None: the value equals nothing)."""
    c = canonical(value)
    return None if c is None else _token(section, name, c)


def wanted_tokens(requirement: Requirement) -> dict[tuple[str, str], frozenset[bytes]]:
    """Per required field, the index tokens of the values it may hold: a chunk whose index has
    none of one field's tokens holds no match (an empty set: nothing matches)."""
    return {key: frozenset(_token(key[0], key[1], c) for c in values)
            for key, values in requirement.items()}


def _field(node: ast.Node) -> tuple[str, str] | None:
    if isinstance(node, ast.Field) and node.section in INDEXABLE_SECTIONS:
        return node.section, node.name
    return None


def _values(literals: list[Any]) -> frozenset:
    return frozenset(c for c in map(canonical, literals) if c is not None)


def required_values(tree: ast.Node) -> Requirement:
    """The fields the folded ``tree`` constrains to values, for it to be true (see above).

    An empty set for a field means nothing can match (``a = 1 AND a = 2``); a field missing
    from the result is not constrained.
    """
    if isinstance(tree, ast.Compare) and tree.op == "=":
        for side, other in ((tree.left, tree.right), (tree.right, tree.left)):
            key = _field(side)
            if key is not None and isinstance(other, ast.Literal):
                return {key: _values([other.value])}
        return {}
    if isinstance(tree, ast.In):
        key = _field(tree.subject)
        if key is not None and all(isinstance(i, ast.Literal) for i in tree.items):
            return {key: _values([i.value for i in tree.items if isinstance(i, ast.Literal)])}
        return {}
    if isinstance(tree, ast.And):
        left, right = required_values(tree.left), required_values(tree.right)
        out = dict(left)
        for key, values in right.items():
            out[key] = out[key] & values if key in out else values
        return out
    if isinstance(tree, ast.Or):
        left, right = required_values(tree.left), required_values(tree.right)
        return {key: left[key] | right[key] for key in left.keys() & right.keys()}
    return {}


def requirement_of(f: Any) -> Requirement:
    """The requirement of any compiled stage-2 filter: an SQL filter or selector (its tree), a
    property filter (its equality entries), or nothing known (an empty requirement)."""
    tree = getattr(f, "tree", None)
    if tree is not None:
        return required_values(tree)
    entries = getattr(f, "entries", None)
    if entries is None:
        return {}
    out: Requirement = {}
    for section, name, test in entries():
        if not hasattr(test, "equals"):
            continue
        equals = test.equals
        alternatives = [equals]
        if type(equals) is str and len(equals) == 1:
            # a char value matches a one-character string reference here, while ``=`` (and so
            # ``canonical``) sees a char as its code point: require either form
            alternatives.append(ord(equals))
        values = _values(alternatives)
        key = (section, name)
        out[key] = out[key] & values if key in out else values
    return out


#: (low, high, low included, high included): the numbers a field may hold for a match
Bound = tuple[Any, Any, bool, bool]
#: (section, field name) -> its bound; a field missing from it is not bound
Bounds = dict[tuple[str, str], Bound]
_ANY: Bound = (-math.inf, math.inf, False, False)
#: ``field OP literal`` as an interval (the literal on the left: the operator mirrored)
_INTERVALS: dict[str, Callable[[Any], Bound]] = {
    ">": lambda v: (v, math.inf, False, False), ">=": lambda v: (v, math.inf, True, False),
    "<": lambda v: (-math.inf, v, False, False), "<=": lambda v: (-math.inf, v, False, True),
    "=": lambda v: (v, v, True, True)}
_MIRROR = {">": "<", ">=": "<=", "<": ">", "<=": ">=", "=": "="}


def _number(node: ast.Node) -> int | float | None:
    """A literal's number (a boolean is none, NaN equals and orders nothing)."""
    if isinstance(node, ast.Literal) and type(node.value) in (int, float) and node.value == node.value:
        return node.value
    return None


def _intersect(a: Bound, b: Bound) -> Bound:
    lo, lo_in = (a[0], a[2]) if a[0] > b[0] else (b[0], b[2]) if b[0] > a[0] else (a[0], a[2] and b[2])
    hi, hi_in = (a[1], a[3]) if a[1] < b[1] else (b[1], b[3]) if b[1] < a[1] else (a[1], a[3] and b[3])
    return lo, hi, lo_in, hi_in


def _hull(a: Bound, b: Bound) -> Bound:
    lo, lo_in = (a[0], a[2]) if a[0] < b[0] else (b[0], b[2]) if b[0] < a[0] else (a[0], a[2] or b[2])
    hi, hi_in = (a[1], a[3]) if a[1] > b[1] else (b[1], b[3]) if b[1] > a[1] else (a[1], a[3] or b[3])
    return lo, hi, lo_in, hi_in


def required_bounds(tree: ast.Node) -> Bounds:
    """The fields the folded ``tree`` requires to hold a number in an interval (see above)."""
    if isinstance(tree, ast.Compare) and tree.op in _INTERVALS:
        for side, other, op in ((tree.left, tree.right, tree.op),
                                (tree.right, tree.left, _MIRROR[tree.op])):
            key, v = _field(side), _number(other)
            if key is not None and v is not None:
                return {key: _INTERVALS[op](v)}
        return {}
    if isinstance(tree, ast.Between):
        key, lo, hi = _field(tree.subject), _number(tree.low), _number(tree.high)
        return {key: (lo, hi, True, True)} if key and lo is not None and hi is not None else {}
    if isinstance(tree, ast.In):
        key, values = _field(tree.subject), [_number(i) for i in tree.items]
        if key is None or not values or None in values:
            return {}
        return {key: (min(values), max(values), True, True)}  # type: ignore[type-var]
    if isinstance(tree, ast.And):
        left, right = required_bounds(tree.left), required_bounds(tree.right)
        return {k: _intersect(left.get(k, _ANY), right.get(k, _ANY)) for k in left.keys() | right.keys()}
    if isinstance(tree, ast.Or):
        left, right = required_bounds(tree.left), required_bounds(tree.right)
        return {k: _hull(left[k], right[k]) for k in left.keys() & right.keys()}
    return {}


def bounds_of(f: Any) -> Bounds:
    """The bounds of any compiled stage-2 filter: an SQL filter's or selector's tree (a
    property filter compares by equality only: none)."""
    tree = getattr(f, "tree", None)
    return required_bounds(tree) if tree is not None else {}


def number_head(section: str, name: str) -> bytes | None:
    """What every number's ``index_token`` of a field starts with, up to its value's digits
    (None for a name holding NUL: then a token's last NUL need not end its head, so a reader of
    heads finds no number there)."""
    if "\x00" in name:
        return None
    head = _token(section, name, ("n", 0))[:-1]
    assert _token(section, name, ("n", -2.5)) == head + b"-2.5"
    return head


def parse_number(raw: bytes) -> int | float:
    """The number of a token's value bytes (``repr`` of an int or a float)."""
    try:
        return int(raw)
    except ValueError:
        return float(raw)


#: groups of byte strings; a message can match only if it holds one string of every group
Needles = tuple[tuple[bytes, ...], ...]


#: the AMQP constructors of fixed width a number may be stored with, and their layout: every
#: integer width, char (its code point), timestamp (ms); float and double are taken only when
#: they hold the value exactly. Decimals equal nothing (``runtime.norm``), so they need none.
_INTEGER_CODES = ((0x50, ">B"), (0x52, ">B"), (0x53, ">B"), (0x51, ">b"), (0x54, ">b"),
                  (0x55, ">b"), (0x60, ">H"), (0x61, ">h"), (0x70, ">I"), (0x73, ">I"),
                  (0x71, ">i"), (0x80, ">Q"), (0x81, ">q"), (0x83, ">q"))
_FLOAT_CODES = ((0x72, ">f"), (0x82, ">d"))


def number_encodings(v: int | float) -> list[bytes]:
    """Every AMQP encoding of a value that ``runtime.eq`` finds equal to the number ``v`` (a
    canonical number: an int, or a float that is not an integer)."""
    out = [b"\x43", b"\x44"] if v == 0 else []  # uint0, ulong0
    if type(v) is int:
        for code, fmt in _INTEGER_CODES:
            try:
                out.append(bytes((code,)) + struct.pack(fmt, v))
            except struct.error:  # out of the width's range
                pass
    for code, fmt in _FLOAT_CODES:
        try:
            packed = struct.pack(fmt, v)
        except (struct.error, OverflowError):
            continue
        if struct.unpack(fmt, packed)[0] == v:
            out.append(bytes((code,)) + packed)
            if v == 0:
                out.append(bytes((code,)) + struct.pack(fmt, -0.0))
    return out


def _key_prefixes(name: str) -> list[bytes]:
    """The bytes every encoding of the map key ``name`` ends with, as a picker matches it: the
    low byte of its length, then its UTF-8 (str8/sym8, str32/sym32); a one-character name may
    also be a char key (its code point)."""
    encoded = name.encode("utf-8")
    out = [bytes((len(encoded) & 0xFF,)) + encoded]
    if len(name) == 1:
        out.append(b"\x73" + struct.pack(">I", ord(name)))
    return out


def needles(requirement: Requirement) -> Needles:
    """The byte strings a message's stored bytes must contain for a match, a group per
    required field (one string of each group):
    - a string or binary value: its raw bytes (every AMQP encoding of a string, symbol or
      binary holds its bytes contiguously; a UUID is compared by its 16 bytes, which the
      encoding holds too);
    - a number, for an application property: the key's last bytes directly followed by one of
      the value's encodings (``number_encodings``), as a map holds its entries;
    - anything else (a boolean, an empty string, a number in the properties section): no
      needle for the value; an application property's key then stands for the field.
    A field with no possible value gives an empty group: nothing matches. This is a necessary
    condition only: stage 2 still decides."""
    groups: list[tuple[bytes, ...]] = []
    for (section, name), values in sorted(requirement.items()):
        if not values:
            return ((),)
        app = section == "application_properties" and bool(name)
        try:
            prefixes = _key_prefixes(name) if app else []
        except UnicodeEncodeError:  # a lone surrogate: no valid message has this key
            return ((),)
        group: set[bytes] = set()
        for kind, v in values:
            if kind == "s" and v:
                group.add(v)
            elif kind == "n" and app:
                group.update(p + e for p in prefixes for e in number_encodings(v))
            else:
                group.clear()
                break
        if group:
            groups.append(tuple(sorted(group)))
        elif app:  # the key's name, which every holder of the field has
            groups.append((name.encode("utf-8"),))
    return tuple(groups)


def needles_of(f: Any) -> Needles:
    """The needles of any compiled stage-2 filter (none for None): what a storage reader takes
    to drop whole chunks (``storage.Reader``'s ``needles``) and ``prefiltered`` single records."""
    return needles(requirement_of(f)) if f is not None else ()


def _any_of(strings: list[bytes]) -> bytes:
    """A pattern for "any of ``strings``", the longest first at a position, with their common
    prefix written once: ``re``'s parser takes a shared prefix out of an alternation a byte at a
    time, deleting it from every branch each time, which is quadratic in its length (the 32
    number encodings behind one 25,000-character application-property key took 4-12 s to
    compile, holding the event loop)."""
    low, high = min(strings), max(strings)  # the shared prefix of all is theirs
    prefix = low[:next((i for i, (a, b) in enumerate(zip(low, high, strict=False)) if a != b), len(low))]
    rest = sorted((s[len(prefix):] for s in strings), key=len, reverse=True)
    return re.escape(prefix) + b"(?:" + b"|".join(re.escape(r) for r in rest) + b")"


def _holds_one(group: tuple[bytes, ...]) -> Callable[[bytes], Any]:
    """A test for "holds one of ``group``'s strings": ``in`` for one; for several, a regular
    expression per first byte, whose shared prefix the engine finds at the speed of ``find``
    (one expression over all 32 encodings of ``k = 7`` tried each position: 2x slower), as
    ``storage.format`` searches whole chunks."""
    if len(group) == 1:
        (needle,) = group
        return lambda data: needle in data
    clusters: dict[bytes, list[bytes]] = {}
    for needle in group:
        clusters.setdefault(needle[:1], []).append(needle)
    searches = [re.compile(_any_of(c)).search for c in clusters.values()]
    if len(searches) == 1:
        return searches[0]
    return lambda data: any(search(data) for search in searches)


def prefiltered(f: Any, evaluate: Callable[[bytes], bool]) -> Callable[[bytes], bool]:
    """``evaluate`` behind ``f``'s needles: a record without them is rejected by a byte
    search (C speed) instead of being decoded and evaluated (microseconds)."""
    found = needles_of(f)
    if not found:
        return evaluate
    if len(found) == 1 and len(found[0]) == 1:
        (needle,), = found
        return lambda data: needle in data and evaluate(data)
    tests = [_holds_one(group) for group in found]
    if len(tests) == 1:
        (test,) = tests
        return lambda data: bool(test(data)) and evaluate(data)  # (a search gives a match)
    return lambda data: all(test(data) for test in tests) and evaluate(data)
