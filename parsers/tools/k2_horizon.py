"""K2-Horizon's `<ifm|tool_calls>` block, read whole, as vLLM's parser does: the block is held
until `</ifm|tool_calls>` and then either every call in it is valid or the block is text.

The request picks the call syntax (`chat_template_kwargs.tool_call_format`): `xml` (default,
`<ifm|tool_call>NAME<ifm|arg_key>K</ifm|arg_key><ifm|arg_value>V</ifm|arg_value>...`),
`xml_typed` (an `<ifm|arg_type>T</ifm|arg_type>` after each key) or `json`
(`<ifm|tool_call>{"name": ..., "arguments": {...}}`). A call in another syntax, naming a tool
the request does not offer, or a block cut off before its end marker stays content, markers
included ("fail closed"). Values are converted by the tool's schema. Holding the block costs
one scan of it at the end marker; per-delta work stays O(len(delta)).
"""

from __future__ import annotations

import json
import re
from typing import Any

from thinkgate.parsers.types import (
    Event,
    ToolArgs,
    ToolContext,
    ToolEnd,
    ToolSection,
    ToolStart,
)

from .convert import convert_value, property_schema, tool_parameters, whole_numbers
from .held_block import HeldBlockSection
from .spec import ToolSpec
from .tool_format import SpecToolFormat

OPEN, CLOSE = "<ifm|tool_calls>", "</ifm|tool_calls>"
CALL_OPEN, CALL_CLOSE = "<ifm|tool_call>", "</ifm|tool_call>"
FORMATS = ("xml", "xml_typed", "json")
_CALL = re.compile(re.escape(CALL_OPEN) + r"(.*?)" + re.escape(CALL_CLOSE), re.S)
_NAME = re.compile(r"[A-Za-z_][\w.\-]*")
_XML_ARG = re.compile(r"<ifm\|arg_key>(.*?)</ifm\|arg_key>"
                      r"(?:<ifm\|arg_type>(.*?)</ifm\|arg_type>)?"
                      r"<ifm\|arg_value>(.*?)</ifm\|arg_value>", re.S)


def call_format(chat_template_kwargs: dict[str, Any] | None) -> str | None:
    """The request's call syntax; None for a value vLLM rejects (then no block is a call)."""
    value = (chat_template_kwargs or {}).get("tool_call_format", "xml")
    return value if value in FORMATS else None


def _xml_call(body: str, typed: bool, tools: Any) -> tuple[str, dict] | None:
    match = _NAME.match(body)
    if match is None:
        return None
    name, at, args = match.group(0), match.end(), {}
    params = tool_parameters(list(tools or ()), name)
    for arg in _XML_ARG.finditer(body, at):
        if arg.start() != at or (arg.group(2) is not None) != typed:
            return None
        key, value = arg.group(1), arg.group(3)
        schema = property_schema(params, key) or ({"type": arg.group(2)} if typed else None)
        args[key] = whole_numbers(convert_value(value, schema), schema)
        at = arg.end()
    return (name, args) if at == len(body) else None


def _json_call(body: str, tools: Any) -> tuple[str, dict] | None:
    try:
        obj = json.loads(body)
    except ValueError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    args = obj.get("arguments", {})
    if not isinstance(args, dict):
        return None
    params = tool_parameters(list(tools or ()), obj["name"])
    return obj["name"], {k: whole_numbers(convert_value(v, property_schema(params, k))
                                          if isinstance(v, str) else v, property_schema(params, k))
                         for k, v in args.items()}


def parse_block(body: str, fmt: str | None, tools: Any) -> list[tuple[str, dict]] | None:
    """The calls of one block's inside, or None when any part of it is not a valid call."""
    if fmt is None:
        return None
    names = {t.get("function", t).get("name") for t in tools or () if isinstance(t, dict)}
    calls, at = [], 0
    for match in _CALL.finditer(body):
        if body[at:match.start()].strip():
            return None
        inner = match.group(1)
        call = _json_call(inner, tools) if fmt == "json" else _xml_call(inner, fmt == "xml_typed",
                                                                        tools)
        if call is None or (tools and call[0] not in names):
            return None
        calls.append(call)
        at = match.end()
    return calls if calls and not body[at:].strip() else None


class K2HorizonSection(HeldBlockSection):
    def __init__(self, ctx: ToolContext) -> None:
        super().__init__(OPEN, CLOSE)
        self.fmt = call_format(ctx.chat_template_kwargs)
        self.tools = ctx.tools

    def read(self, body: str) -> list[Event] | None:
        calls = parse_block(body, self.fmt, self.tools)
        if calls is None:
            return None
        events: list[Event] = []
        for name, args in calls:
            events += [ToolStart(name), ToolArgs(json.dumps(args, ensure_ascii=False)), ToolEnd()]
        return events


class K2HorizonFormat(SpecToolFormat):
    """The spec (markers, grammar, renderer) of the XML syntax; parsing by `K2HorizonSection`."""

    def __init__(self, spec: ToolSpec) -> None:
        super().__init__(spec)
        self.keeps_text_verbatim = True
        self.special_markers = (*self.special_markers, "<ifm|arg_type>", "</ifm|arg_type>")

    def open_section(self, marker: str, ctx: ToolContext) -> ToolSection:
        return K2HorizonSection(ctx)
