"""thinkgate.parsers: reasoning and tool-call formats by vLLM name, one streaming interpreter.

    p = get_parser(tool_parser="hermes", reasoning_parser="qwen3", tokenizer=None)
    p.parse(text) -> ParsedMessage;  s = p.stream(); s.feed(delta) -> [delta dict]; s.finish()

See parsers/README.md for formats, the tool-format plug-in interface and the engine helpers.
"""

from __future__ import annotations

from typing import Any

from thinkgate.parsers.interpreter import Parser, StreamParser, collect
from thinkgate.parsers.reasoning_format import ReasoningFormat, marker_token_ids
from thinkgate.parsers.registry import (
    get_reasoning_format,
    get_tool_format,
    list_parsers,
    load_plugin,
    register_reasoning_parser,
    register_tool_parser,
)
from thinkgate.parsers.types import (
    Content,
    ParsedMessage,
    Reasoning,
    ToolArgs,
    ToolCall,
    ToolContext,
    ToolEnd,
    ToolFormat,
    ToolSection,
    ToolStart,
)

__all__ = [
    "Content", "ParsedMessage", "Parser", "Reasoning", "ReasoningFormat", "StreamParser",
    "ToolArgs", "ToolCall", "ToolContext", "ToolEnd", "ToolFormat", "ToolSection", "ToolStart",
    "collect", "get_parser", "get_reasoning_format", "get_tool_format", "list_parsers",
    "load_plugin", "marker_token_ids", "register_reasoning_parser", "register_tool_parser",
]


def get_parser(tool_parser: str | None = None, reasoning_parser: str | None = None,
               tokenizer: Any = None) -> Parser:
    """A parser for vLLM's `--tool-call-parser` / `--reasoning-parser` names (either may be None).

    Unknown names raise ValueError listing the known ones. A tool format that splits its own
    thinking (Cohere's, as vLLM's) brings its reasoning parser when none is named.
    """
    tool = get_tool_format(tool_parser, tokenizer) if tool_parser else None
    reasoning_parser = reasoning_parser or (tool.reasoning_parser if tool is not None else None)
    reasoning = get_reasoning_format(reasoning_parser, tokenizer) if reasoning_parser else None
    return Parser(reasoning, tool, tokenizer)
