"""What a chat request's `tools`, `tool_choice` and `response_format` ask the grammar for.

`chat_constraint(...)` returns the `StructuredOutputsParams` (or None) the chat layer puts into
the request's `SamplingParams`:

| tool_choice / tools       | response_format        | constraint                                   |
|---------------------------|------------------------|----------------------------------------------|
| none, or no tools         | text / absent          | none                                         |
| none, or no tools         | json_object/json_schema| the JSON object / schema                     |
| auto                      | text / absent          | none, or (some tool `strict`) free text whose calls follow their schemas |
| auto                      | json_object/json_schema| one or more valid calls, or the JSON answer  |
| required                  | any                    | one or more valid calls of the given tools   |
| named                     | any                    | exactly one valid call of that tool          |

Tool calls are written in the tool parser's own syntax; the grammar comes from the tool format
(`thinkgate.parsers.tools.grammar`) so parser and grammar cannot drift. The constraint applies to
the answer: the reasoning gate leaves thinking free. The chat layer (api/chat.py) says what a
request asks for; this module, in the structured-output room, decides the constraint; each
backend compiles it its own way.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from thinkgate.engine.sampling_params import StructuredOutputsParams
from thinkgate.engine.structured.json_schema_rules import (
    check_depth,
    closed_objects,
    unenforced_keywords,
)

ToolChoice = str | Mapping[str, Any] | None


def tool_function(tool: Mapping[str, Any]) -> Mapping[str, Any]:
    """The `function` part of an OpenAI tool (accepts the bare function form too)."""
    fn = tool.get("function", tool) if isinstance(tool, Mapping) else None
    if not isinstance(fn, Mapping) or not isinstance(fn.get("name"), str) or not fn["name"]:
        raise ValueError(f"each tool needs a function with a name, got {tool!r}")
    return fn


def tool_parameters(tool: Mapping[str, Any]) -> dict[str, Any]:
    params = tool_function(tool).get("parameters")
    return dict(params) if isinstance(params, Mapping) else {"type": "object"}


def normalize_tool_choice(tool_choice: ToolChoice, tools: Sequence[Mapping[str, Any]] | None
                          ) -> str:
    """'none' | 'auto' | 'required' | the named function; ValueError naming a bad choice."""
    if tools is not None and len(tools) == 0:
        raise ValueError("tools must be a non-empty list or omitted, got []")
    names = [tool_function(t)["name"] for t in tools or ()]
    if tool_choice is None:
        return "auto" if names else "none"
    if isinstance(tool_choice, str):
        if tool_choice not in ("none", "auto", "required"):
            raise ValueError(f"tool_choice must be 'none', 'auto', 'required' or a named "
                             f"function, got {tool_choice!r}")
        if tool_choice == "required" and not names:
            raise ValueError("tool_choice 'required' needs tools")
        return tool_choice if names else "none"
    fn = tool_choice.get("function") if isinstance(tool_choice, Mapping) else None
    name = fn.get("name") if isinstance(fn, Mapping) else None
    if not isinstance(name, str):
        raise ValueError(f"a named tool_choice is {{'type': 'function', 'function': "
                         f"{{'name': ...}}}}, got {tool_choice!r}")
    if name not in names:
        raise ValueError(f"tool_choice names {name!r}, which is not in tools ({names})")
    return name


def response_format_schema(response_format: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The JSON schema a response_format asks for: None for text, {'type': 'object'} for
    json_object; ValueError for anything else."""
    if response_format is None:
        return None
    kind = response_format.get("type") if isinstance(response_format, Mapping) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "object"}
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        schema = spec.get("schema", spec.get("json_schema")) if isinstance(spec, Mapping) else None
        if isinstance(schema, str):
            schema = json.loads(schema)
        if not isinstance(schema, Mapping):
            raise ValueError(f"response_format json_schema needs json_schema.schema (an object), "
                             f"got {spec!r}")
        return dict(schema)
    raise ValueError(f"response_format.type must be 'text', 'json_object' or 'json_schema', "
                     f"got {kind!r}")


def chat_constraint(tool_parser: str | None, tools: Sequence[Mapping[str, Any]] | None,
                    tool_choice: str, response_format: Mapping[str, Any] | None,
                    parallel_tool_calls: bool = True,
                    options: Mapping[str, Any] | None = None) -> StructuredOutputsParams | None:
    """The request's constraint (table in the module docstring); `tool_choice` normalized.
    `options`: StructuredOutputsParams options (bound_numbers, complete_before_max_tokens,
    best_effort) for the constraint."""
    opts = dict(options or {})
    schema = response_format_schema(response_format)
    if schema is not None:
        check_depth(schema, "response_format")
    for tool in tools or ():
        check_depth(tool_parameters(tool), f"tools[{tool_function(tool)['name']}].parameters")
    if tool_choice == "none" or not tools:
        if schema is None:
            return None
        if schema == {"type": "object"}:
            return StructuredOutputsParams(json_object=True, **opts)
        return StructuredOutputsParams(json=schema, **opts)
    if tool_parser is None:
        if tool_choice == "auto" and schema is None:
            return None
        raise ValueError(f"tool_choice {tool_choice!r} needs a tool-call parser "
                         "(LLM(tool_call_parser=...) / --tool-call-parser)")
    if tool_choice == "auto":
        if schema is not None:
            return _calls_or_answer(tool_parser, tools, schema, parallel_tool_calls, opts)
        if not any(tool_function(t).get("strict") for t in tools):
            return None
    return StructuredOutputsParams(
        structural_tag=tool_calls_tag(tool_parser, tools, tool_choice, parallel_tool_calls),
        **opts)


def _calls_or_answer(tool_parser: str, tools: Sequence[Mapping[str, Any]],
                     schema: dict[str, Any], parallel: bool,
                     opts: dict[str, Any]) -> StructuredOutputsParams:
    """tool_choice auto with a JSON response_format: calls, or the answer (one structural tag,
    so either backend compiles it and every schema in it is checked as a tool's is)."""
    calls = tool_calls_tag(tool_parser, tools, "required", parallel)
    either = {"type": "or", "elements": [
        calls["format"], {"type": "json_schema", "json_schema": schema}]}
    return StructuredOutputsParams(
        structural_tag={"type": "structural_tag", "format": either}, **opts)


def best_effort_report(constraint: StructuredOutputsParams | None,
                       tools: Sequence[Mapping[str, Any]] | None, tool_choice: str,
                       response_format: Mapping[str, Any] | None) -> list[str]:
    """With best_effort, the keywords of the request's schemas the grammar does not enforce
    ("<keyword> at <path>", prefixed by where the schema came from); else []."""
    if constraint is None or not constraint.best_effort:
        return []
    found: list[str] = []
    schemas: list[tuple[str, Any]] = []
    if constraint.kind == "json" and response_format is None:
        given = constraint.json
        schemas.append(("structured_outputs.json", json.loads(given)
                        if isinstance(given, str) else given))
    schema = response_format_schema(response_format)
    if schema is not None:
        schemas.append(("response_format", schema))
    if tools and tool_choice != "none":
        schemas += [(f"tools[{tool_function(t)['name']}]", tool_parameters(t)) for t in tools]
    for where, sub in schemas:
        found += [f"{where}: {item}" for item in unenforced_keywords(sub)]
    return found


def _strict_closed(tool: Mapping[str, Any]) -> dict[str, Any]:
    """A `strict` tool with its parameters' objects closed, as OpenAI's strict mode has them
    (`additionalProperties: false` wherever unset); other tools as given (JSON Schema: extra
    properties allowed unless the schema forbids them)."""
    fn = tool_function(tool)
    if not fn.get("strict") or not isinstance(fn.get("parameters"), Mapping):
        return dict(tool)
    closed = {**fn, "parameters": closed_objects(fn["parameters"])}
    return {**tool, "function": closed} if "function" in tool else closed


def tool_calls_tag(tool_parser: str, tools: Sequence[Mapping[str, Any]], mode: str,
                   parallel_tool_calls: bool = True) -> dict[str, Any]:
    """The structural tag for calls in the tool format's syntax (from the tool parsers): mode
    'required', 'auto' (strict: free text, calls triggered by the start marker) or a name."""
    from thinkgate.parsers.tools.grammar import tool_call_structural_tag

    choice: Any = mode
    if mode not in ("auto", "required"):
        choice = {"type": "function", "function": {"name": mode}}
    tag = tool_call_structural_tag(tool_parser, [_strict_closed(t) for t in tools], choice,
                                   parallel_tool_calls=parallel_tool_calls)
    if tag is None:
        raise ValueError(f"tool parser {tool_parser!r} gave no grammar for tool_choice {mode!r}")
    return tag
