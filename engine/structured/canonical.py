"""Canonical constraints: the text a constraint compiles from, and the cache keys it.

`canonical_constraint(params, bound_numbers)` turns a `StructuredOutputsParams` into (kind,
canonical text): JSON schemas parsed, checked against their meta-schema (small ones here; large
ones only before xgrammar: llguidance checks a schema's structure itself), without unknown
formats (annotations), with provably disjoint `oneOf`s as `anyOf`, written compactly so the same
schema spelled differently compiles once; choices as an EBNF grammar; structural tags with
bounded whitespace and numbers.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import Any

from thinkgate.engine.sampling_params import StructuredOutputsParams
from thinkgate.engine.structured.json_schema_rules import (
    bound_schema_numbers,
    without_unknown_formats,
)
from thinkgate.engine.structured.schema_rewrites import disjoint_one_of
from thinkgate.engine.structured.xgrammar_backend import short

# JSON schemas up to this long are checked against the meta-schema before any backend (a bad
# one fails at once, with jsonschema's message); longer ones only before xgrammar: the check
# costs 10-300 ms on large schemas, and llguidance checks a schema's structure itself.
META_CHECK_CHARS = 2048


def canonical_constraint(params: StructuredOutputsParams,
                         bound_numbers: bool = True) -> tuple[str, str]:
    """(kind, canonical text) of a constraint: a JSON schema checked against its meta-schema,
    without unknown formats, disjoint `oneOf`s as `anyOf`; a structural tag with bounded
    whitespace and (with `bound_numbers`) bounded numbers."""
    if params.is_options_only:
        raise ValueError("structured_outputs has options but no constraint (json, json_object, "
                         "regex, choice, grammar or structural_tag); options alone go with "
                         "response_format or tool_choice in a chat request")
    kind = params.kind
    if kind == "json":
        schema = _load_json(params.json, "json")
        if not isinstance(schema, dict | bool):
            raise ValueError(f"structured_outputs.json must be a JSON schema object, got "
                             f"{short(json.dumps(schema))}")
        return kind, _canonical_schema(json.dumps(schema, separators=(",", ":")))
    if kind == "json_object":
        return kind, '{"type":"object"}'
    if kind == "choice":
        return kind, choice_ebnf(params.choice or [])
    if kind == "structural_tag":
        tag = _load_json(params.structural_tag, "structural_tag")
        if params.disable_any_whitespace:
            tag = bound_json_whitespace(tag)
        if bound_numbers:
            tag = bound_tag_numbers(tag)
        return kind, json.dumps(tag, separators=(",", ":"))
    return kind, str(getattr(params, kind))


@functools.lru_cache(maxsize=256)
def _canonical_schema(text: str) -> str:
    """A schema's canonical text from its compact text, once per distinct schema: every request
    computes its cache key, and most repeat a schema (the walks cost ms on large ones)."""
    if len(text) <= META_CHECK_CHARS:  # larger ones: before xgrammar only (grammar_compile.py)
        _check_schema(text)
    schema = without_unknown_formats(json.loads(text))  # annotations: nothing to enforce
    schema = disjoint_one_of(schema)  # a oneOf no instance can match twice is an anyOf
    # bounded numbers: each backend its own way (xgrammar: schema ranges and its number rules;
    # llguidance: the matcher counts digits)
    return json.dumps(schema, separators=(",", ":"))


def choice_ebnf(choices: Sequence[str]) -> str:
    """An EBNF grammar matching exactly one of `choices` (JSON string escapes are valid EBNF)."""
    return "root ::= " + " | ".join(json.dumps(c, ensure_ascii=False) for c in choices)


def bound_json_whitespace(node: Any) -> Any:
    """A copy of a structural tag whose JSON parts allow at most one whitespace run character
    between tokens (xgrammar's default is unbounded, letting a model pad to max_tokens)."""
    if isinstance(node, list):
        return [bound_json_whitespace(v) for v in node]
    if not isinstance(node, dict):
        return node
    if node.get("type") == "json_schema":  # its "json_schema" value is a schema: keep it as is
        return {"max_whitespace_cnt": 1, **node} if node.get("max_whitespace_cnt") is None else node
    return {k: bound_json_whitespace(v) for k, v in node.items()}


def bound_tag_numbers(node: Any) -> Any:
    """A copy of a structural tag whose json_schema elements' numbers are bounded."""
    if isinstance(node, list):
        return [bound_tag_numbers(v) for v in node]
    if not isinstance(node, dict):
        return node
    if node.get("type") == "json_schema":
        return {**node, "json_schema": bound_schema_numbers(node.get("json_schema"))}
    return {k: bound_tag_numbers(v) for k, v in node.items()}


def _load_json(value: Any, name: str) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError as err:
        raise ValueError(f"structured_outputs.{name} is not valid JSON ({err}): "
                         f"{short(value)}") from None


def warm_meta_schema_check() -> None:
    """Build jsonschema's meta-schema validators once (the first check costs ~0.25 s)."""
    _check_schema('{"$defs":{"a":{"type":"string"}},"$ref":"#/$defs/a"}')


@functools.lru_cache(maxsize=256)
def _check_schema(text: str) -> None:
    """Validate a schema (canonical JSON text) against its meta-schema, once per distinct schema:
    a meta-schema check costs milliseconds, and most requests repeat a schema."""
    import jsonschema

    schema = json.loads(text)
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as err:
        raise ValueError(f"invalid structured_outputs.json schema: {err.message} "
                         f"(at {list(err.absolute_path)})") from None
