"""Each tool format's xgrammar constraint, built from the same data the parser reads.

``tool_call_structural_tag(name, tools, tool_choice)`` returns a structural tag (a dict in
xgrammar's ``{"type": "structural_tag", "format": ...}`` shape; ``Grammar.from_structural_tag``
and the engine's grammar manager take it as is):

- ``tool_choice="required"``: one or more calls (one with ``parallel_tool_calls=False``) of the
  given tools in the format's own syntax, nothing else;
- a named function (``{"type": "function", "function": {"name": ...}}`` or the bare name):
  exactly that call;
- ``"auto"``: free text; once the format's start marker is written, a schema-valid call must
  follow (strict tools). ``"none"`` has no constraint (returns None).

With ``reasoning_end`` (e.g. ``"</think>"``) the grammar first leaves the reasoning free up to
that marker; without it the grammar starts where the reasoning ended (the engine applies
grammars only after thinking).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from thinkgate.parsers.registry import get_tool_format

from .args_syntax import args_format
from .convert import tool_parameters
from .layout import RegionLayout, region_layout
from .spec import ToolSpec


def _spec(name: str, tokenizer: Any) -> ToolSpec:
    """The data of the format registered as ``name`` (built-in, ``hf``/``beam`` read from the
    tokenizer's template, or a plugin's ``SpecToolFormat``): the parser's own spec."""
    fmt = get_tool_format(name, tokenizer)
    spec = getattr(fmt, "spec", None)
    if not isinstance(spec, ToolSpec):
        raise ValueError(
            f"tool parser {name!r} ({type(fmt).__name__}) has no ToolSpec to build a grammar "
            "from: register it as SpecToolFormat(ToolSpec(...)) to use tool_choice='required', "
            "a named function or strict tools")
    return spec


def _tool_names(tools: Sequence[dict[str, Any]] | None) -> list[str]:
    names = []
    for tool in tools or ():
        fn = tool.get("function", tool) if isinstance(tool, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise ValueError(f"tool without a function name: {tool!r}")
        names.append(fn["name"])
    return names


def _parameters(tools: Sequence[dict[str, Any]] | None) -> dict[str, dict | None]:
    """Each tool's parameters schema by name (the first tool of a name, as the parser reads)."""
    found: dict[str, dict | None] = {}
    for tool in tools or ():
        fn = tool.get("function", tool)
        found.setdefault(fn["name"], tool_parameters([tool], fn["name"]))
    return found


def _call_tag(lay: RegionLayout, name: str, params: dict[str, dict | None],
              excludes: list[str]) -> dict:
    call = lay.call(name)
    args = args_format(lay.region, params.get(name), excludes)
    if call.has_index:
        args = {"type": "sequence", "elements": [
            {"type": "regex", "pattern": "[0-9]{1,4}"},
            {"type": "const_string", "value": call.after_index}, args]}
    return {"type": "tag", "begin": call.begin, "content": args, "end": call.end}


def _calls(lay: RegionLayout, tags: list[dict], at_least_one: bool, one: bool) -> dict:
    calls: dict = {"type": "tags_with_separator", "tags": tags, "separator": lay.sep,
                   "at_least_one": at_least_one, "stop_after_first": one}
    if not lay.open and not lay.close:
        return calls
    return {"type": "sequence", "elements": [
        {"type": "const_string", "value": lay.open}, calls,
        {"type": "const_string", "value": lay.close}]}


def _named(tool_choice: Any) -> str | None:
    if isinstance(tool_choice, str):
        return None if tool_choice in ("auto", "required", "none") else tool_choice
    if isinstance(tool_choice, dict):
        fn = tool_choice.get("function", tool_choice)
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            return fn["name"]
    raise ValueError(f"tool_choice must be 'auto', 'required', 'none' or a named function, "
                     f"got {tool_choice!r}")


def tool_call_structural_tag(tool_parser_name: str, tools: Sequence[dict[str, Any]] | None,
                             tool_choice: Any = "required", *, reasoning_end: str | None = None,
                             reasoning_parser: str | None = None,
                             parallel_tool_calls: bool = True,
                             tokenizer: Any = None) -> dict | None:
    """The xgrammar structural tag making a model write calls in ``tool_parser_name``'s syntax.

    ``reasoning_parser`` (a name) is a shorthand for its canonical end marker as
    ``reasoning_end``. ``tokenizer`` serves ``hf``/``beam``, whose syntax comes from the
    model's template (as their parsers read it). The format is looked up in the parser
    registry, so a plugin's ``SpecToolFormat`` gets its grammar from its own ``ToolSpec``; a
    hand-written format (no spec) raises ValueError naming it.
    """
    if reasoning_parser is not None and reasoning_end is None:
        from thinkgate.parsers import get_reasoning_format

        ends = get_reasoning_format(reasoning_parser).end
        reasoning_end = ends[0] if ends else None
    names = _tool_names(tools)
    if tool_choice == "none":
        get_tool_format(tool_parser_name, tokenizer)  # an unknown name still raises
        return None
    spec = _spec(tool_parser_name, tokenizer)
    named = _named(tool_choice)
    if named is not None and named not in names:
        raise ValueError(f"tool_choice names {named!r}, which is not among the tools {names}")
    if not names:
        raise ValueError(f"tool_choice={tool_choice!r} needs at least one tool")
    lay = region_layout(spec)
    excludes = [m for m in spec.special_markers() if len(m) > 2]
    params = _parameters(tools)
    # one alternative per distinct name, sorted: the same tools in another order are the same
    # grammar (one compile, one cache entry)
    names = sorted(params)
    if named is not None:
        fmt = _calls(lay, [_call_tag(lay, named, params, excludes)], True, True)
    elif tool_choice == "required":
        fmt = _calls(lay, [_call_tag(lay, n, params, excludes) for n in names], True,
                     not parallel_tool_calls)
    else:
        tags = [_call_tag(lay, n, params, excludes) for n in names]
        others = [m for m in spec.start_markers() if m not in lay.trigger]
        fmt = _auto(lay, tags, others, parallel_tool_calls)
    if reasoning_end:
        fmt = {"type": "sequence", "elements": [
            {"type": "tag", "begin": "", "content": {"type": "any_text"}, "end": reasoning_end},
            fmt]}
    return {"type": "structural_tag", "format": fmt}


def _auto(lay: RegionLayout, tags: list[dict], others: list[str], parallel: bool) -> dict:
    """Free text in which the format's trigger must open a valid region. Its other start
    markers (which the parser would also read as calls) may not appear in the free text."""
    if lay.close:
        tags = [{"type": "tag", "begin": lay.open,
                 "content": {"type": "tags_with_separator", "tags": tags, "separator": lay.sep,
                             "at_least_one": True, "stop_after_first": not parallel},
                 "end": lay.close}]
    elif lay.open:  # a region with no end (Llama's <|python_tag|>): one call per region
        tags = [{**t, "begin": lay.open + t["begin"]} for t in tags]
    return {"type": "triggered_tags", "triggers": [lay.trigger], "tags": tags,
            "at_least_one": False, "stop_after_first": not parallel, "excludes": others}


def render_calls(tool_parser_name: str, calls: Sequence[tuple[str, dict[str, Any]]],
                 tokenizer: Any = None, tools: Sequence[dict[str, Any]] | None = None) -> str:
    """``calls`` written in the format's canonical syntax (what its grammar accepts). With the
    request's ``tools``, a format whose syntax carries no types (MiniMax-M3's elements) writes
    each value so that the parser reads it back as the same JSON under the tool's schema."""
    from .args_syntax import render_args

    lay = region_layout(_spec(tool_parser_name, tokenizer))
    parts = []
    for i, (name, args) in enumerate(calls):
        c = lay.call(name)
        body = render_args(lay.region, args, tool_parameters(list(tools or ()), name))
        parts.append(c.begin + (str(i) + c.after_index if c.has_index else "") + body + c.end)
    return lay.open + lay.sep.join(parts) + lay.close
