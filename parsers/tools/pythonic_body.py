"""Pythonic call lists: ``[get_weather(city="Paris"), ping()]`` or newline-separated calls.

Call and argument boundaries are found by a small bracket/string tracker (one- and three-quote
strings, escapes, one character at a time); each complete keyword argument is then parsed with
Python's ``ast`` (a literal, never evaluated) and streamed as one JSON member, so the arguments
stream argument by argument. An argument Python rejects even after the repairs of
``pythonic_repair`` (a string with unescaped inner quotes, say) is read on to the region's end
marker, where the whole rest is tried again; only regions with an end marker do this.
"""

from __future__ import annotations

import ast
import json
from typing import Any

from .events import ArgsDelta, Body, CallEnd, CallStart, Event
from .pythonic_repair import parse_keyword
from .scan import split_on_markers

_JSON_NAMES = {"true": True, "false": False, "null": None}
_IDENT = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-")


def literal_to_json(node: ast.AST) -> Any:
    """A Python literal node (plus JSON's true/false/null) as a JSON-compatible value."""
    if isinstance(node, ast.Name) and node.id in _JSON_NAMES:
        return _JSON_NAMES[node.id]
    if isinstance(node, ast.Dict):
        return {str(literal_to_json(k)): literal_to_json(v)
                for k, v in zip(node.keys, node.values) if k is not None}
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return [literal_to_json(e) for e in node.elts]
    value = ast.literal_eval(node)
    json.dumps(value, allow_nan=False)  # raises for bytes, complex, ..., and 1e999 (inf)
    return value


class PythonicBody(Body):
    def __init__(self, stops: tuple[str, ...] = ()) -> None:
        self.stops = stops
        self.state = "open"  # open, sep, name, args
        self.bracketed = False
        self.buf = ""
        self.name = ""
        self.arg: list[str] = []
        self.stack: list[str] = []
        self.quote = ""    # the open string's delimiter: one or three quote characters
        self.opening = ""  # quote characters read at a string's start (1 or 2), undecided
        self.run = 0       # closing quote characters read in a row
        self.escape = False
        self.num_args = 0
        self.broken = False  # an argument that did not parse: read on to a stop marker

    def feed(self, text: str) -> tuple[list[Event], str | None]:
        events: list[Event] = []
        self.buf += text
        i = 0
        while i < len(self.buf):
            if self.broken:
                return self._broken(events, i)
            ch = self.buf[i]
            st = self.state
            if st in ("open", "sep"):
                if ch in " \t\r\n" or (st == "sep" and ch == ","):
                    i += 1
                    continue
                if st == "open" and ch == "[" and not self.bracketed:
                    self.bracketed = True
                    i += 1
                    continue
                if st == "sep" and ch == "]" and self.bracketed:
                    return events, self._take(i + 1)
                if st == "sep" and not self.bracketed and self.stops:
                    before, marker, held = split_on_markers(self.buf[i:], self.stops)
                    if marker is not None and not before:
                        return events, self._take(i)
                    if held and not before:
                        self.buf = self.buf[i:]
                        return events, None
                if ch.isalpha() or ch == "_":
                    self.state, self.name = "name", ""
                    continue
                return self._stop(events, i)
            if st == "name":
                if ch in _IDENT:
                    self.name += ch
                    i += 1
                    continue
                if ch != "(":
                    return self._stop(events, i)
                self.started = True
                events.append(CallStart(self.name))
                self.state, self.arg, self.num_args, self.stack = "args", [], 0, []
                self.quote, self.opening, self.run, self.escape = "", "", 0, False
                i += 1
                continue
            i += 1
            events += self._arg_char(ch)
        self.buf = ""
        return events, None

    def _take(self, i: int) -> str:
        rest, self.buf = self.buf[i:], ""
        return rest

    def _stop(self, events: list[Event], i: int) -> tuple[list[Event], str | None]:
        if not self.started:
            self.failed = True
        return events, self._take(i)

    def _string_char(self, ch: str) -> bool:
        """Advance the string tracker by ``ch``; True when ``ch`` is part of a string literal.

        One character at a time, so a delimiter split across deltas is still read: two quotes
        are undecided until the third character (an empty string, or a triple-quoted one)."""
        if self.opening:
            q = self.opening[0]
            if ch == q:
                if len(self.opening) == 1:
                    self.opening = q + q
                else:
                    self.opening, self.quote = "", q * 3
                return True
            if len(self.opening) == 2:  # an empty string; ch follows it
                self.opening = ""
                return False
            self.opening, self.quote = "", q  # ch is the string's first character
        if self.quote:
            if self.escape:
                self.escape = False
            elif ch == "\\":
                self.escape, self.run = True, 0
            elif ch == self.quote[0]:
                self.run += 1
                if self.run == len(self.quote):
                    self.quote, self.run = "", 0
            else:
                self.run = 0
            return True
        if ch in "\"'":
            self.opening = ch
            return True
        return False

    def _arg_char(self, ch: str) -> list[Event]:
        if self._string_char(ch):
            self.arg.append(ch)
            return []
        if ch in "([{":
            self.stack.append(ch)
        elif ch in ")]}" and self.stack:
            self.stack.pop()
        elif ch in ",)" and not self.stack:
            if self.stops and parse_keyword("".join(self.arg).strip()) is None \
                    and "".join(self.arg).strip():
                self.broken = True
                self.arg.append(ch)
                return []
            events = self._end_arg()
            if ch == ")":
                events += [ArgsDelta("}" if self.num_args else "{}"), CallEnd()]
                self.state = "sep"
            return events
        self.arg.append(ch)
        return []

    def _broken(self, events: list[Event], i: int) -> tuple[list[Event], str | None]:
        """Read a broken argument on to a stop marker, then try the rest of the call again."""
        before, marker, held = split_on_markers(self.buf[i:], self.stops)
        self.arg.append(before)
        if marker is None:
            self.buf = held
            return events, None
        rest = self.buf[i + len(before):]
        self.buf = ""
        return events + self._resolve_broken(), rest

    def _resolve_broken(self) -> list[Event]:
        text = "".join(self.arg).rstrip()
        self.arg, self.broken, self.state = [], False, "sep"
        if text.endswith("]"):
            text = text[:-1].rstrip()
        if text.endswith(")"):
            text = text[:-1]
        self.arg = [text]
        return self._end_arg() + [ArgsDelta("}" if self.num_args else "{}"), CallEnd()]

    def _end_arg(self) -> list[Event]:
        text, self.arg = "".join(self.arg).strip(), []
        if not text:
            return []
        kw = parse_keyword(text)
        try:
            if kw is None:
                raise ValueError(text)
            key, value = kw[0], literal_to_json(kw[1])
        except (ValueError, TypeError, RecursionError):
            key, value = text.partition("=")[0].strip(), text.partition("=")[2].strip()
        self.num_args += 1
        prefix = "{" if self.num_args == 1 else ", "
        return [ArgsDelta(prefix + json.dumps(key) + ": " + json.dumps(value, ensure_ascii=False))]

    def finish(self) -> list[Event]:
        if not self.started:
            self.failed = True
        if self.broken:
            self.arg.append(self.buf)
            self.buf = ""
            return self._resolve_broken()
        return []
