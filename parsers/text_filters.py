"""Streaming text filters a reasoning format may run over its reasoning and its content.

A filter is fed the text of one kind (reasoning or content) delta by delta and returns what can be
sent now; `feed(text, final=True)` returns what it still holds. Work per call is O(len(text)) plus
the few characters held back, so the output is the same however the text was split.
"""

from __future__ import annotations

import re

_PLAIN = re.compile(r"[^`$\\]+")


class EscapedNewlines:
    """MiniCPM-V's tokenizer decodes a newline as the two characters `\\` `n` (or `\\r`,
    `\\r\\n`); this turns them back into newlines, except inside code (`` ` ``, ```` ``` ````)
    and math (`$`, `$$`, `\\(..\\)`, `\\[..\\]`) and after another backslash (`\\\\n` stays)."""

    def __init__(self) -> None:
        self._close: str | None = None  # the marker that ends the code/math span we are in
        self._held = ""

    def feed(self, text: str, final: bool = False) -> str:
        s, self._held = self._held + text, ""
        out: list[str] = []
        i, n = 0, len(s)
        while i < n:
            close = self._close
            if close is not None:
                j = s.find(close, i)
                if j >= 0:
                    out.append(s[i:j + len(close)])
                    i, self._close = j + len(close), None
                    continue
                keep = 0 if final else _prefix_at_end(s, i, close)
                out.append(s[i:n - keep])
                self._held = s[n - keep:]
                break
            m = _PLAIN.match(s, i)
            if m:
                out.append(m.group())
                i = m.end()
                continue
            c, rest = s[i], n - i
            if c == "`":
                if not final and rest <= 2 and s[i:] in ("`", "``"):
                    self._held = s[i:]
                    break
                self._close = "```" if s.startswith("```", i) else "`"
                out.append(self._close)
                i += len(self._close)
            elif c == "$":
                if not final and rest == 1:
                    self._held = "$"
                    break
                self._close = "$$" if s.startswith("$$", i) else "$"
                out.append(self._close)
                i += len(self._close)
            else:  # a backslash
                j = i + 1
                while j < n and s[j] == "\\":
                    j += 1
                if j - i > 1:  # a run of backslashes: escapes, left alone (its length may grow)
                    if not final and j == n:
                        self._held = s[i:]
                        break
                    out.append(s[i:j])
                    i = j
                elif not final and rest <= 3 and s[i:] in ("\\", "\\r", "\\r\\"):
                    self._held = s[i:]
                    break
                elif s.startswith("\\r\\n", i):
                    out.append("\n")
                    i += 4
                elif s.startswith(("\\n", "\\r"), i):
                    out.append("\n")
                    i += 2
                elif s.startswith(("\\(", "\\["), i):
                    self._close = "\\)" if s[i + 1] == "(" else "\\]"
                    out.append(s[i:i + 2])
                    i += 2
                else:
                    out.append("\\")
                    i += 1
        if final and self._held:
            out.append(self._held)
            self._held = ""
        return "".join(out)


def _prefix_at_end(s: str, start: int, marker: str) -> int:
    """Length of the longest tail of `s[start:]` that is a proper prefix of `marker`."""
    for k in range(min(len(marker) - 1, len(s) - start), 0, -1):
        if marker.startswith(s[len(s) - k:]):
            return k
    return 0
