"""Gemma-style arguments: ``{city:<|"|>Paris<|"|>,days:3,opts:{deep:true}}``.

Keys are bare; strings sit between a delimiter token (``<|"|>`` for Gemma 4, ``<escape>`` for
FunctionGemma); numbers, booleans, objects and lists are written as in JSON, and their
``"..."`` strings may hold ``}``/``]``/``,`` (tracked, escapes included). Each top-level entry is
converted and streamed when it completes.
"""

from __future__ import annotations

import json
from typing import Any

from .convert import coerce_by_schema, parse_literal
from .events import ArgsDelta, Body, CallEnd, CallStart, Event, args_entry


def gemma_value(text: str, delim: str, raw: bool = False) -> Any:
    """Parse one Gemma-style value (raises ValueError on bad syntax); `raw`: a bare scalar
    (`42`, `true`) stays its text, for the schema to type (Gemma 4, as vLLM reads it)."""
    value, pos = _value(text.strip(), 0, delim, raw)
    if text.strip()[pos:].strip():
        raise ValueError(f"trailing text after a Gemma value: {text!r}")
    return value


def _json_string_end(s: str, i: int) -> int:
    """The index after the JSON string opening at ``s[i] == '"'``."""
    j = i + 1
    while j < len(s):
        if s[j] == "\\":
            j += 2
            continue
        if s[j] == '"':
            return j + 1
        j += 1
    raise ValueError(f"unterminated JSON string in {s!r}")


def _skip_ws(s: str, i: int) -> int:
    while i < len(s) and s[i] in " \t\r\n":
        i += 1
    return i


def _value(s: str, i: int, delim: str, raw: bool = False) -> tuple[Any, int]:
    i = _skip_ws(s, i)
    if s.startswith(delim, i):
        j = s.find(delim, i + len(delim))
        if j < 0:
            raise ValueError(f"unterminated Gemma string in {s!r}")
        return s[i + len(delim):j], j + len(delim)
    if i < len(s) and s[i] == '"':
        j = _json_string_end(s, i)
        return json.loads(s[i:j]), j
    if i < len(s) and s[i] in "{[":
        close = "}" if s[i] == "{" else "]"
        out_d: dict[str, Any] = {}
        out_l: list[Any] = []
        i = _skip_ws(s, i + 1)
        while i < len(s) and s[i] != close:
            if close == "}":
                if s[i] == '"':
                    k = _json_string_end(s, i)
                    key, j = json.loads(s[i:k]), _skip_ws(s, k)
                    if not s.startswith(":", j):
                        raise ValueError(f"missing ':' in Gemma object {s!r}")
                else:
                    j = s.find(":", i)
                    if j < 0:
                        raise ValueError(f"missing ':' in Gemma object {s!r}")
                    key = s[i:j].strip()
                    key = key[len(delim):-len(delim)] if key.startswith(delim) else key
                out_d[key], i = _value(s, j + 1, delim, raw)
            else:
                item, i = _value(s, i, delim, raw)
                out_l.append(item)
            i = _skip_ws(s, i)
            if i < len(s) and s[i] == ",":
                i = _skip_ws(s, i + 1)
        if i >= len(s):
            raise ValueError(f"unterminated Gemma container in {s!r}")
        return (out_d if close == "}" else out_l), i + 1
    j = i
    while j < len(s) and s[j] not in ",}]":
        j += 1
    if raw:
        return s[i:j].strip(), j
    ok, v = parse_literal(s[i:j].strip())
    return (v if ok else s[i:j].strip()), j


class GemmaBody(Body):
    def __init__(self, name: str, delim: str, call_close: str, keep_cut: bool = False,
                 params: dict | None = None) -> None:
        self.delim, self.call_close = delim, call_close
        # Gemma 4 (as vLLM 0.33): an entry cut off by the output's end is kept, and bare values
        # are text typed by the tool's schema (`params`: no property type keeps the text)
        self.keep_cut = keep_cut
        props = (params or {}).get("properties") if keep_cut else None
        self.props = props if isinstance(props, dict) else {}
        self.pending: list[Event] = [CallStart(name)]
        self.started = True
        self.buf = ""
        self.pos = 0
        self.state = "open"  # open, entries, close
        self.depth = 0
        self.in_str = False   # inside a delimited string
        self.in_json = False  # inside a "..." string of a nested value
        self.escape = False
        self.num = 0
        self.str_end = False  # a top-level delimited string just closed

    def feed(self, text: str) -> tuple[list[Event], str | None]:
        events, self.pending = self.pending, []
        self.buf += text
        d = self.delim
        while self.pos < len(self.buf):
            s, i = self.buf, self.pos
            if self.state == "open":
                if s[i] in " \t\r\n":
                    self.pos += 1
                    continue
                if s[i] != "{":
                    return events + [ArgsDelta("{}"), CallEnd()], self._rest(i)
                self.state, self.pos = "entries", i + 1
                self.buf, self.pos = s[i + 1:], 0
                continue
            if self.state == "close":
                rest = self._rest(i)
                if self.call_close and rest.lstrip().startswith(self.call_close):
                    return events, rest.lstrip()[len(self.call_close):]
                if self.call_close and self.call_close.startswith(rest.lstrip()):
                    self.buf, self.pos = rest, 0
                    return events, None
                return events, rest
            if self.in_json:
                self.pos += 1
                if self.escape:
                    self.escape = False
                elif s[i] == "\\":
                    self.escape = True
                elif s[i] == '"':
                    self.in_json = False
                continue
            if self.in_str:
                j = s.find(d, i)
                if j < 0:
                    self.pos = max(i, len(s) - len(d) + 1)
                    return events, None
                self.in_str, self.pos = False, j + len(d)
                self.str_end = self.depth == 0
                continue
            if s.startswith(d, i):
                self.in_str, self.pos = True, i + len(d)
                continue
            if d.startswith(s[i:]) and len(s) - i < len(d):
                return events, None  # a delimiter may be arriving
            ch = s[i]
            if self.str_end and ch not in " \t\r\n":
                self.str_end = False
                if ch not in ",}:" and ":" in s[:i]:
                    # the next key right after a string, its comma left out (FunctionGemma
                    # `city:<escape>NYC<escape>unit:..`, read as vLLM does): the entry ends here
                    events += self._entry(s[:i])
                    self.buf, self.pos = s[i:], 0
                    continue
            self.pos += 1
            if ch == '"' and self.depth > 0:
                self.in_json = True
            elif ch in "{[":
                self.depth += 1
            elif ch in "]" or (ch == "}" and self.depth > 0):
                self.depth -= 1
            elif (ch == "," or ch == "}") and self.depth == 0:
                events += self._entry(s[:i])
                self.buf, self.pos = s[i + 1:], 0
                if ch == "}":
                    events += [ArgsDelta("}" if self.num else "{}"), CallEnd()]
                    self.state = "close"
        return events, None

    def _rest(self, i: int) -> str:
        rest = self.buf[i:]
        self.buf, self.pos = "", 0
        return rest

    def _entry(self, text: str) -> list[Event]:
        key, colon, raw = text.partition(":")
        if not colon or not key.strip():
            return []
        key = key.strip().strip('"')
        try:
            value = gemma_value(raw, self.delim, self.keep_cut)
        except ValueError:
            value = raw.strip()
        if self.keep_cut:
            value = coerce_by_schema(value, self.props.get(key))
        self.num += 1
        return [args_entry(self.num, key, value)]

    def finish(self) -> list[Event]:
        """Output cut off inside the arguments: with `keep_cut`, the entry being written is
        closed and kept (`{city:<|"|>Lon` -> `{"city": "Lon"}`), as vLLM's gemma4 reads it
        (its functiongemma drops it)."""
        events, self.pending = self.pending, []
        if self.keep_cut and self.state == "entries" and self.buf.strip():
            events += self._entry(self.buf + self._closers())
            self.buf, self.pos = "", 0
        return events

    def _closers(self) -> str:
        """What closes the cut-off entry in `buf`: its string, then its open containers."""
        d, s = self.delim, self.buf
        stack: list[str] = []
        i, in_str, in_json = 0, False, False
        while i < len(s):
            if in_str:
                j = s.find(d, i)
                if j < 0:
                    break
                in_str, i = False, j + len(d)
            elif in_json:
                if s[i] == "\\":
                    i += 1
                elif s[i] == '"':
                    in_json = False
                i += 1
            elif s.startswith(d, i):
                in_str, i = True, i + len(d)
            else:
                if s[i] == '"' and stack:
                    in_json = True
                elif s[i] in "{[":
                    stack.append("}" if s[i] == "{" else "]")
                elif s[i] in "}]" and stack:
                    stack.pop()
                i += 1
        return (d if in_str else '"' if in_json else "") + "".join(reversed(stack))
