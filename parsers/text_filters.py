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


class CohereCitations:
    """Cohere's grounded answers cite sources inline: `<co>cited text</co: 0:[1,2]>`. vLLM's
    Cohere parsers (its `cohere_melody` filter) return the cited text without the tags: `<co>`
    opens a citation (inside one it is text), `</co: ...>` closes it (outside one it is text).
    A closing tag cut off by the end of the output is dropped; `<co>` with nothing after it
    too."""

    OPEN, CLOSE = "<co>", "</co: "
    MAX_SPEC = 256  # a closing tag's `0:[1,2],..` list longer than this is text, not a tag

    def __init__(self) -> None:
        self._inside = False
        self._held = ""

    def feed(self, text: str, final: bool = False) -> str:
        s, self._held = self._held + text, ""
        out: list[str] = []
        i, n = 0, len(s)
        while i < n:
            tag = self.CLOSE if self._inside else self.OPEN
            j = s.find(tag, i)
            if j < 0:
                keep = 0 if final else _prefix_at_end(s, i, tag)
                out.append(s[i:n - keep])
                self._held = s[n - keep:]
                break
            out.append(s[i:j])
            if not self._inside:
                self._inside, i = True, j + len(tag)
                continue
            k = s.find(">", j + len(tag), j + len(tag) + self.MAX_SPEC)
            if k < 0:
                if n - j <= self.MAX_SPEC and not final:
                    self._held = s[j:]  # a closing tag still being written
                    break
                if final and n - j <= self.MAX_SPEC:
                    break  # cut off inside the closing tag: dropped
                out.append(s[j:j + len(tag)])
                i = j + len(tag)
                continue
            self._inside, i = False, k + 1
        return "".join(out)
