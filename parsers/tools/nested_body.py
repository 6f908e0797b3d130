"""Nested XML arguments (MiniMax-M3): every element carries a namespace prefix,
``NS<city>Paris NS</city>``, objects nest elements, arrays repeat ``NS<item>``.

Each top-level parameter is converted when its element closes (by the tool's schema) and
streamed as one JSON member; the call ends at its closing tag (``NS</invoke>``).
"""

from __future__ import annotations

from typing import Any

from .convert import (
    container_schema,
    convert_value,
    items_schema,
    member_schema,
    property_schema,
    schema_types,
    whole_numbers,
)
from .events import ArgsDelta, Body, CallEnd, CallStart, Event, args_entry
from .scan import split_on_markers


def parse_elements(text: str, ns: str, mixed: list[str] | None = None
                   ) -> list[tuple[str, str]] | None:
    """Top-level ``ns<tag>inner ns</tag>`` elements of ``text``; None if it has none. The text
    between them is appended to ``mixed`` when given."""
    out: list[tuple[str, str]] = []
    i, open_tag = 0, ns + "<"
    while True:
        j = text.find(open_tag, i)
        if mixed is not None:
            mixed.append(text[i:] if j < 0 else text[i:j])
        if j < 0:
            break
        k = text.find(">", j + len(open_tag))
        if k < 0 or text.startswith("/", j + len(open_tag)):
            return None
        tag = text[j + len(open_tag):k]
        depth, pos = 1, k + 1
        while depth:
            nxt_open = text.find(open_tag + tag + ">", pos)
            nxt_close = text.find(ns + "</" + tag + ">", pos)
            if nxt_close < 0:
                return None
            if 0 <= nxt_open < nxt_close:
                depth, pos = depth + 1, nxt_open + 1
            else:
                depth, pos = depth - 1, nxt_close + 1
        end = pos - 1
        out.append((tag, text[k + 1:end]))
        i = end + len(ns + "</" + tag + ">")
    return out or None


def nested_value(inner: str, schema: dict | None, ns: str, root: dict | None = None) -> Any:
    """An element's text as JSON by its schema (``root``: the parameters, for ``$ref``s).
    Members of an object and items of an array take their own schemas, through ``anyOf``,
    ``additionalProperties`` and references; an empty element is an empty array or object
    when its schema wants one; text with no schema stays a string (as vLLM's)."""
    mixed: list[str] = []
    elements = parse_elements(inner, ns, mixed)
    types = schema_types(schema)
    if elements is None:
        if not inner.strip() and "string" not in types:
            # the template writes [] and {} as an empty element
            if container_schema(schema, "array", root) is not None:
                return []
            if container_schema(schema, "object", root) is not None:
                return {}
        value = convert_value(inner if types in ([], ["string"]) else inner.strip(), schema)
        return whole_numbers(value, schema)
    if all(tag == "item" for tag, _ in elements) and "object" not in types:
        items = items_schema(schema, root)
        return [nested_value(v, items, ns, root) for _, v in elements]
    out: dict[str, Any] = {}
    repeated: set[str] = set()
    for tag, v in elements:  # a repeated member collects its values in a list (as vLLM's)
        value = nested_value(v, member_schema(schema, tag, root), ns, root)
        if tag in repeated:
            out[tag].append(value)
        elif tag in out:
            out[tag] = [out[tag], value]
            repeated.add(tag)
        else:
            out[tag] = value
    text = "".join(mixed)
    if text.strip():  # text beside child elements: a reserved member (vLLM's `$text`)
        key = "$text"
        while key in out:
            key = "$" + key
        out[key] = text
    return out


class NestedXmlBody(Body):
    def __init__(self, name: str, call_id: str | None, ns: str, params_schema: dict | None,
                 call_close: str, stops: tuple[str, ...]) -> None:
        self.pending: list[Event] = [CallStart(name, call_id)]
        self.started = True
        self.ns, self.schema, self.call_close, self.stops = ns, params_schema, call_close, stops
        self.buf = ""
        self.param: list[str] = []  # the open top-level element's text
        self.stack: list[str] = []
        self.num = 0

    def feed(self, text: str) -> tuple[list[Event], str | None]:
        events, self.pending = self.pending, []
        self.buf += text
        ns = self.ns
        while True:
            ends = () if self.stack else (self.call_close, *self.stops)
            before, marker, rest = split_on_markers(self.buf, (ns + "<", *ends))
            if self.stack:
                self.param.append(before)
            if marker is None:
                self.buf = rest
                return events, None
            if marker != ns + "<":
                self.buf = ""
                tail = rest if marker == self.call_close else marker + rest
                return events + [ArgsDelta("}" if self.num else "{}"), CallEnd()], tail
            k = rest.find(">")
            if k < 0:
                self.buf = marker + rest
                return events, None
            tag, self.buf = rest[:k], rest[k + 1:]
            if self.stack:
                self.param.append(marker + tag + ">")
            if tag.startswith("/"):
                if self.stack and self.stack[-1] == tag[1:]:
                    self.stack.pop()
                if not self.stack:
                    events += self._emit(tag[1:])
            else:
                if not self.stack:
                    self.param = []
                self.stack.append(tag)

    def _emit(self, key: str) -> list[Event]:
        inner = "".join(self.param)
        inner = inner[: len(inner) - len(self.ns + "</" + key + ">")]
        value = nested_value(inner, property_schema(self.schema, key), self.ns, self.schema)
        self.num += 1
        return [args_entry(self.num, key, value)]

    def finish(self) -> list[Event]:
        events, self.pending = self.pending, []
        return events
