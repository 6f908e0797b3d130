"""`ArgsCoercer`: a call's JSON arguments retyped by the tool's schema while they stream, as
vLLM's engine parsers with JSON arguments (granite, kimi_k2, mistral, inkling, plamo3) retype
them (`{"count": "5"}` for an integer `count` -> `{"count": 5}`; `{"id": 42}` for a string `id`
-> `{"id": "42"}`).

The arguments object is read member by member. A member the schema does not describe, and a
string value of a string-only property, pass through as they arrive; any other value is held
until it ends and is then written retyped (`convert.retype`). Text that is not an object, and
anything after it, passes through unchanged. The result is the same however the text is split.
"""

from __future__ import annotations

import json
from typing import Any

from .convert import convert_value, property_schema, schema_types, whole_numbers
from .scan import ValueScanner

_WS = " \t\r\n"


def retype(value: Any, schema: dict | None) -> Any:
    """`value` retyped by `schema` (strings converted to the schema's type, other scalars
    written as text first; objects and lists by their properties / items; a whole float of
    a `number` property as an integer)."""
    if not isinstance(schema, dict):
        return value
    if isinstance(value, str):
        return whole_numbers(convert_value(value, schema), schema) if schema_types(schema) \
            else value
    if isinstance(value, dict):
        props = schema.get("properties")
        if isinstance(props, dict):
            return {k: retype(v, props.get(k)) for k, v in value.items()}
        return value
    if isinstance(value, list):
        items = schema.get("items")
        return [retype(v, items) for v in value] if isinstance(items, dict) else value
    if not schema_types(schema):
        return value
    out = convert_value(json.dumps(value, ensure_ascii=False), schema)
    return whole_numbers(value if type(out) is type(value) and out == value else out, schema)


class ArgsCoercer:
    """Feed raw argument text, get the retyped text to send (possibly "" while a value is
    held); `finish` returns what is still held."""

    def __init__(self, params: dict | None) -> None:
        self.params = params
        self.state = "start"  # start, key_or_end, key, colon, value, stream, hold, after, raw
        self.key: list[str] = []
        self.prop: dict | None = None
        self.scanner = ValueScanner()
        self.held: list[str] = []

    def feed(self, text: str) -> str:
        out: list[str] = []
        i, n = 0, len(text)
        while i < n:
            st = self.state
            if st == "raw":
                out.append(text[i:])
                break
            if st in ("stream", "hold", "key"):
                used = self.scanner.feed(text[i:])
                part, i = text[i:i + used], i + used
                (self.held if st in ("hold", "key") else out).append(part)
                if self.scanner.bad:
                    out += self.held
                    self.held, self.state = [], "raw"
                elif self.scanner.done:
                    self._value_done(out)
                elif st == "hold" and used == 0:
                    break
                continue
            ch = text[i]
            if ch in _WS:
                out.append(ch)
                i += 1
                continue
            expect = {"start": "{", "colon": ":"}.get(st)
            if expect is not None:
                self.state = ("key_or_end" if st == "start" else "value") if ch == expect else "raw"
                if ch == expect:
                    out.append(ch)
                    i += 1
            elif st in ("key_or_end", "after"):
                if ch == "}":
                    out.append(ch)
                    self.state, i = "raw", i + 1
                elif ch == "," and st == "after":
                    out.append(ch)
                    self.state, i = "key_or_end", i + 1
                elif ch == '"' and st == "key_or_end":
                    self.state, self.scanner, self.held = "key", ValueScanner(), []
                else:
                    self.state = "raw"
            else:  # value
                self.scanner = ValueScanner()
                types = schema_types(self.prop)
                passes = not isinstance(self.prop, dict) or (types == ["string"] and ch == '"')
                self.state = "stream" if passes else "hold"
                self.held = []
        return "".join(out)

    def _value_done(self, out: list[str]) -> None:
        text, self.held = "".join(self.held), []
        if self.state == "key":
            out.append(text)
            key = json.loads(text)
            self.prop = property_schema(self.params, key)
            self.state = "colon"
            return
        if self.state == "hold":
            out.append(json.dumps(retype(json.loads(text), self.prop), ensure_ascii=False)
                       if self.prop is not None else text)
        self.state = "after"

    def finish(self) -> str:
        if self.state == "hold":
            self.scanner.close_scalar()
            if self.scanner.done and not self.scanner.bad:
                out: list[str] = []
                self._value_done(out)
                return "".join(out)
        held, self.held = "".join(self.held), []
        return held
