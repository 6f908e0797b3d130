"""Incremental scanning helpers shared by every tool format.

Nothing here rescans text it has already consumed: a caller keeps at most one marker's length of
held-back text, so the work per delta is proportional to the delta.
"""

from __future__ import annotations

import re
from functools import lru_cache

from thinkgate.parsers.markers import MarkerSet


@lru_cache(maxsize=1024)
def _marker_set(markers: tuple[str, ...]) -> MarkerSet:
    return MarkerSet(markers)


def split_on_markers(buf: str, markers: tuple[str, ...]) -> tuple[str, str | None, str]:
    """Split ``buf`` at its first marker: ``(before, marker, after)``.

    With no complete marker, ``marker`` is None, ``before`` is the text that can no longer be part
    of a marker and ``after`` is the held-back suffix that still could be. Matching is the
    interpreter's (``MarkerSet``): a marker waits while a longer one could still complete.
    """
    ms = _marker_set(markers)
    hit = ms.next_marker(buf)
    if hit is not None:
        start, end, marker = hit
        return buf[:start], marker, buf[end:]
    n = ms.holdback(buf)
    return buf[: len(buf) - n], None, buf[len(buf) - n:]


_STRING_STOP = re.compile(r'["\\\x00-\x1f]')
_ESCAPES = frozenset('"\\/bfnrtu')
_HEX = frozenset("0123456789abcdefABCDEF")
_LITERALS = ("true", "false", "null")
# number prefix states: the next state for a character class, per state (None: not JSON)
_NUM_NEXT = {
    "start": {"-": "sign", "0": "zero", "d": "int"},
    "sign": {"0": "zero", "d": "int"},
    "zero": {".": "dot", "e": "exp"},
    "int": {"0": "int", "d": "int", ".": "dot", "e": "exp"},
    "dot": {"0": "frac", "d": "frac"},
    "frac": {"0": "frac", "d": "frac", "e": "exp"},
    "exp": {"+": "esign", "-": "esign", "0": "edig", "d": "edig"},
    "esign": {"0": "edig", "d": "edig"},
    "edig": {"0": "edig", "d": "edig"},
}
_NUM_DONE = frozenset(("zero", "int", "frac", "edig"))


def _num_class(ch: str) -> str:
    if ch == "0":
        return "0"
    if "1" <= ch <= "9":
        return "d"
    return "e" if ch in "eE" else ch


class ValueScanner:
    """Consumes one raw JSON value (any type) incrementally, without decoding it.

    ``feed`` returns how many characters of the text belong to the value; ``done`` becomes True
    once the value is complete. A bare scalar (number, true, ...) is complete only when the
    character after it arrives, or at ``close_scalar`` (end of input). The value is checked as
    strict JSON while it is read: the first character that cannot continue it (a key without
    quotes, `{"city": "Tokyo" ```, an escape such as `\\s`, a raw newline in a string, `nul`
    followed by `]`, a trailing comma) ends it before that character with ``bad`` set. What was
    consumed is then always the start of a JSON value, which ``repair.json_completion`` closes:
    a caller's arguments stay JSON.
    """

    __slots__ = ("depth_stack", "in_string", "escape", "done", "started", "scalar", "bad",
                 "expect", "key")

    def __init__(self) -> None:
        self.depth_stack: list[str] = []
        self.in_string = False
        self.escape = 0  # 1 after a backslash, 2-5 inside a \uXXXX escape
        self.done = False
        self.started = False
        self.scalar = ""  # the number's state, or the literal read so far
        self.bad = False
        # inside a container: value, value_or_close, key, key_or_close, colon, after
        self.expect = "value"
        self.key = False  # the string being read is an object key

    def feed(self, text: str) -> int:
        i, n = 0, len(text)
        while i < n:
            if self.done:
                return i
            ch = text[i]
            if self.in_string:
                if self.escape:
                    if self.escape == 1:
                        if ch not in _ESCAPES:
                            return self._bad(i)
                        self.escape = 2 if ch == "u" else 0
                    elif ch not in _HEX:
                        return self._bad(i)
                    else:
                        self.escape = 0 if self.escape == 5 else self.escape + 1
                    i += 1
                    continue
                m = _STRING_STOP.search(text, i)
                if m is None:
                    return n
                i = m.start()
                ch = text[i]
                if ch == "\\":
                    self.escape = 1
                elif ch == '"':
                    self.in_string = False
                    if not self.depth_stack:
                        self.done = True
                        return i + 1
                    self.expect = "colon" if self.key else "after"
                else:  # a raw control character
                    return self._bad(i)
                i += 1
                continue
            if self.scalar:
                if self._scalar_char(ch):
                    i += 1
                    continue
                if not self._scalar_complete():
                    return self._bad(i)
                self.scalar = ""
                if not self.depth_stack:
                    self.done = True
                    return i
                self.expect = "after"
            if ch in " \t\r\n":
                i += 1
                continue
            if not self._structural(ch):
                return self._bad(i)
            i += 1
            if self.done:
                return i
        return n

    def _structural(self, ch: str) -> bool:
        """One character outside strings and scalars; False where it cannot continue JSON."""
        expect = self.expect
        self.started = True
        if expect == "after":
            if ch == ",":
                self.expect = "key" if self.depth_stack[-1] == "}" else "value"
                return True
            return self._close(ch)
        if expect == "colon":
            if ch == ":":
                self.expect = "value"
                return True
            return False
        if expect in ("key", "key_or_close"):
            if ch == '"':
                self.in_string, self.key = True, True
                return True
            return expect == "key_or_close" and self._close(ch)
        if expect == "value_or_close" and ch == "]":
            return self._close(ch)
        if ch == '"':
            self.in_string, self.key = True, False
        elif ch == "{" or ch == "[":
            self.depth_stack.append("}" if ch == "{" else "]")
            self.expect = "key_or_close" if ch == "{" else "value_or_close"
        elif ch in "tfn":
            self.scalar = ch
        elif _num_class(ch) in _NUM_NEXT["start"]:
            self.scalar = "#" + _NUM_NEXT["start"][_num_class(ch)]
        else:
            return False
        return True

    def _close(self, ch: str) -> bool:
        if not self.depth_stack or ch != self.depth_stack[-1]:
            return False
        self.depth_stack.pop()
        if not self.depth_stack:
            self.done = True
        else:
            self.expect = "after"
        return True

    def _scalar_char(self, ch: str) -> bool:
        s = self.scalar
        if s[0] == "#":  # a number: "#" + its state
            nxt = _NUM_NEXT[s[1:]].get(_num_class(ch))
            if nxt is None:
                return False
            self.scalar = "#" + nxt
            return True
        word = s + ch
        if any(lit.startswith(word) for lit in _LITERALS):
            self.scalar = word
            return True
        return False

    def _scalar_complete(self) -> bool:
        s = self.scalar
        return s[1:] in _NUM_DONE if s[0] == "#" else s in _LITERALS

    def _bad(self, i: int) -> int:
        self.bad = True
        self.done = True
        return i

    def close_scalar(self) -> None:
        if self.scalar and not self.depth_stack:
            self.done = True
