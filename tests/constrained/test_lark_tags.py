"""Structural tags on llguidance (engine/structured/lark_tags.py, issue 36): the lark written for
each element accepts what xgrammar's reading of the tag accepts, special tokens are referenced
as tokens, free text ends at the first end marker, and parts no value satisfies are left out."""

from __future__ import annotations

import json
from typing import Any

import pytest
from mask_walk import walks
from thinkgate.engine.sampling_params import StructuredOutputsParams as SO
from thinkgate.engine.structured.grammar import Grammar
from thinkgate.engine.structured.lark_tags import lark_string, tag_lark

SPECIAL = {"<tool_call>": 8002, "</tool_call>": 8003}


@pytest.fixture(scope="module")
def tok() -> Any:
    from thinkgate.engine.demo import demo_model_path
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(demo_model_path())


@pytest.fixture(scope="module", params=["guidance", "xgrammar"])
def grammar(request: Any, tok: Any) -> Grammar:
    g = Grammar(tok, -(-len(tok) // 64) * 64, [0, 2], max_num_seqs=1, backend=request.param)
    yield g
    g.close()


def _accepts(g: Grammar, tag: dict[str, Any], text: str, tok: Any) -> bool:
    """Whether `text` goes through the tag's mask token by token and the output may end."""
    row = g.new_request(SO(structural_tag={"type": "structural_tag", "format": tag}))
    return walks(g, row, [*tok.encode(text, add_special_tokens=False), 2])


def _tag(begin: str, content: dict[str, Any], end: str) -> dict[str, Any]:
    return {"type": "tag", "begin": begin, "content": content, "end": end}


ARGS = {"type": "json_schema", "json_schema": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
HERMES = _tag('<tool_call>{"name": "w", "arguments": ', ARGS, "}</tool_call>")
PARAM = {"type": "sequence", "elements": [
    {"type": "const_string", "value": "<p=city>\n"},
    {"type": "any_text", "excludes": ["<p=", "</p>"]},  # as the XML formats' values
    {"type": "const_string", "value": "\n</p>"}]}


@pytest.mark.parametrize("tag, text, ok", [
    (HERMES, '<tool_call>{"name": "w", "arguments": {"city": "Oslo"}}</tool_call>', True),
    (HERMES, '<tool_call>{"name": "w", "arguments": {"city": 7}}</tool_call>', False),
    # free text ends at the first end marker and may hold newlines and a lone `</`
    (PARAM, "<p=city>\nSan\nJose </ x\n</p>", True),
    (PARAM, "<p=city>\nSan\n</p> Jose\n</p>", False),
    (PARAM, "<p=city>\nSan <p= Jose\n</p>", False),  # an excluded marker
    (PARAM, "<p=city>\nA\n</p>B\n</p>", False),  # text after the first end
    ({"type": "tags_with_separator", "tags": [HERMES], "separator": "\n",
      "at_least_one": True, "stop_after_first": False},
     '<tool_call>{"name": "w", "arguments": {"city": "a"}}</tool_call>\n'
     '<tool_call>{"name": "w", "arguments": {"city": "b"}}</tool_call>', True),
    ({"type": "tags_with_separator", "tags": [HERMES], "separator": "\n",
      "at_least_one": True, "stop_after_first": True},
     '<tool_call>{"name": "w", "arguments": {"city": "a"}}</tool_call>\n'
     '<tool_call>{"name": "w", "arguments": {"city": "b"}}</tool_call>', False),
    # auto: free text; the trigger opens a call that must be valid
    ({"type": "triggered_tags", "triggers": ["<tool_call>"], "tags": [HERMES],
      "at_least_one": False, "stop_after_first": False},
     'Let me look. <tool_call>{"name": "w", "arguments": {"city": "Rome"}}</tool_call> Done.',
     True),
    ({"type": "triggered_tags", "triggers": ["<tool_call>"], "tags": [HERMES],
      "at_least_one": False, "stop_after_first": False},
     'Let me look. <tool_call>{"name": "x"}</tool_call>', False),
    ({"type": "triggered_tags", "triggers": ["[CALL]"], "tags": [
        _tag("[CALL]", ARGS, "[/CALL]")], "at_least_one": False, "stop_after_first": False},
     'Text [CALL]{"city": "Bern"}[/CALL] more text', True),
    ({"type": "triggered_tags", "triggers": ["[CALL]"], "tags": [
        _tag("[CALL]", ARGS, "[/CALL]")], "at_least_one": False, "stop_after_first": False},
     'Text [CALL]{"town": 1}[/CALL]', False),
])
def test_tags_accept_what_they_describe_on_both_backends(grammar: Grammar, tok: Any,
                                                         tag: dict, text: str, ok: bool) -> None:
    assert _accepts(grammar, tag, text, tok) == ok


def test_special_tokens_are_token_references_and_strings_are_escaped() -> None:
    lark = tag_lark({"type": "structural_tag", "format": {
        "type": "const_string", "value": 'a"\\\n<tool_call>b'}}, SPECIAL)
    assert lark.startswith('start: "a\\"\\\\\\n" <[8002]> "b"')
    assert lark_string("x\ty\x01") == '"x\\ty\\x01"'


def test_a_parameter_no_value_satisfies_is_left_out(tok: Any) -> None:
    g = Grammar(tok, -(-len(tok) // 64) * 64, [0, 2], max_num_seqs=1, backend="guidance")
    never = {"type": "boolean", "enum": ["True", "False"]}  # BFCL writes such parameters
    call = {"type": "sequence", "elements": [
        {"type": "const_string", "value": "f("},
        {"type": "optional", "content": {"type": "sequence", "elements": [
            {"type": "const_string", "value": "flag="},
            {"type": "json_schema", "json_schema": never}]}},
        {"type": "const_string", "value": ")"}]}
    assert _accepts(g, call, "f()", tok)
    assert not _accepts(g, call, "f(flag=true)", tok)
    only = {"type": "sequence", "elements": [{"type": "const_string", "value": "f("},
                                             {"type": "json_schema", "json_schema": never}]}
    with pytest.raises(ValueError, match="no call can be written"):
        g.new_request(SO(structural_tag={"type": "structural_tag", "format": only}))
    g.close()


def test_tool_calls_compile_on_guidance_under_auto_in_milliseconds(tok: Any) -> None:
    from thinkgate.engine.demo.data import TOOLS
    from thinkgate.engine.structured.tool_constraints import chat_constraint

    g = Grammar(tok, -(-len(tok) // 64) * 64, [0, 2], max_num_seqs=1)
    for parser in ("hermes", "qwen3_coder", "pythonic", "llama3_json", "mistral"):
        row = g.new_request(chat_constraint(parser, list(TOOLS.values()), "required", None))
        assert row.backend == "guidance", parser
    # the same tools in another order are the same grammar: one compile
    before = sum(g.cache.compiled_by.values())
    g.new_request(chat_constraint("hermes", list(TOOLS.values())[::-1], "required", None))
    assert sum(g.cache.compiled_by.values()) == before
    # a style only xgrammar writes (Gemma 4's call syntax) falls back to it
    gemma = {"type": "json_schema", "json_schema": {"type": "object"}, "style": "gemma"}
    assert g.new_request(SO(structural_tag={"type": "structural_tag", "format": gemma})
                         ).backend == "xgrammar"
    g.close()


def test_strict_tools_close_their_objects_and_open_ones_take_other_keys() -> None:
    from thinkgate.engine.structured.tool_constraints import chat_constraint

    tool = {"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer"}}}}}
    open_tag = json.dumps(chat_constraint("hermes", [tool], "required", None).structural_tag)
    assert "additionalProperties" not in open_tag
    strict = {"type": "function", "function": {**tool["function"], "strict": True}}
    closed = json.dumps(chat_constraint("hermes", [strict], "required", None).structural_tag)
    assert '"additionalProperties": false' in closed
