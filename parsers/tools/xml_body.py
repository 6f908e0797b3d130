"""XML-ish parameter bodies: ``<parameter=K>V</parameter>``, ``<parameter name="K">``, DSML,
``<arg_key>K</arg_key><arg_value>V</arg_value>``, XTML ``argument`` elements.

Values are raw text; they become JSON by the tool's schema (``convert.py``). A value whose
schema is a string (or unknown) streams as it is written, JSON-escaped; any other value is
converted when its closing tag arrives.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass

from .convert import (
    convert_value,
    is_string_schema,
    parse_literal,
    property_schema,
    schema_types,
    whole_numbers,
)
from .events import ArgsDelta, Body, CallEnd, CallStart, Event
from .scan import split_on_markers

_JSON_TYPES = ("number", "integer", "boolean", "object", "array", "null")


@dataclass(frozen=True)
class ParamSyntax:
    open: str                  # starts a parameter, the key follows: "<parameter="
    key_close: str             # ends the key (and its attributes): ">"
    close: str                 # ends the value: "</parameter>"
    value_open: str = ""       # a tag between key and value: "<arg_value"
    value_open_close: str = ""  # closes value_open when it may carry attributes: ">"
    trim_newline: bool = True  # one leading and one trailing "\n" are framing, not value
    stream_strings: bool = True
    cdata: bool = False        # values may be wrapped in <![CDATA[...]]>
    close_tail: str = ""       # the close is a prefix ending here: "]<]minimax[>[</" ... ">"
    unwrap: tuple[str, ...] = ()  # a first parameter of one of these names, not in the schema,
                               # whose value is an object (or a string holding one) of the
                               # schema's keys, is the arguments themselves (DSML)
    open_alts: tuple[str, ...] = ()  # other spellings of open (MiniCPM's "<param\u0120name=")
    open_closes: bool = False  # the next parameter's opener inside a value ends the value (DSML)
    close_call_closes: bool = False  # so does the call's end marker (MiniMax-M2 `celsius</invoke>`)
    typed_attr: bool = False   # a `type="number"` (any JSON type) attribute decodes the value
                               # by that type, and XML entities in attributes are unescaped
                               # (Kimi K3's XTML)
    decode: str = "schema"     # "schema": by the property's schema, no schema = string;
                               # "json_unless_string": a string schema keeps the raw text,
                               # other schemas convert it, no schema JSON-decodes it when it
                               # parses (Muse, Poolside)
    raw_key: bool = False      # the key is all the text before key_close, spaces included
                               # (`<parameter={{ k }}>`: Qwen3's engine reads no attributes)
    whole_numbers: bool = False  # a whole float of a `number` property is written as an
                                 # integer (`5.0` -> `5`: vLLM's engine parsers)


def parse_attrs(text: str, unescape: bool = False) -> tuple[str, dict[str, str]]:
    """``"K" string="true"`` or ``K`` -> ("K", {"string": "true"}); `unescape`: XML entities
    in the values (`a&amp;b` -> `a&b`), as Kimi K3's XTML writes them."""
    text = text.strip()
    key, attrs, i, n = "", {}, 0, len(text)
    tokens: list[str] = []
    while i < n:
        while i < n and text[i] in " \t\r\n":
            i += 1
        j = i
        quote = ""
        while j < n and (quote or text[j] not in " \t\r\n"):
            if text[j] in "\"'" and (not quote or quote == text[j]):
                quote = "" if quote else text[j]
            j += 1
        if j > i:
            tokens.append(text[i:j])
        i = j
    for k, tok in enumerate(tokens):
        if "=" in tok and tok[:1] not in "\"'":
            name, _, value = tok.partition("=")
            attrs[name] = value.strip("\"'")
        elif k == 0:
            key = tok.strip("\"'")
    if not key:
        key = attrs.pop("name", attrs.pop("key", ""))
    if unescape:
        key, attrs = html.unescape(key), {k: html.unescape(v) for k, v in attrs.items()}
    return key, attrs


class XmlParamsBody(Body):
    """Parameters of one call whose name a header already gave."""

    def __init__(self, name: str, call_id: str | None, syntax: ParamSyntax,
                 params_schema: dict | None, call_close: str, stops: tuple[str, ...]) -> None:
        self.pending: list[Event] = [CallStart(name, call_id)]
        self.syn = syntax
        self.schema = params_schema
        self.call_close = call_close
        self.stops = stops
        self.started = True
        self.state = "between"  # between, key, pre_value, value
        self.buf = ""
        self.key_text = ""
        self.key = ""
        self.attrs: dict[str, str] = {}
        self.streaming = False
        self.value: list[str] = []
        self.value_started = False
        self.held_newline = False
        self.num_params = 0

    def feed(self, text: str) -> tuple[list[Event], str | None]:
        events, self.pending = self.pending, []
        self.buf += text
        while True:
            if self.state == "between":
                ends = ((self.call_close,) if self.call_close else ()) + self.stops
                opens = (self.syn.open, *self.syn.open_alts)
                before, marker, self.buf = split_on_markers(self.buf, opens + ends)
                if marker is None:
                    return events, None
                if marker in opens:
                    self.state, self.key_text = "key", ""
                    continue
                rest = self.buf if marker == self.call_close else marker + self.buf
                self.buf = ""
                return events + self._close(), rest
            if self.state == "key":
                before, marker, self.buf = split_on_markers(self.buf, (self.syn.key_close,))
                self.key_text += before
                if marker is None:
                    return events, None
                self.key, self.attrs = ((self.key_text.strip(), {}) if self.syn.raw_key
                                        else parse_attrs(self.key_text, self.syn.typed_attr))
                self.state = "pre_value" if self.syn.value_open else "value"
                if self.state == "value":
                    events += self._begin_value()
                continue
            if self.state == "close_tail":
                before, marker, self.buf = split_on_markers(self.buf, (self.syn.close_tail,))
                if marker is None:
                    return events, None
                self.state = "between"
                continue
            if self.state in ("pre_value", "value_attrs"):
                tag = self.syn.value_open if self.state == "pre_value" else self.syn.value_open_close
                before, marker, self.buf = split_on_markers(self.buf, (tag,))
                if marker is None:
                    return events, None
                if self.state == "pre_value" and self.syn.value_open_close:
                    self.state = "value_attrs"
                    continue
                self.state = "value"
                events += self._begin_value()
                continue
            closers = (self.syn.close, self.syn.open) if self.syn.open_closes else (self.syn.close,)
            if self.syn.close_call_closes and self.call_close:
                closers += (self.call_close,)
            before, marker, self.buf = split_on_markers(self.buf, closers)
            events += self._value_text(before)
            if marker is None:
                return events, None
            events += self._end_value()
            if marker == self.call_close and marker != self.syn.close:  # read again: the call ends
                self.buf, self.state = marker + self.buf, "between"
                continue
            if marker != self.syn.close:  # the next parameter's opener closes this one
                self.state, self.key_text = "key", ""
                continue
            self.state = "close_tail" if self.syn.close_tail else "between"

    def _begin_value(self) -> list[Event]:
        attr_type = self.attrs.get("string", self.attrs.get("type", ""))
        prop = property_schema(self.schema, self.key)
        if attr_type in ("false", "json") or (self.syn.typed_attr and attr_type in _JSON_TYPES):
            self.streaming = False
        elif attr_type in ("true", "string"):
            # a schema without a string type converts the text at its end (vLLM's fix-up)
            types = schema_types(prop)
            self.streaming = (self.syn.stream_strings and not self.syn.cdata
                              and (not types or "string" in types) and not self._unwrap_key())
        elif self.syn.decode != "schema":
            self.streaming = self.syn.stream_strings and schema_types(prop) == ["string"]
        else:
            self.streaming = (self.syn.stream_strings and not self.syn.cdata
                              and is_string_schema(prop))
        self.value, self.value_started, self.held_newline = [], False, False
        if not self.streaming:
            return []
        return [ArgsDelta(self._key_prefix() + '"')]

    def _key_prefix(self) -> str:
        self.num_params += 1
        return ("{" if self.num_params == 1 else ", ") + json.dumps(self.key, ensure_ascii=False) + ": "

    def _value_text(self, chunk: str) -> list[Event]:
        if not chunk:
            return []
        if not self.streaming:
            self.value.append(chunk)
            return []
        if not self.value_started:
            self.value_started = True
            if self.syn.trim_newline and chunk.startswith("\n"):
                chunk = chunk[1:]
        out = "\n" if self.held_newline else ""
        self.held_newline = False
        if self.syn.trim_newline and chunk.endswith("\n"):
            chunk, self.held_newline = chunk[:-1], True
        out += chunk
        return [ArgsDelta(json.dumps(out, ensure_ascii=False)[1:-1])] if out else []

    def _end_value(self) -> list[Event]:
        if self.streaming:
            self.streaming = False
            return [ArgsDelta('"')]
        raw = "".join(self.value)
        if self.syn.trim_newline:
            raw = raw[1:] if raw.startswith("\n") else raw
            raw = raw[:-1] if raw.endswith("\n") else raw
        if self.syn.cdata and raw.strip().startswith("<![CDATA[") and raw.strip().endswith("]]>"):
            raw = raw.strip()[9:-3]
        attr_type = self.attrs.get("string", self.attrs.get("type", ""))
        if attr_type in ("false", "json"):
            ok, value = parse_literal(raw)
            # a string-only schema keeps the text: `null` for a string is "null", as vLLM's
            # schema-aware fix-up returns it
            string_only = schema_types(property_schema(self.schema, self.key)) == ["string"]
            value = value if ok and not (string_only and not isinstance(value, str)) else raw
        elif attr_type in ("true", "string"):
            prop = property_schema(self.schema, self.key)
            types = schema_types(prop)
            value = raw if not types or "string" in types else convert_value(raw, prop)
            if self._unwrap_key():
                ok, decoded = parse_literal(raw)
                value = decoded if ok and isinstance(decoded, dict) else raw
        elif self.syn.typed_attr and attr_type in _JSON_TYPES:
            value = convert_value(raw, {"type": attr_type})
        elif self.syn.decode != "schema":
            value = self._decode(raw, property_schema(self.schema, self.key))
        else:
            value = convert_value(raw, property_schema(self.schema, self.key))
        if self.syn.whole_numbers:
            value = whole_numbers(value, property_schema(self.schema, self.key))
        if self._unwrap_key() and isinstance(value, dict) and value \
                and set(value) <= set(self.schema.get("properties") or {}):
            self.num_params = len(value)  # `{"arguments": {...}}` -> the inner object
            return [ArgsDelta("{" + json.dumps(value, ensure_ascii=False)[1:-1])]
        return [ArgsDelta(self._key_prefix() + json.dumps(value, ensure_ascii=False))]

    def _unwrap_key(self) -> bool:
        """The first parameter, named as a wrapper the schema does not declare."""
        props = (self.schema or {}).get("properties") or {}
        return (self.key in self.syn.unwrap and self.num_params == 0 and bool(props)
                and self.key not in props)

    def _decode(self, raw: str, prop: dict | None) -> object:
        types = schema_types(prop)
        if types:
            return raw if types == ["string"] else convert_value(raw, prop)
        try:
            return json.loads(raw)
        except ValueError:
            return raw

    def _close(self) -> list[Event]:
        return [ArgsDelta("}" if self.num_params else "{}"), CallEnd()]

    def finish(self) -> list[Event]:
        events, self.pending = self.pending, []
        return events
