"""Values typed by the request's tool schemas read back exactly, whole and in small deltas: a
string made of digits stays a string, a value nested in an object gets its own schema's type
(muse_glimmer, minimax_m3; the BFCL round trip of `benchmarks/bench_tools.py`)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from thinkgate.parsers import collect, get_parser
from thinkgate.parsers.tools.grammar import render_calls

_INT = {"type": "integer"}
_STR = {"type": "string"}
PARAMS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "user_id": _STR,  # an ID made of digits
        "zip": {"type": ["string", "null"]},
        "count": _INT,
        "address": {"type": "object", "properties": {"zip": _STR, "floor": _INT}},
        # the nested object behind anyOf, members typed by additionalProperties, a $ref
        "box": {"anyOf": [{"type": "object", "properties": {"w": _INT, "h": {"type": "number"}}},
                          {"type": "null"}]},
        "scores": {"type": "object", "additionalProperties": _INT},
        "where": {"$ref": "#/$defs/Place"},
        "rows": {"type": "array", "items": {"type": "object", "properties": {
            "id": _STR, "n": _INT, "flags": {"type": "array", "items": {"type": "boolean"}}}}},
        "tags": {"type": "array", "items": _STR},
        "extra": {"type": "object", "properties": {"k": _INT}},
        # objects whose members have no declared type (BFCL's dicts of scores, lists of records)
        "grades": {"type": "object", "description": "subject -> score"},
        "records": {"type": "array", "items": {"type": "object"}},
    },
    "$defs": {"Place": {"type": "object", "properties": {"lat": {"type": "number"},
                                                         "code": _STR}}},
}
TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": PARAMS}}]
CASES = {
    "digit_only_strings": {"user_id": "12345", "zip": "02139", "count": 7},
    "string_that_reads_as_json": {"user_id": "true", "zip": "[1]", "count": 0},
    "nested_integer": {"address": {"zip": "90210", "floor": 3}, "box": {"w": 4, "h": 2.5},
                       "scores": {"math": 90, "art": 75}, "where": {"lat": 48.5, "code": "75"}},
    "nested_in_a_list": {"rows": [{"id": "007", "n": 1, "flags": [True, False]},
                                  {"id": "8", "n": 22, "flags": []}]},
    "empty_array_and_object": {"tags": [], "extra": {}, "count": 1},
    "untyped_members": {"grades": {"math": 90, "avg": 82.5, "passed": True, "note": "7"},
                        "records": [{"name": ["Li"], "age": [18]}, {"name": "Wu", "age": None}]},
}
FORMATS = ("muse_glimmer", "minimax_m3")


def _read(name: str, text: str, tools: list | None, step: int) -> list[tuple[str, Any]]:
    parser = get_parser(tool_parser=name)
    if step == 0:
        calls = parser.parse(text, tools).tool_calls
    else:
        stream = parser.stream(tools)
        deltas = [d for i in range(0, len(text), step) for d in stream.feed(text[i:i + step])]
        calls = collect([*deltas, *stream.finish()]).tool_calls
    return [(c.name, json.loads(c.arguments)) for c in calls]


@pytest.mark.parametrize("step", [0, 1, 3, 7], ids=["whole", "d1", "d3", "d7"])
@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("name", FORMATS)
def test_schema_typed_values_read_back(name: str, case: str, step: int) -> None:
    args = CASES[case]
    text = render_calls(name, [("lookup", args)], tools=TOOLS)
    assert _read(name, text, TOOLS, step) == [("lookup", args)]


NS = "]<]minimax[>["


def _m3_call(body: str) -> str:
    return f'{NS}<tool_call>{NS}<invoke name="lookup">{body}{NS}</invoke>{NS}</tool_call>'


def test_minimax_m3_writes_untyped_members_as_json_text() -> None:
    """Elements carry no types: under `{"type": "object"}` with no properties, vLLM 0.33's
    reader (as ours) reads `<math>90` as "90" but JSON-decodes an object-typed element's text.
    So the writer keeps elements where the schema types them and JSON text where it does not."""
    untyped = _m3_call(f'{NS}<grades>{NS}<math>90{NS}</math>{NS}</grades>')
    assert _read("minimax_m3", untyped, TOOLS, 0) == [("lookup", {"grades": {"math": "90"}})]
    args = {"grades": {"math": 90}, "address": {"floor": 3}}
    assert render_calls("minimax_m3", [("lookup", args)], tools=TOOLS) == _m3_call(
        f'{NS}<grades>{{"math": 90}}{NS}</grades>{NS}<address>{NS}<floor>3{NS}</floor>{NS}</address>')
    # string members read back as elements: nothing to change
    assert render_calls("minimax_m3", [("lookup", {"grades": {"note": "A"}})], tools=TOOLS) == (
        _m3_call(f'{NS}<grades>{NS}<note>A{NS}</note>{NS}</grades>'))


@pytest.mark.parametrize("step", [0, 3])
def test_without_tools_values_read_as_before(step: int) -> None:
    """No schema: Glimmer JSON-decodes what parses, MiniMax-M3 keeps text."""
    args = {"user_id": "12345", "box": {"w": 4}, "tags": ["a"]}
    glimmer = render_calls("muse_glimmer", [("lookup", args)])
    assert _read("muse_glimmer", glimmer, None, step) == [
        ("lookup", {"user_id": 12345, "box": {"w": 4}, "tags": ["a"]})]
    m3 = render_calls("minimax_m3", [("lookup", args)])
    assert _read("minimax_m3", m3, None, step) == [
        ("lookup", {"user_id": "12345", "box": {"w": "4"}, "tags": ["a"]})]
