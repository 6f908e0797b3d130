"""Poolside's `<tool_call>NAME <arg_key>K</arg_key><arg_value>V</arg_value>...</tool_call>`,
read a block at a time, as vLLM's `poolside_v1` parser reads its output.

A block is held until `</tool_call>` and then is one call or text: the name is the text before
the first `<arg_key>` (stripped; it must hold no `<` and no newline, so a stray `<arg_value>` or
`<x` in it leaves the block text), the arguments every `<arg_key>K</arg_key><arg_value>V
</arg_value>` pair after it, stray text between pairs ignored. A value whose property is
string-typed is kept as written (whitespace is significant in code); any other is stripped and
read as JSON or a Python literal, else kept as its text. A block the output cuts off before
`</tool_call>` is text. Holding costs one scan of the block at its end marker; per-delta work
stays O(len(delta)); the cost is that a call's arguments arrive when its block ends.
"""

from __future__ import annotations

import json
import re
from typing import Any

from thinkgate.parsers.types import (
    Content,
    Event,
    ToolArgs,
    ToolContext,
    ToolEnd,
    ToolSection,
    ToolStart,
)

from .convert import parse_literal, property_schema, tool_parameters
from .held_block import HeldBlockSection
from .tool_format import SpecToolFormat

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_PAIR = re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.S)


def _value(raw: str, prop: dict | None) -> Any:
    if (prop or {}).get("type") == "string":
        return raw
    ok, value = parse_literal(raw.strip())
    return value if ok else raw.strip()


def read_call(body: str, tools: Any) -> tuple[str, dict] | None:
    """The call of one block's inside, or None when the block is not one."""
    head, key, rest = body.partition("<arg_key>")
    name = head.strip()
    if not name or "<" in name or "\n" in name:
        return None
    params = tool_parameters(list(tools or ()), name)
    args = {k.strip(): _value(v, property_schema(params, k.strip()))
            for k, v in _PAIR.findall(key + rest)}
    return name, args


class PoolsideSection(HeldBlockSection):
    def __init__(self, ctx: ToolContext) -> None:
        super().__init__(OPEN, CLOSE)
        self.tools = ctx.tools

    def read(self, body: str) -> list[Event] | None:
        # a `<tool_call>` inside the block: the call is read from the first opening it follows
        # that gives one, the text before it content
        at = 0
        while True:
            call = read_call(body[at:], self.tools)
            if call is not None:
                break
            at = body.find(OPEN, at) + len(OPEN)
            if at < len(OPEN):
                return None
        events: list[Event] = [Content(OPEN + body[:at - len(OPEN)])] if at else []
        return events + [ToolStart(call[0]), ToolArgs(json.dumps(call[1], ensure_ascii=False)),
                         ToolEnd()]


class PoolsideFormat(SpecToolFormat):
    """The spec (markers, grammar, renderer) of Poolside's syntax; parsing by `PoolsideSection`."""

    def open_section(self, marker: str, ctx: ToolContext) -> ToolSection:
        return PoolsideSection(ctx)
