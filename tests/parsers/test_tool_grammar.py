"""Grammar ⇄ parser round trip for every tool format.

Strings are generated under each format's structural tag (required, named, auto) by a random walk
over a tiny vocabulary (``tool_grammar_walk.py``); the format's parser must read back only calls
(required/named), of the allowed tools, whose arguments satisfy the tool's schema, the same when
streamed. The canonical rendering of known calls must be accepted and read back exactly.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
import xgrammar as xgr
from parser_harness import TemplateTokenizer, split
from thinkgate.parsers import collect, get_parser
from thinkgate.parsers.tools.formats import TOOL_SPECS
from thinkgate.parsers.tools.grammar import render_calls, tool_call_structural_tag
from tool_grammar_walk import Walker

TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "required": ["city"], "properties": {
            "city": {"type": "string"},
            "days": {"type": "integer"},
            "detail": {"type": "object", "properties": {"hourly": {"type": "boolean"}},
                       "required": ["hourly"]}}}}},
    {"type": "function", "function": {"name": "ping", "parameters": {
        "type": "object", "properties": {}}}},
]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
CALLS = [("get_weather", {"city": 'Paris, "FR" é', "days": 3, "detail": {"hourly": True}}),
         ("ping", {})]
NAMED = {"type": "function", "function": {"name": "get_weather"}}
MODES = {"required": "required", "named": NAMED, "auto": "auto"}
NAMES = sorted(TOOL_SPECS)


def literals(node: Any) -> set[str]:
    """Every constant string of a structural tag (walk-vocabulary tokens)."""
    out: set[str] = set()
    if isinstance(node, dict):
        for key in ("value", "begin", "end", "separator"):
            if isinstance(node.get(key), str) and node[key]:
                out.add(node[key])
        out |= {t for t in node.get("triggers", ())}
        for v in node.values():
            out |= literals(v)
    elif isinstance(node, list):
        for v in node:
            out |= literals(v)
    return out


def inner_tokens(name: str) -> set[str]:
    """Pieces a format writes inside arguments (Gemma's string delimiter, MiniMax-M3 tags)."""
    region = TOOL_SPECS[name].regions[0]
    out = {region.string_delim} if region.string_delim else set()
    if region.namespace:
        keys = ["item", "city", "days", "detail", "hourly"]
        out |= {f"{region.namespace}<{k}>" for k in keys}
        out |= {f"{region.namespace}</{k}>" for k in keys}
    return out


@pytest.mark.parametrize("name", NAMES)
def test_canonical_calls_accepted_and_read_back(name: str) -> None:
    text = render_calls(name, CALLS)
    one = render_calls(name, CALLS[:1])
    # auto writes a region per call where a region has no end marker (Llama's <|python_tag|>)
    for mode, s in (("required", text), ("auto", one), ("auto", "Hi. " + one)):
        grammar = xgr.Grammar.from_structural_tag(
            json.dumps(tool_call_structural_tag(name, TOOLS, mode)))
        assert xgr.testing._is_grammar_accept_string(grammar, s), (mode, s)
    msg = get_parser(tool_parser=name).parse(text, tools=TOOLS)
    assert [(c.name, json.loads(c.arguments)) for c in msg.tool_calls] == CALLS, text
    assert not (msg.content or "").strip(), text


@pytest.mark.parametrize("name", NAMES)
def test_walks_under_grammar_read_back(name: str) -> None:
    parser = get_parser(tool_parser=name)
    for mode, choice in MODES.items():
        tag = tool_call_structural_tag(name, TOOLS, choice)
        walker = Walker(sorted(literals(tag) | inner_tokens(name)))
        produced = 0
        for seed in range(2):
            text = walker.generate(json.dumps(tag), seed)
            if text is None:
                continue
            produced += 1
            msg = parser.parse(text, tools=TOOLS)
            where = f"{mode} seed {seed}: {text!r}"
            for call in msg.tool_calls:
                assert call.name in SCHEMAS, where
                jsonschema.validate(json.loads(call.arguments), SCHEMAS[call.name])
            if mode != "auto":
                assert msg.tool_calls and not (msg.content or "").strip(), where
            if mode == "named":
                assert [c.name for c in msg.tool_calls] == ["get_weather"], where
            if mode != "auto":  # what was read, written back canonically, is in the grammar
                again = render_calls(name, [(c.name, json.loads(c.arguments))
                                            for c in msg.tool_calls])
                assert xgr.testing._is_grammar_accept_string(
                    xgr.Grammar.from_structural_tag(json.dumps(tag)), again), (where, again)
            s = parser.stream(tools=TOOLS)
            deltas = [d for piece in split(text, "rand1") for d in s.feed(piece)] + s.finish()
            got = collect(deltas)
            assert [(c.name, c.arguments) for c in got.tool_calls] == \
                [(c.name, c.arguments) for c in msg.tool_calls], where
            assert got.content == msg.content, where
        assert produced >= 1, f"no walk under {mode} ended within the step limit"


def test_none_and_bad_choices() -> None:
    assert tool_call_structural_tag("qwen3_coder", TOOLS, "none") is None
    with pytest.raises(ValueError, match="nope"):
        tool_call_structural_tag("qwen3_coder", TOOLS, {"function": {"name": "nope"}})
    with pytest.raises(ValueError, match="bogus"):
        tool_call_structural_tag("bogus", TOOLS, "required")
    with pytest.raises(ValueError, match="at least one tool"):
        tool_call_structural_tag("qwen3_coder", [], "required")


def test_reasoning_end_leaves_thinking_free() -> None:
    tag = tool_call_structural_tag("qwen3_coder", TOOLS, NAMED, reasoning_end="</think>")
    grammar = xgr.Grammar.from_structural_tag(json.dumps(tag))
    call = render_calls("qwen3_coder", CALLS[:1])
    assert xgr.testing._is_grammar_accept_string(grammar, "any <b>thought</b>\n</think>" + call)
    assert not xgr.testing._is_grammar_accept_string(grammar, "no end marker" + call)
    same = tool_call_structural_tag("qwen3_coder", TOOLS, NAMED, reasoning_parser="qwen3")
    assert same == tag


def test_template_driven_names_follow_the_template() -> None:
    tok = TemplateTokenizer(chat_template="{{ x }}<|tool_calls_section_begin|>")
    for name in ("hf", "beam"):
        text = render_calls(name, CALLS, tokenizer=tok)
        assert text.startswith("<|tool_calls_section_begin|>")
        tag = tool_call_structural_tag(name, TOOLS, "required", tokenizer=tok)
        grammar = xgr.Grammar.from_structural_tag(json.dumps(tag))
        assert xgr.testing._is_grammar_accept_string(grammar, text)
        msg = get_parser(tool_parser=name, tokenizer=tok).parse(text, tools=TOOLS)
        assert [(c.name, json.loads(c.arguments)) for c in msg.tool_calls] == CALLS
    assert "<tool_call>" in render_calls("hf", CALLS)  # no template: Hermes-style JSON


def test_parallel_false_allows_one_call() -> None:
    tag = tool_call_structural_tag("hermes", TOOLS, "required", parallel_tool_calls=False)
    grammar = xgr.Grammar.from_structural_tag(json.dumps(tag))
    assert xgr.testing._is_grammar_accept_string(grammar, render_calls("hermes", CALLS[:1]))
    assert not xgr.testing._is_grammar_accept_string(grammar, render_calls("hermes", CALLS))
