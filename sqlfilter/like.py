"""LIKE patterns compiled to non-backtracking matchers that run in linear time.

Strategy: a pattern is split on ``%`` into segments; each segment is a run of literal characters
and ``_`` (exactly one character). The first segment must match at the start, the last at the
end, and each middle segment is found at its leftmost place after the previous one (str.find on
its longest literal run, then a check of the ``_`` positions). Taking the leftmost place is never
wrong: any later match leaves less room for what follows. Patterns with 100 ``%`` against
500-character subjects therefore cost a few ``find`` calls each, where a backtracking regex
(RabbitMQ's ``.*?``) may never finish.

RabbitMQ 4.2 (``rabbit_amqp_filter_sql.erl``, ``transform_pattern``) sorts patterns into four
kinds, and we keep the kinds because they differ for some subjects:
- no wildcard: exact comparison; one ``%`` and no ``_``: prefix and/or suffix comparison (on
  bytes, so a binary subject that is not valid UTF-8 still gets true or false);
- anything else is a PCRE regex ``^...$`` compiled without ``dotall``: a wildcard never matches a
  line feed, and ``$`` also matches just before a final line feed. A binary subject that is not
  valid UTF-8 makes such a match unknown.
Pattern checks (``FilterError``): the escape is exactly one character, it cannot end the pattern,
and the pattern holds no control character (below U+0020, or U+007F).

A segment with ``_`` holes may match at many candidate places that fail late (``'%a_a_…_b%'``
against a long run of ``a``): checking each costs its literal runs, so one match could cost
subject × pattern. As RabbitMQ's ``re:run`` gives up after PCRE's ``match_limit`` and answers
false, a match here gives up after ``STEP_BUDGET`` literal-run comparisons and is false.
"""

from __future__ import annotations

from sqlfilter.errors import FilterError

__all__ = ["compile_like", "LikeMatcher", "STEP_BUDGET"]

#: marker for ``_`` inside a segment
ANY = None

#: literal-run comparisons one match may spend looking for ``_`` segments; beyond it the
#: match is false (RabbitMQ: PCRE's match limit). Legitimate patterns spend a few per candidate.
STEP_BUDGET = 100_000


class _OverBudget(Exception):
    """A match spent its ``STEP_BUDGET``."""


def _is_control(ch: str) -> bool:
    return ord(ch) < 32 or ord(ch) == 127


def _scan(pattern: str, escape: str | None, pos: int | None) -> list[list[str | None]]:
    """Split the pattern into segments (lists of characters, ``ANY`` for ``_``) around ``%``."""
    segments: list[list[str | None]] = [[]]
    chars = iter(pattern)
    for ch in chars:
        if escape is not None and ch == escape:
            nxt = next(chars, None)
            if nxt is None:
                raise FilterError("the LIKE escape character cannot end the pattern", pos)
            if _is_control(nxt):
                raise FilterError("control character in LIKE pattern", pos)
            segments[-1].append(nxt)
        elif ch == "%":
            segments.append([])
        elif ch == "_":
            segments[-1].append(ANY)
        else:
            if _is_control(ch):
                raise FilterError("control character in LIKE pattern", pos)
            segments[-1].append(ch)
    return segments


class _Segment:
    """One run between ``%``: literal characters with ``_`` holes, matched without backtracking."""

    __slots__ = ("length", "runs", "anchor", "anchor_offset", "plain")

    def __init__(self, chars: list[str | None]):
        self.length = len(chars)
        self.plain = "".join([c for c in chars if c is not None]) if ANY not in chars else None
        # the literal runs between ``_`` as (offset, text); the longest is the anchor, found
        # with str.find to pick candidate places
        self.runs: list[tuple[int, str]] = []
        run: list[str] = []
        for i, ch in enumerate(chars + [ANY]):
            if ch is ANY:
                if run:
                    self.runs.append((i - len(run), "".join(run)))
                run = []
            else:
                run.append(ch)
        self.anchor_offset, self.anchor = max(self.runs, key=lambda r: len(r[1]), default=(0, ""))

    def matches_at(self, s: str, i: int) -> bool:
        if i < 0 or i + self.length > len(s):
            return False
        if self.plain is not None:
            return s.startswith(self.plain, i)
        for offset, text in self.runs:
            if not s.startswith(text, i + offset):
                return False
        return True

    def find(self, s: str, start: int, steps: list[int]) -> int:
        """Leftmost i >= start where the segment matches, or -1; each candidate checked costs
        ``steps[0]`` its runs (``_OverBudget`` when it runs out)."""
        if self.plain is not None:
            return s.find(self.plain, start)
        if not self.anchor:  # only ``_``: any place with room
            return start if start + self.length <= len(s) else -1
        cost = len(self.runs)
        i = start
        while True:
            j = s.find(self.anchor, i + self.anchor_offset)
            if j < 0:
                return -1
            cand = j - self.anchor_offset
            if cand + self.length > len(s):
                return -1
            steps[0] -= cost
            if steps[0] < 0:
                raise _OverBudget
            if self.matches_at(s, cand):
                return cand
            i = cand + 1


class LikeMatcher:
    """A compiled LIKE pattern: ``matcher(subject)`` → True/False/None for str/bytes subjects."""

    __slots__ = ("kind", "exact", "prefix", "suffix", "segments", "__call__")

    def __init__(self, pattern: str, escape: str | None = None, pos: int | None = None):
        if escape is not None and len(escape) != 1:
            raise FilterError("ESCAPE must be a single-character string", pos)
        segments = _scan(pattern, escape, pos)
        wildcard_one = any(ANY in seg for seg in segments)
        if len(segments) == 1 and not wildcard_one:
            self.kind = "exact"
            self.exact = "".join(segments[0])  # type: ignore[arg-type]
        elif len(segments) == 2 and not wildcard_one:
            self.kind = "prefix_suffix"
            self.prefix = "".join(segments[0])  # type: ignore[arg-type]
            self.suffix = "".join(segments[1])  # type: ignore[arg-type]
        else:
            self.kind = "regex"
        self.segments = [_Segment(seg) for seg in segments]

    def match_str(self, s: str) -> bool:
        """Match a string subject (RabbitMQ's rules for the pattern's kind)."""
        kind = self.kind
        if kind == "exact":
            return s == self.exact
        if kind == "prefix_suffix":
            return (len(s) >= len(self.prefix) + len(self.suffix)
                    and s.startswith(self.prefix) and s.endswith(self.suffix))
        # PCRE without dotall: nothing matches "\n", and "$" may stand before a final "\n"
        if "\n" in s:
            if s.endswith("\n"):
                s = s[:-1]
            if "\n" in s:
                return False
        return self._match_segments(s)

    def _match_segments(self, s: str) -> bool:
        segs = self.segments
        first = segs[0]
        if len(segs) == 1:
            return first.length == len(s) and first.matches_at(s, 0)
        last = segs[-1]
        if first.length + last.length > len(s):
            return False
        if not first.matches_at(s, 0):
            return False
        end = len(s) - last.length
        if not last.matches_at(s, end):
            return False
        i = first.length
        steps = [STEP_BUDGET]
        for seg in segs[1:-1]:
            if seg.length == 0:
                continue
            try:
                j = seg.find(s, i, steps)
            except _OverBudget:
                return False
            if j < 0 or j + seg.length > end:
                return False
            i = j + seg.length
        return True

    def match_value(self, x: object) -> bool | None:
        """Any normalised value: strings and binaries match, anything else is unknown."""
        t = type(x)
        if t is str:
            return self.match_str(x)  # type: ignore[arg-type]
        if t is bytes:
            return self.match_bytes(x)  # type: ignore[arg-type]
        return None

    def match_bytes(self, b: bytes) -> bool | None:
        """A binary subject: compared as bytes for exact/prefix/suffix, else as UTF-8 text."""
        kind = self.kind
        if kind == "exact":
            return b == self.exact.encode("utf-8", "surrogatepass")
        if kind == "prefix_suffix":
            p = self.prefix.encode("utf-8", "surrogatepass")
            q = self.suffix.encode("utf-8", "surrogatepass")
            return len(b) >= len(p) + len(q) and b.startswith(p) and b.endswith(q)
        try:
            s = b.decode("utf-8")
        except UnicodeDecodeError:
            return None
        return self.match_str(s)


def compile_like(pattern: str, escape: str | None = None, pos: int | None = None) -> LikeMatcher:
    """Check and compile a LIKE pattern (``FilterError`` for a bad pattern or escape)."""
    return LikeMatcher(pattern, escape, pos)
