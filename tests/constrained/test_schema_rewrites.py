"""engine/structured/schema_rewrites.py: each rewrite accepts exactly what the original schema
accepts (jsonschema is the judge, on every object over a small key set and on one value of each
type), and llguidance compiles what it refused before."""

from __future__ import annotations

import itertools
import json
from typing import Any

import jsonschema
import pytest
from thinkgate.engine.structured.schema_rewrites import rewrite_for_guidance

KEYS = ["radius", "length", "width", "base", "height", "a", "b"]
VALUES: list[Any] = [None, True, 3, 2.5, "s", [1], {}]
INSTANCES: list[Any] = VALUES + [dict.fromkeys(subset, 1) for n in range(len(KEYS) + 1)
                                 for subset in itertools.combinations(KEYS, n)]

SCHEMAS = {
    "oneOf of required sets": {"type": "object", "oneOf": [
        {"required": ["radius"]}, {"required": ["length", "width"]},
        {"required": ["base", "height"]}]},
    "oneOf with a subset branch": {"type": "object", "oneOf": [
        {"required": ["a"]}, {"required": ["a", "b"]}]},
    "dependentRequired": {"type": "object", "dependentRequired": {"a": ["b"], "base": ["height"]}},
    "dependencies (lists)": {"dependencies": {"radius": ["length", "width"]}},
    "not type": {"not": {"type": ["boolean", "string"]}},
    "not number": {"not": {"type": "number"}},
    "not required": {"not": {"required": ["a", "b"]}},
    "not required, typed": {"type": ["object", "string"], "not": {"required": ["a"]}},
}


def _valid(schema: Any, instance: Any) -> bool:
    # `dependencies` is draft 7's keyword (2020-12 split it into dependentRequired/Schemas)
    draft = (jsonschema.Draft7Validator if "dependencies" in json.dumps(schema)
             else jsonschema.Draft202012Validator)
    return draft(schema).is_valid(instance)


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_a_rewrite_accepts_exactly_what_the_original_accepts(name: str) -> None:
    schema = SCHEMAS[name]
    rewritten = rewrite_for_guidance(schema)
    assert rewritten != schema  # it was rewritten...
    for kw in ("oneOf", "not", "dependentRequired", "dependencies"):
        assert kw not in json.dumps(rewritten).replace('"type"', "")  # ...into other keywords
    for instance in INSTANCES:
        assert _valid(rewritten, instance) == _valid(schema, instance), (instance, rewritten)


def test_the_narrower_one_of_rewrite_never_accepts_more() -> None:
    """Object branches told apart by required keys: each branch lacks the other's key. Every
    instance the rewrite accepts is valid; the plain instance of each branch still is."""
    schema = {"oneOf": [
        {"type": "object", "required": ["a"], "properties": {"a": {"type": "integer"}}},
        {"type": "object", "required": ["b", "radius"],
         "properties": {"a": {"type": "string"}}}]}
    rewritten = rewrite_for_guidance(schema)
    assert "oneOf" not in rewritten
    for instance in INSTANCES:
        if _valid(rewritten, instance):
            assert _valid(schema, instance), instance
    assert _valid(rewritten, {"a": 1}) and _valid(rewritten, {"b": 1, "radius": 2})


@pytest.mark.parametrize("schema", [
    {"oneOf": [{"required": ["a"]}, {"required": ["b"]}]},  # not only objects
    {"not": {"type": ["integer", "string"]}},  # 1.5 is allowed, 1 is not: no type list says it
    {"not": {"enum": ["x"]}},
    {"dependencies": {"a": {"required": ["b"]}}},  # the schema form
])
def test_what_has_no_exact_rewrite_is_left_alone(schema: dict[str, Any]) -> None:
    assert rewrite_for_guidance(schema) == schema


def test_llguidance_compiles_the_rewrites() -> None:
    from thinkgate.engine.demo import demo_model_path
    from thinkgate.engine.structured.guidance_backend import GuidanceBackend
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(demo_model_path())
    backend = GuidanceBackend(tok, 8192, [0, 2])
    for schema in SCHEMAS.values():
        backend.compile("json", json.dumps(schema), False)  # ValueError if refused
    with pytest.raises(ValueError, match="oneOf"):  # the original is refused
        backend.compile("json", json.dumps({"oneOf": [{"required": ["a"]},
                                                      {"required": ["b"]}]}), False)


def test_pattern_properties_are_free_keys() -> None:
    """llguidance lets a key that a `patternProperties` pattern matches repeat: the
    repeated-key checks must watch such objects even when no other key may appear."""
    from thinkgate.engine.structured.json_schema_rules import allows_free_keys

    assert allows_free_keys({"type": "object", "additionalProperties": False,
                             "patternProperties": {"^x-": {"type": "integer"}}})


def test_a_multiple_of_at_its_digit_limit_is_finished_by_one_digit() -> None:
    """An integer `multipleOf: 7` at llguidance's digit bound (16) that is not yet a multiple
    (97000...) may only take a digit after which it can end, not run on to max_tokens."""
    import torch
    from thinkgate.engine.demo import demo_model_path
    from thinkgate.engine.structured.guidance_backend import GuidanceBackend
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(demo_model_path())
    backend = GuidanceBackend(tok, 8192, [tok.convert_tokens_to_ids("<|im_end|>")])
    compiled, _ = backend.compile("json", json.dumps({"type": "integer", "multipleOf": 7}), False)
    matcher = backend.new_matcher(compiled)
    digits = {tok.convert_tokens_to_ids(d): d for d in "0123456789"}
    ids = {d: i for i, d in digits.items()}
    for ch in "97" + "0" * 14:
        assert matcher.accept_token(ids[ch])
    row = torch.zeros((1, 8192 // 32), dtype=torch.int32)
    matcher.fill_next_token_bitmask(row)
    allowed = [t for t in range(8192) if int(row[0, t // 32]) >> (t % 32) & 1]
    endings = [d for i, d in digits.items() if int("97" + "0" * 14 + d) % 7 == 0]
    assert allowed and sorted(digits[t] for t in allowed) == sorted(endings)
