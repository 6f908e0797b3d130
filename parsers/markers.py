"""Incremental marker matching: find markers in a stream, holding back only possible prefixes.

`MarkerSet.next_marker(buf)` finds the first complete marker in `buf`; `MarkerSet.holdback(buf)`
says how many trailing characters could still grow into a marker. Both look only at the text the
caller passes (the held-back tail plus one delta), so per-delta work is O(len(delta)).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class PatternMarker:
    """A marker with a variable part, e.g. `<think:high>` for `<think>` with a `:suffix`.

    `key` is the name the match reports; `pattern` matches a complete marker; `partial` matches
    every proper prefix of one (anchored at the end of the text); `max_len` bounds both.
    """

    key: str
    pattern: str
    partial: str
    max_len: int


def tag_marker(name: str, closing: bool = False, max_suffix: int = 32) -> PatternMarker:
    """`<name>` or `<name:anything>` (Hunyuan's typed tags); key is the plain `<name>`."""
    slash = "/" if closing else ""
    head = f"<{slash}{name}"
    body = f"(?::[^<>\\n]{{0,{max_suffix}}})?"
    prefixes = "|".join(re.escape(head[:i]) for i in range(len(head), 0, -1))
    partial = f"(?:{re.escape(head)}(?::[^<>\\n]{{0,{max_suffix}}})?|{prefixes})"
    return PatternMarker(f"{head}>", re.escape(head) + body + ">", partial, len(head) + max_suffix + 2)


def seq_marker(key: str, pieces: tuple[tuple[str, str, str], ...], max_len: int) -> PatternMarker:
    """A marker written as a sequence of pieces, each ``(regex, prefix_regex, literal)``.

    Use ``lit(text)`` for a fixed piece and ``(regex, prefix_regex, "")`` for a variable one
    (``prefix_regex`` matches every prefix of the piece, the empty one included). The partial
    pattern is every proper prefix of the whole: some pieces complete, then part of the next.
    """
    full = "".join(p[0] for p in pieces)
    alts = []
    for k, piece in enumerate(pieces):
        head = "".join(p[0] for p in pieces[:k])
        alts.append(head + piece[1])
    partial = "(?:" + "|".join(f"(?:{a})" for a in alts) + ")"
    return PatternMarker(key, full, partial, max_len)


def lit(text: str) -> tuple[str, str, str]:
    """A fixed piece of a ``seq_marker``: the text, and its non-empty proper prefixes."""
    prefixes = "|".join(re.escape(text[:i]) for i in range(len(text) - 1, 0, -1))
    return re.escape(text), f"(?:{prefixes})" if prefixes else "(?!)", text


class MarkerSet:
    """A fixed set of markers, compiled once and shared by every stream of a parser."""

    def __init__(self, literals: Iterable[str], patterns: Iterable[PatternMarker] = ()) -> None:
        self.literals = tuple(sorted(set(m for m in literals if m), key=len, reverse=True))
        self.patterns = tuple(patterns)
        alts = [re.escape(m) for m in self.literals]
        alts += [f"(?P<p{i}>{p.pattern})" for i, p in enumerate(self.patterns)]
        self._find = re.compile("|".join(alts)) if alts else None
        prefixes = {m[:i] for m in self.literals for i in range(1, len(m))}
        palts = [re.escape(p) for p in sorted(prefixes, key=len, reverse=True)]
        palts += [p.partial for p in self.patterns]
        self._partial = re.compile("(?:" + "|".join(palts) + r")\Z") if palts else None
        self._prefixes = prefixes
        self.max_len = max([len(m) for m in self.literals] + [p.max_len for p in self.patterns],
                           default=0)

    def __bool__(self) -> bool:
        return self._find is not None

    def next_marker(self, buf: str, pos: int = 0,
                    final: bool = False) -> tuple[int, int, str] | None:
        """(start, end, key) of the first complete marker at or after `pos`, or None.

        Unless `final`, a match is not reported while a longer marker could still complete at or
        before its start: `[` waits in `[TOOL` (`[TOOL_CALLS]`), `<tool_call>` at the end of the
        buffer waits (`<tool_calls>`). The caller holds back `holdback(buf)` characters meanwhile.
        """
        if self._find is None:
            return None
        m = self._find.search(buf, pos)
        if m is None:
            return None
        key = m.group(0)
        if m.lastgroup is not None:
            key = self.patterns[int(m.lastgroup[1:])].key
        if not final and len(buf) - m.start() < self.max_len:
            held = self.holdback(buf, pos)
            if held and len(buf) - held <= m.start():
                return None
        return m.start(), m.end(), key

    def holdback(self, buf: str, pos: int = 0) -> int:
        """Length of the longest suffix of `buf[pos:]` that could be the start of a marker."""
        if self._partial is None or len(buf) <= pos:
            return 0
        m = self._partial.search(buf, max(pos, len(buf) - self.max_len))
        return 0 if m is None else len(buf) - m.start()
