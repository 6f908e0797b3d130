"""Structured outputs: constraints from requests to bitmask rows (see README.md here).

The contract other checks drive without a model (ARCHITECTURE.md, "Grammar layer"):
`Grammar`, `tool_call_constraint`, `render_calls`. The last two build on the parsers' tool
formats, so they are imported on first use: importing this package for `Grammar` does not
import the parsers.
"""

from __future__ import annotations

from typing import Any

from thinkgate.engine.structured.grammar import Grammar, RequestGrammar

__all__ = ["Grammar", "RequestGrammar", "render_calls", "tool_call_constraint"]


def tool_call_constraint(tool_parser: str | None, tools: Any, tool_choice: Any,
                         response_format: Any = None, parallel_tool_calls: bool = True,
                         options: Any = None) -> Any:
    """The constraint of a chat request's tools / tool_choice / response_format, as the server
    builds it (`StructuredOutputsParams`, or None when nothing is constrained); `tool_choice`
    as a client sends it. `ValueError` naming a bad choice."""
    from thinkgate.engine.structured.tool_constraints import chat_constraint, normalize_tool_choice

    choice = normalize_tool_choice(tool_choice, tools)
    return chat_constraint(tool_parser, tools, choice, response_format, parallel_tool_calls,
                           options)


def __getattr__(name: str) -> Any:
    if name == "render_calls":
        from thinkgate.parsers.tools.grammar import render_calls

        return render_calls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
