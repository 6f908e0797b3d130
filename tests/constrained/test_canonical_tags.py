"""Structural tags made canonical in one walk (engine/structured/canonical.py, issue 36): the tag
the compile gets back by its text is the text's own reading, each schema carries its compact
text, number bounds and whitespace bounds are as before, and a schema nested too deep is named
before any other fault of the tag."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from thinkgate.engine.sampling_params import StructuredOutputsParams as SO
from thinkgate.engine.structured import canonical
from thinkgate.engine.structured.canonical import (
    CanonicalSchema,
    canonical_constraint,
    canonical_tag,
)
from thinkgate.engine.structured.json_schema_rules import bound_schema_numbers, tag_schemas
from thinkgate.engine.structured.lark_tags import lark_string, tag_lark
from thinkgate.engine.structured.tool_constraints import chat_constraint

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {
            "city": {"type": "string", "description": "the city"},
            "days": {"type": "integer", "minimum": 1},
            "unit": {"type": "string", "enum": ["c", "f"]},
            "when": {"type": "string", "format": "date"},
            "note": {"type": "string", "format": "my-own-format"}},
        "required": ["city"]}}},
    {"type": "function", "function": {"name": "ratio", "parameters": {
        "type": "object", "properties": {"x": {"type": "number", "maximum": 2.5},
                                         "tags": {"type": "array", "items": {"type": "string"}}},
        "required": ["x"]}}},
    {"type": "function", "function": {"name": "noop"}},
]


@pytest.mark.parametrize("fmt", ["hermes", "llama3_json", "mistral", "pythonic", "qwen3_coder"])
@pytest.mark.parametrize("bound", [True, False])
def test_the_kept_tag_is_the_texts_reading(fmt: str, bound: bool) -> None:
    canonical.clear_schema_caches()
    kind, text = canonical_constraint(chat_constraint(fmt, TOOLS, "required", None), bound)
    assert kind == "structural_tag"
    tag = canonical_tag(text)
    assert tag == json.loads(text)
    assert json.dumps(tag, separators=(",", ":")) == text
    for schema, _ in tag_schemas(tag):
        if isinstance(schema, CanonicalSchema):
            assert schema.text == json.dumps(schema, separators=(",", ":"))
    canonical.clear_schema_caches()  # forgotten: read from the text
    assert canonical_tag(text) == tag


def test_schemas_are_bounded_and_stripped_as_before() -> None:
    canonical.clear_schema_caches()
    _, text = canonical_constraint(chat_constraint("hermes", TOOLS, "required", None), True)
    schemas = {json.dumps(s, sort_keys=True) for s, _ in tag_schemas(json.loads(text))}
    weather = TOOLS[0]["function"]["parameters"]
    expected = bound_schema_numbers(json.loads(json.dumps(weather)))
    del expected["properties"]["note"]["format"]  # an unknown format is an annotation
    assert json.dumps(expected, sort_keys=True) in schemas
    assert "maximum" in expected["properties"]["days"]  # one bound gets the other
    ratio = TOOLS[1]["function"]["parameters"]
    assert json.dumps(bound_schema_numbers(ratio), sort_keys=True) in schemas
    # without bounded numbers the schemas stay as given
    _, text = canonical_constraint(chat_constraint("hermes", TOOLS, "required", None), False)
    assert '"minimum":1,"maximum"' not in text
    # whitespace bounds on every json_schema element of a compact request
    tag = json.loads(text)
    nodes = [n for n in _nodes(tag) if n.get("type") == "json_schema"]
    assert nodes and all(n["max_whitespace_cnt"] == 1 for n in nodes)


def _nodes(node: Any) -> list[dict[str, Any]]:
    if isinstance(node, list):
        return [found for v in node for found in _nodes(v)]
    if not isinstance(node, dict):
        return []
    return [node, *(found for v in node.values() for found in _nodes(v))]


def _nested(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


def test_a_schema_too_deep_is_named_before_other_faults() -> None:
    tag = {"type": "structural_tag", "format": {"type": "sequence", "elements": [
        {"type": "json_schema", "json_schema": 5},
        {"type": "json_schema", "json_schema": _nested(40)}]}}
    with pytest.raises(ValueError, match=r"structural_tag/format/elements/1/json_schema nests "
                                         r"deeper than 64 levels"):
        canonical_constraint(SO(structural_tag=tag))
    tag["format"]["elements"].pop()
    with pytest.raises(ValueError, match="must be a JSON schema object"):
        canonical_constraint(SO(structural_tag=tag))
    deeper = {"type": "structural_tag", "format": {"type": "json_schema",
                                                   "json_schema": _nested(70)}}
    with pytest.raises(ValueError, match="structural_tag nests deeper than 128 levels"):
        canonical_constraint(SO(structural_tag=deeper))


def test_compiles_from_the_kept_tag_and_from_its_text_write_the_same_lark() -> None:
    canonical.clear_schema_caches()
    _, text = canonical_constraint(chat_constraint("hermes", TOOLS, "required", None), True)

    def json_text(schema: Any) -> str:
        return (schema.text if isinstance(schema, CanonicalSchema)
                else json.dumps(schema, separators=(",", ":")))

    special = {"<tool_call>": 8002, "</tool_call>": 8003}
    assert (tag_lark(canonical_tag(text), special, json_text)
            == tag_lark(json.loads(text), special, json_text))


def _lark_string_by_hand(text: str) -> str:
    out = []
    for ch in text:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch in "\n\t\r":
            out.append({"\n": "\\n", "\t": "\\t", "\r": "\\r"}[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def test_lark_strings_escape_quotes_backslashes_and_controls() -> None:
    chars = [chr(c) for c in range(0x90)] + ["é", "中", "\U0001F600"]
    rng = random.Random(36)
    for _ in range(2000):
        text = "".join(rng.choice(chars) for _ in range(rng.randint(0, 12)))
        assert lark_string(text) == _lark_string_by_hand(text)


def test_get_entry_takes_the_key_prefetch_worked_out(monkeypatch: pytest.MonkeyPatch) -> None:
    from thinkgate.engine.demo import demo_model_path
    from thinkgate.engine.structured import grammar_compile
    from thinkgate.engine.structured.grammar import Grammar
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(demo_model_path())
    g = Grammar(tok, -(-len(tok) // 64) * 64, [0, 2], max_num_seqs=1, backend="guidance")
    try:
        calls: list[Any] = []
        real = grammar_compile.canonical_constraint
        monkeypatch.setattr(grammar_compile, "canonical_constraint",
                            lambda p, bound: calls.append(p) or real(p, bound))
        params = chat_constraint("hermes", TOOLS, "required", None)
        future = g.cache.prefetch(params)
        assert len(calls) == 1
        if future is not None:
            future.result()
        first = g.cache.get_entry(params)  # the request prefetch started: no second walk
        assert len(calls) == 1
        assert g.cache.get_entry(params) is first  # taken once: later lookups work it out
        assert len(calls) == 2
        other = chat_constraint("hermes", TOOLS[:1], "required", None)
        g.cache.prefetch(params)
        assert g.cache.get_entry(other) is not first  # another params object: its own key
        assert len(calls) == 4
    finally:
        g.close()
