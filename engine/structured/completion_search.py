"""The search for a short completion of a grammar's state (json_completion.py plans with it).

`shortest_completion(matcher, in_string)` searches a fork of a matcher one character at a time
for a short text that completes the grammar: it takes the grammar's forced characters
(jump-forward) when there are any, else the first accepted character of a preference order
that closes values early (inside a JSON string: the closing quote first, then the separators
of string formats; outside: `}` `]` `,` `0` `"`; then any printable ASCII), a kind of
character (digits, letters) just written three times in a row going last. It is greedy, so
short rather than provably shortest, and it costs a few microseconds per character (no bitmask
fills).

Tool formats whose values are free text closed by a tag (qwen3_coder's `<parameter=...>` value
ends at `\n</parameter>`): such text takes every character the order above prefers, so the
search is given `closers`, the texts that end a free-text element or a run of calls in the
request's structural tag (`tag_closers`), and tries them whole, before the forced text and
the characters, wherever it is outside a JSON string: an empty value, then the tag's end,
then the section's.

Grammars whose objects let a member repeat (the larger objects of json_any_order.py, which
rely on the repeated-key checks, json_keys.py, to take a repeat out) would let the greedy
choice write the same key again and again. The search follows the keys it writes in each
object; when it writes one a second time, the choice that led to that key is banned in that
object and the search starts over (at most `_RESTARTS` times).
"""

from __future__ import annotations

import functools
import json
from typing import Any

from thinkgate.engine.structured.backend import Matcher

_IN_STRING = '"' + "@.:-TZ+/a0"
_OUTSIDE = '}],:0"'
_ANY = "".join(chr(c) for c in range(32, 127))
_PATIENT_IN_STRING = '"0a' + "".join(c for c in _ANY if c not in '"0a')
_CALM = frozenset("0123456789 \t\r\n}]:.eE+-truefalsn")  # outside strings: opens nothing


def _kind(ch: str) -> str:
    return "digit" if ch.isdigit() else "letter" if ch.isalpha() else ch


@functools.lru_cache(maxsize=64)
def _order(in_string: bool, escaped: bool, tired: str) -> str:
    """Characters to try, best first; `tired`: a kind written three times, tried last."""
    if escaped:
        order = _ANY
    else:
        first = _IN_STRING if in_string else _OUTSIDE
        order = first + "".join(c for c in _ANY if c not in first)
    if tired:
        order = "".join(c for c in order if _kind(c) != tired) + "".join(
            c for c in order if _kind(c) == tired)
    return order


def scan_text(text: str, in_string: bool, escaped: bool) -> tuple[bool, bool, bool]:
    """(in_string, escaped, opened) after `text`, from JSON's lexical rules (quotes and
    backslashes). `opened`: the text may have started something a completion must then write
    (an object, array, member, element, string or tag: a character outside a string other
    than digits, spaces, closing brackets, `:` and the letters of numbers and literals; or an
    escape inside a string): the shortest completion may have grown by more than a token."""
    opened = False
    for ch in text:
        if escaped:
            escaped = False
        elif in_string:
            if ch == "\\":
                escaped = opened = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = opened = True
        elif ch not in _CALM:
            opened = True
    return in_string, escaped, opened


def shortest_completion(matcher: Matcher, in_string: bool = False,
                        escaped: bool = False, max_chars: int = 512,
                        closers: tuple[str, ...] = ()) -> str | None:
    """A short text after which `matcher`'s grammar is complete (None past `max_chars`).
    When the greedy search runs past `max_chars` (a string whose pattern is searched, not
    matched whole, takes any character, and the preferred ones never finish it), it is
    tried once more with word characters first and no change of kind. `closers`: texts
    tried whole outside JSON strings before any character (see the module docstring)."""
    found = _greedy(matcher, in_string, escaped, max_chars, False, closers)
    return found if found is not None else _greedy(matcher, in_string, escaped, max_chars,
                                                   True, closers)


def tag_closers(tag: Any) -> tuple[str, ...]:
    """The texts that end free text in a structural tag (xgrammar's format dict): the constant
    after each `any_text` or `tags_with_separator` element of a sequence (a value's closing
    tag, a call section's end), and each tag's `end`; shortest first. The tag may be given as
    its JSON text."""
    if isinstance(tag, str):
        try:
            tag = json.loads(tag)
        except ValueError:
            return ()
    found: set[str] = set()

    def walk(node: Any) -> None:
        if isinstance(node, list):
            for item in node:
                walk(item)
            return
        if not isinstance(node, dict):
            return
        if node.get("type") == "tag" and isinstance(node.get("end"), str) and node["end"]:
            found.add(node["end"])
        if node.get("type") == "sequence":
            elements = node.get("elements") or []
            for before, after in zip(elements, elements[1:]):
                if (isinstance(before, dict)
                        and before.get("type") in ("any_text", "tags_with_separator")
                        and isinstance(after, dict) and after.get("type") == "const_string"
                        and after.get("value")):
                    found.add(after["value"])
        for value in node.values():
            walk(value)

    walk(tag)
    return tuple(sorted(found, key=lambda text: (len(text), text)))


_RESTARTS = 32


def _greedy(matcher: Matcher, in_string: bool, escaped: bool, max_chars: int,
            patient: bool, closers: tuple[str, ...]) -> str | None:
    banned: set[tuple[int, str, str]] = set()
    for _ in range(_RESTARTS):
        found = _greedy_once(matcher, in_string, escaped, max_chars, patient, banned, closers)
        if found is not _AGAIN:
            return found  # type: ignore[return-value]
    return None


_AGAIN = object()  # a key was written twice: one more choice banned, search again


def _greedy_once(matcher: Matcher, in_string: bool, escaped: bool, max_chars: int,
                 patient: bool, banned: set[tuple[int, str, str]],
                 closers: tuple[str, ...]) -> str | None | object:
    m = matcher.fork()
    keys = _Keys(in_string, escaped)
    out: list[str] = []
    length, last, repeats = 0, "", 0
    while not m.is_completed():
        if length >= max_chars:
            return None
        # a closer before the forced text: that text may be the start of one ("<｜tool_call"
        # before "<｜tool_calls_end｜>") and, taken alone, leave only the way on
        closed = next((c for c in closers if m.accept_string(c)), "") if not in_string else ""
        piece = closed or m.find_jump_forward_string()
        if not closed and (not piece or not m.accept_string(piece)):
            if patient:
                order = _PATIENT_IN_STRING if in_string and not escaped else _order(
                    in_string, escaped, "")
            else:
                # after three of a kind (digits, letters) that kind goes last: it may loop (the
                # digits of a fraction, a free-form part) where another character ends the
                # value
                order = _order(in_string, escaped, last if repeats >= 3 else "")
            where = (keys.context, keys.text) if in_string else None
            piece = next((c for c in order if (where is None or (*where, c) not in banned)
                          and m.accept_string(c)), "")
            if not piece:
                if where is not None and keys.history:  # every way on from here is banned:
                    banned.add(keys.history[-1])  # ban the choice that led here
                    return _AGAIN
                return None
            if where is not None:
                keys.choice = (*where, piece)
                keys.history.append(keys.choice)
        if keys.feed(piece):  # a key written twice in one object
            if keys.repeated_choice is None:
                return None  # the grammar forced it: nothing to choose otherwise
            banned.add(keys.repeated_choice)
            return _AGAIN
        kind = _kind(piece[-1])
        repeats = repeats + 1 if kind == last and len(piece) == 1 else 1
        last = kind
        out.append(piece)
        length += len(piece)
        in_string, escaped, _ = scan_text(piece, in_string, escaped)
    return "".join(out)


class _Keys:
    """The keys the search writes per object (by JSON's lexical rules: a string followed by
    `:` is a key of the innermost object open). `context`: the offset where that object
    opened (-1: one opened before the search began); `text`: the string being written;
    `choice`: the last character the search chose in it (context, text before, character)."""

    def __init__(self, in_string: bool, escaped: bool) -> None:
        self.stack: list[tuple[int, set[str]]] = [(-1, set())]
        self.in_string, self.escaped = in_string, escaped
        self.text = ""
        self.offset = 0
        self.key: str | None = None  # a string just closed, outside: a key if `:` follows
        self.choice: tuple[int, str, str] | None = None
        self.key_choice: tuple[int, str, str] | None = None
        self.repeated_choice: tuple[int, str, str] | None = None
        self.history: list[tuple[int, str, str]] = []  # the choices in the string written

    @property
    def context(self) -> int:
        return self.stack[-1][0]

    def feed(self, piece: str) -> bool:
        """Follow `piece`; True when it writes a key its object has already."""
        for ch in piece:
            self.offset += 1
            if self.in_string:
                if self.escaped:
                    self.escaped = False
                elif ch == "\\":
                    self.escaped = True
                elif ch == '"':
                    self.in_string, self.key, self.key_choice = False, self.text, self.choice
                    continue
                self.text += ch
            elif ch == '"':
                self.in_string, self.text, self.choice, self.key = True, "", None, None
                self.history = []
            elif ch in "{[":
                self.stack.append((self.offset, set()))
                self.key = None
            elif ch in "}]":
                if len(self.stack) > 1:
                    self.stack.pop()
                else:  # out of the object the search began in: a new unknown one
                    self.stack[0] = (-1 - self.offset, set())
                self.key = None
            elif ch == ":" and self.key is not None:
                seen = self.stack[-1][1]
                if self.key in seen:
                    self.repeated_choice = self.key_choice
                    return True
                seen.add(self.key)
                self.key = None
            elif not ch.isspace():
                self.key = None
        return False
