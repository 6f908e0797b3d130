"""Incremental scanning helpers shared by every tool format.

Nothing here rescans text it has already consumed: a caller keeps at most one marker's length of
held-back text, so the work per delta is proportional to the delta.
"""

from __future__ import annotations

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


class ValueScanner:
    """Consumes one raw JSON value (any type) incrementally, without decoding it.

    ``feed`` returns how many characters of the text belong to the value; ``done`` becomes True
    once the value is complete. A bare scalar (number, true, ...) is complete only when the
    character after it arrives, or at ``close_scalar`` (end of input). Inside an object or a
    list, a string or a nested value must be followed by `,` `:` or a closing bracket: any
    other character (`{"city": "Tokyo" ```) is not JSON, and the value ends before it with
    ``bad`` set (the caller closes what it sent: arguments stay JSON).
    """

    __slots__ = ("depth_stack", "in_string", "escape", "done", "started", "scalar", "bad",
                 "after")

    _SCALAR = set("0123456789+-.eEtruefalsnTRUEFALSN")

    def __init__(self) -> None:
        self.depth_stack: list[str] = []
        self.in_string = False
        self.escape = False
        self.done = False
        self.started = False
        self.scalar = False
        self.bad = False
        self.after = False  # inside a container, right after a string or a nested value

    def feed(self, text: str) -> int:
        for i, ch in enumerate(text):
            if self.done:
                return i
            if not self.started:
                if ch in " \t\r\n":
                    continue
                self.started = True
                if ch == "{" or ch == "[":
                    self.depth_stack.append("}" if ch == "{" else "]")
                elif ch == '"':
                    self.in_string = True
                elif ch in self._SCALAR:
                    self.scalar = True
                else:
                    self.bad = True
                    self.done = True
                    return i
                continue
            if self.scalar:
                if ch in self._SCALAR:
                    continue
                self.done = True
                return i
            if self.in_string:
                if self.escape:
                    self.escape = False
                elif ch == "\\":
                    self.escape = True
                elif ch == '"':
                    self.in_string = False
                    if not self.depth_stack:
                        self.done = True
                        return i + 1
                    self.after = True
                continue
            if self.after and ch not in " \t\r\n":
                if ch == "," or ch == ":":
                    self.after = False
                    continue
                if ch != "}" and ch != "]":
                    self.bad = True
                    self.done = True
                    return i
            if ch == '"':
                self.in_string = True
            elif ch == "{" or ch == "[":
                self.depth_stack.append("}" if ch == "{" else "]")
            elif ch == "}" or ch == "]":
                if ch != self.depth_stack[-1]:
                    self.bad = True
                    self.done = True
                    return i
                self.depth_stack.pop()
                if not self.depth_stack:
                    self.done = True
                    return i + 1
                self.after = True
        return len(text)

    def close_scalar(self) -> None:
        if self.scalar:
            self.done = True
