"""A structural tag (xgrammar's format dict: the tool-call grammars) as an llguidance lark grammar.

The tool formats describe their calls once, as a structural tag (parsers/tools/grammar.py); the
xgrammar backend compiles that dict as is, and `tag_lark` writes the same language in the lark
dialect llguidance reads, so llguidance (which compiles a tool set in milliseconds where
xgrammar's tag compile takes ~0.5 s a tool) serves tool calls too. The elements and their lark:

| element | lark |
|---|---|
| const_string | a string literal; the text of a special token (`<tool_call>` in Qwen's vocabulary) becomes a reference to that token (`<[id]>`): llguidance never lets a special token into text |
| sequence / or / optional | concatenation / `(a \\| b)` / `(a)?` |
| regex | a `/.../` terminal |
| json_schema | `%json {...}` with the JSON whitespace options of the request |
| tag (begin, content, end) | begin content end; an `any_text` content is text up to the first `end` (a lazy lexeme) |
| any_text (excludes) | text that contains none of `excludes` |
| tags_with_separator | one tag, or tags joined by the separator (at least one or none) |
| triggered_tags | free text in which each trigger opens one of its tags (`excludes` kept out of the text) |

`json_schema` elements with an xgrammar-only `style` (MiniMax-M3 XML, Gemma 4) raise
ValueError: the `auto` order then compiles the tag with xgrammar.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Mapping
from typing import Any

_ANY = r"(?s:.*)"


class Unsatisfiable(ValueError):
    """A json_schema element no value satisfies (llguidance refuses the grammar it is in)."""


# a lark string literal's escapes: quote, backslash, and control characters
_LARK_ESCAPES = {**{c: f"\\x{c:02x}" for c in [*range(0x20), 0x7F]},
                 ord('"'): '\\"', ord("\\"): "\\\\", ord("\n"): "\\n", ord("\t"): "\\t",
                 ord("\r"): "\\r"}


def lark_string(text: str) -> str:
    """`text` as a lark string literal."""
    return '"' + text.translate(_LARK_ESCAPES) + '"'


def _regex(pattern: str) -> str:
    """A regex as a lark `/.../` literal (a `/` in it escaped)."""
    return "/" + re.sub(r"(?<!\\)((?:\\\\)*)/", r"\1\\/", pattern) + "/"


def _no_substrings(words: list[str]) -> str:
    """Text with none of `words` in it, as a lark terminal body."""
    return _no_substrings_of(tuple(words))


@functools.lru_cache(maxsize=256)
def _no_substrings_of(given: tuple[str, ...]) -> str:
    """`_no_substrings` once per list of words (a tool format repeats one for each parameter)."""
    words = [w for w in dict.fromkeys(given) if w]
    if not words:
        return f"/{_ANY}/"
    alts = "|".join(re.escape(w) for w in words)
    return _regex(f"{_ANY}") + " & ~" + _regex(f"{_ANY}({alts}){_ANY}")


class _Writer:
    """Writes the rules of one grammar; `special` maps a special token's text to its id."""

    def __init__(self, special: Mapping[str, int], json_text: Callable[[Any], str],
                 unsatisfiable: Callable[[str], bool]) -> None:
        self.special = special
        self.json_text = json_text
        self.unsatisfiable = unsatisfiable  # whether a schema text has no value
        self.rules: list[str] = []
        self._named: dict[tuple[str, str, str], str] = {}
        self._split = (re.compile("(" + "|".join(re.escape(t) for t in sorted(
            special, key=len, reverse=True)) + ")") if special else None)
        self._consts: dict[str, str] = {}  # the formats repeat their markers in every call

    def rule(self, body: str, prefix: str = "r", options: str = "") -> str:
        """A rule (prefix upper case: a terminal) for `body`; the same body twice is one rule,
        so llguidance builds (and caches the masks of) each free-text lexeme once, not once
        per parameter."""
        key = (prefix, options, body)
        if key not in self._named:
            name = f"{prefix}{len(self.rules)}"
            self._named[key] = name
            self.rules.append(f"{name}{options}: {body}")
        return self._named[key]

    def const(self, text: str) -> str:
        written = self._consts.get(text)
        if written is None:
            parts = self._split.split(text) if self._split else [text]
            written = " ".join(f"<[{self.special[p]}]>" if p in self.special else lark_string(p)
                               for p in parts if p) or '""'
            self._consts[text] = written
        return written

    def _special_at(self, text: str) -> int:
        """Where the first special token's text starts in `text` (-1: none)."""
        found = self._split.search(text) if self._split else None
        return found.start() if found else -1

    def text_until(self, end: str, excludes: list[str]) -> str:
        """Text up to the first `end`, `end` included (empty: text to the end of the output).
        Free text ends only lazily in llguidance: a greedy lexeme never yields to the text
        after it, only to a special token (which text never holds)."""
        text = self.rule(_no_substrings(excludes), "T")
        if not end:
            return text
        at = self._special_at(end)
        if at == 0:
            return f"{text} {self.const(end)}"
        if at > 0:
            raise ValueError(f"the guidance backend cannot end free text at {end!r} (text "
                             "before a special token)")
        return self.rule(f"{text} {lark_string(end)}", "u", "[lazy]")

    def node(self, n: Any) -> str:
        if not isinstance(n, dict | Mapping):
            raise ValueError(f"a structural tag element must be an object, got {n!r}")
        kind = n.get("type")
        if kind == "const_string":
            return self.const(str(n.get("value", "")))
        if kind == "sequence":
            return self.sequence(list(n.get("elements") or ()))
        if kind == "or":
            items = self.satisfiable(list(n.get("elements") or ()), self.node)
            return "(" + " | ".join(items) + ")"
        if kind == "optional":
            try:
                return f"({self.node(n.get('content'))})?"
            except Unsatisfiable:  # an optional part that cannot be written is left out
                return '""'
        if kind == "regex":
            return self.rule(_regex(str(n.get("pattern", ""))), "R")
        if kind == "any_text":
            return self.text_until("", list(n.get("excludes") or ()))
        if kind == "json_schema":
            return self.json(n)
        if kind == "tag":
            return self.tag(n)
        if kind == "tags_with_separator":
            tags = self.satisfiable(list(n.get("tags") or ()), self.tag)
            return self.joined(tags, str(n.get("separator", "")), bool(n.get("at_least_one")),
                               bool(n.get("stop_after_first")))
        if kind == "triggered_tags":
            return self.triggered(n)
        raise ValueError(f"the guidance backend does not compile structural tag element {kind!r}")

    def satisfiable(self, elements: list[Any], write: Callable[[Any], str]) -> list[str]:
        """The alternatives that can be written; Unsatisfiable when none can."""
        out, last = [], None
        for e in elements:
            try:
                out.append(write(e))
            except Unsatisfiable as err:
                last = err
        if not out:
            raise last or ValueError("a structural tag alternative needs elements")
        return out

    def sequence(self, elements: list[Any]) -> str:
        """The elements in turn; free text followed by a constant ends at that constant's
        first occurrence (as xgrammar reads it)."""
        items, i = [], 0
        while i < len(elements):
            e = elements[i]
            following = elements[i + 1] if i + 1 < len(elements) else None
            if (isinstance(e, dict | Mapping) and e.get("type") == "any_text"
                    and isinstance(following, dict | Mapping)
                    and following.get("type") == "const_string" and following.get("value")):
                items.append(self.text_until(str(following["value"]),
                                             list(e.get("excludes") or ())))
                i += 2
                continue
            items.append(self.node(e))
            i += 1
        return "(" + " ".join(items) + ")" if items else '""'

    def json(self, n: Mapping[str, Any]) -> str:
        if n.get("style") not in (None, "json"):
            raise ValueError(f"the guidance backend does not compile json_schema style "
                             f"{n.get('style')!r}")
        schema = n.get("json_schema")
        text = self.json_text(schema if isinstance(schema, Mapping | bool) else {})
        if self.unsatisfiable(text):
            raise Unsatisfiable(f"no value satisfies the schema {text[:200]}")
        return self.rule("%json " + text, "j")  # a schema written twice is one rule

    def tag(self, t: Any) -> str:
        if not isinstance(t, dict | Mapping) or t.get("type", "tag") != "tag":
            raise ValueError(f"expected a structural tag 'tag', got {t!r}")
        begin, end, content = str(t.get("begin", "")), str(t.get("end", "")), t.get("content")
        parts = [self.const(begin)] if begin else []
        if isinstance(content, dict | Mapping) and content.get("type") == "any_text":
            parts.append(self.text_until(end, list(content.get("excludes") or ())))
        else:
            parts.append(self.node(content))
            if end:
                parts.append(self.const(end))
        return self.rule(" ".join(parts))

    def joined(self, tags: list[str], sep: str, at_least_one: bool, one: bool) -> str:
        if not tags:
            raise ValueError("a structural tag group needs tags")
        any_tag = self.rule(" | ".join(tags))
        body = any_tag if one else (
            f"{any_tag} ({self.const(sep)} {any_tag})*" if sep else f"{any_tag}+")
        return self.rule(body if at_least_one else f"({body})?")

    def triggered(self, n: Mapping[str, Any]) -> str:
        """Free text; each trigger (text) opens one of the tags whose begin starts with it."""
        triggers = [str(t) for t in n.get("triggers") or () if t]
        excludes = triggers + [str(e) for e in n.get("excludes") or ()]
        opened = []
        for trigger in triggers:
            tags = [t for t in n.get("tags") or () if str(t.get("begin", "")).startswith(trigger)]
            if not tags:
                continue
            cut = len(trigger)
            try:
                rests = self.satisfiable(
                    [{**t, "begin": str(t.get("begin", ""))[cut:]} for t in tags], self.tag)
            except Unsatisfiable:
                continue
            opened.append(f"{self.text_until(trigger, excludes)} ({' | '.join(rests)})")
        for t in n.get("tags") or ():
            if not any(str(t.get("begin", "")).startswith(tr) for tr in triggers):
                raise ValueError(f"structural tag begin {t.get('begin')!r} starts with none of "
                                 f"the triggers {triggers}")
        if not opened:
            raise ValueError("a structural tag 'triggered_tags' needs tags")
        call = self.rule(" | ".join(opened))
        tail = self.text_until("", excludes)
        if n.get("stop_after_first"):
            body = call if n.get("at_least_one") else f"{call} | {tail}"
        else:
            body = f"{call}{'+' if n.get('at_least_one') else '*'} {tail}"
        return self.rule(body)


def tag_lark(tag: Mapping[str, Any], special: Mapping[str, int],
             json_text: Callable[[Any], str] = json.dumps,
             unsatisfiable: Callable[[str], bool] = lambda text: False) -> str:
    """The lark grammar of a structural tag (`{"type": "structural_tag", "format": ...}`).
    special: special token text -> id;
    json_text: a json_schema element's schema -> the text `%json` takes (with llguidance's
    options); unsatisfiable: whether a schema text has no value (the parts that need one are
    left out; Unsatisfiable when nothing is left)."""
    if tag.get("type") != "structural_tag" or "format" not in tag:
        raise ValueError("the guidance backend compiles structural tags of the form "
                         "{'type': 'structural_tag', 'format': ...}")
    w = _Writer(special, json_text, unsatisfiable)
    start = w.node(tag["format"])
    return "\n".join([f"start: {start}", *w.rules]) + "\n"


def plain_json_only(node: Any) -> bool:
    """Whether a tag has no free text and no regex (only constants around JSON values): the
    only tags whose accepted text the JSON digit counter can follow."""
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, Mapping):
            kind = item.get("type")
            if kind in ("any_text", "regex", "triggered_tags"):
                return False
            if kind != "json_schema":
                stack.extend(v for k, v in item.items() if k != "type")
    return True
