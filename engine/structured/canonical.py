"""Canonical constraints: the text a constraint compiles from, and the cache keys it.

`canonical_constraint(params, bound_numbers)` turns a `StructuredOutputsParams` into (kind,
canonical text): JSON schemas parsed, checked against their meta-schema (small ones here; large
ones only before xgrammar: llguidance checks a schema's structure itself), without unknown
formats (annotations), the formats one backend lacks as their patterns (format_patterns.py),
with provably disjoint `oneOf`s as `anyOf`, written compactly so the same
schema spelled differently compiles once; choices as an EBNF grammar; structural tags with
each json_schema element canonical the same way (a tool's parameters), bounded whitespace and
numbers.
"""

from __future__ import annotations

import functools
import json
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from thinkgate.engine.sampling_params import StructuredOutputsParams
from thinkgate.engine.structured.format_patterns import formats_as_patterns
from thinkgate.engine.structured.json_schema_rules import (
    MAX_SCHEMA_DEPTH,
    bound_schema_numbers,
    check_depth,
    tag_schemas,
    too_deep,
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
        check_depth(schema, "structured_outputs.json")
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
        check_depth(tag, "structured_outputs.structural_tag", 2 * MAX_SCHEMA_DEPTH)
        try:
            canonical = _canonical_tag(tag, bound_numbers, params.disable_any_whitespace)
        except ValueError:  # a schema nested too deep is named first, with its path
            for schema, path in tag_schemas(tag):
                check_depth(schema, f"structured_outputs.structural_tag{path}")
            raise
        text = json.dumps(canonical, separators=(",", ":"))
        _remember_tag(text, canonical)
        return kind, text
    return kind, str(getattr(params, kind))


# Distinct schemas whose canonical text is kept: `response_format`s and each tool's parameters
# (a request whose tools were seen before, in any order, skips their walks).
SCHEMA_CACHE_SIZE = 2048


@functools.lru_cache(maxsize=SCHEMA_CACHE_SIZE)
def _canonical_schema(text: str, check: bool = True) -> str:
    """A schema's canonical text from its compact text, once per distinct schema: every request
    computes its cache key, and most repeat a schema (the walks cost ms on large ones).
    `check`: small ones against their meta-schema here (a tool's parameters are checked only
    before xgrammar: llguidance checks a schema's structure itself, and 150 tools' checks cost
    ~150 ms)."""
    if check and len(text) <= META_CHECK_CHARS:  # larger: before xgrammar (grammar_compile.py)
        _check_schema(text)
    if '"format"' not in text and '"oneOf"' not in text:  # nothing below to do (most tools)
        return text
    schema = without_unknown_formats(json.loads(text), in_place=True)  # annotations
    schema = formats_as_patterns(schema, in_place=True)  # what one backend lacks or gets wrong
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


_SCALARS = (str, int, float, type(None))  # a tag's leaves: taken as they are


def _canonical_tag(node: Any, bound_numbers: bool, bound_whitespace: bool) -> Any:
    """A copy of a structural tag with each json_schema element canonical (as
    `_canonical_tag_schema`) and, with `bound_whitespace`, as `bound_json_whitespace` leaves it
    (one walk; strings and numbers, most of a tag, are taken as they are). ValueError at a
    schema nested deeper than MAX_SCHEMA_DEPTH (the caller names it) or not an object."""
    if isinstance(node, list | tuple):
        return [v if isinstance(v, _SCALARS) else _canonical_tag(v, bound_numbers,
                                                                 bound_whitespace)
                for v in node]
    if not isinstance(node, dict):
        return node
    if node.get("type") == "json_schema":
        schema = node.get("json_schema")
        if too_deep(schema):
            raise ValueError("a json_schema nests too deep")  # named by the caller
        node = {**node, "json_schema": _canonical_tag_schema(schema, bound_numbers)}
        return bound_json_whitespace(node) if bound_whitespace else node
    return {k: v if isinstance(v, _SCALARS) else _canonical_tag(v, bound_numbers,
                                                                bound_whitespace)
            for k, v in node.items()}


def _canonical_tag_schema(schema: Any, bound_numbers: bool) -> Any:
    """A structural tag's json_schema element as a schema of `json`, numbers bounded with
    `bound_numbers` (each distinct one worked out once: a tool's parameters)."""
    if not isinstance(schema, dict | bool):
        raise ValueError(f"a structural tag's json_schema must be a JSON schema object, got "
                         f"{short(json.dumps(schema))}")
    return _tag_schema(json.dumps(schema, separators=(",", ":")), bound_numbers)


class CanonicalSchema(dict):
    """A structural tag's canonical schema with its compact text (`text`: what
    `json.dumps(schema, separators=(",", ":"))` writes), so a compile takes the text without
    writing the schema out again. Shared by every tag that holds it: never mutated."""

    __slots__ = ("text",)


@functools.lru_cache(maxsize=SCHEMA_CACHE_SIZE)
def _tag_schema(text: str, bound_numbers: bool) -> Any:
    """The canonical schema (a `CanonicalSchema`, or a boolean schema), shared by every tag
    that holds it: never mutated (tags are written out as text, and each rewrite after this
    copies)."""
    text = _canonical_schema(text, False)
    schema = json.loads(text)
    # `bound_schema_numbers` gives a number with one bound the other: nothing to do without one
    bounded = ('"integer"' in text or '"number"' in text) and any(
        f'"{key}"' in text for key in ("minimum", "maximum", "exclusiveMinimum",
                                       "exclusiveMaximum"))
    if bound_numbers and bounded:
        schema = bound_schema_numbers(schema)
        text = json.dumps(schema, separators=(",", ":"))
    if not isinstance(schema, dict):
        return schema
    canonical = CanonicalSchema(schema)
    canonical.text = text
    return canonical


# The last few structural tags made canonical, by their text: the compile that follows takes
# the text (the cache key) and gets the tag back without parsing it again (~0.5 ms for 150 tools).
_RECENT_TAGS: OrderedDict[str, Any] = OrderedDict()
_RECENT_TAGS_LOCK = threading.Lock()
_RECENT_TAGS_SIZE = 8


def _remember_tag(text: str, tag: Any) -> None:
    with _RECENT_TAGS_LOCK:
        _RECENT_TAGS[text] = tag
        _RECENT_TAGS.move_to_end(text)
        if len(_RECENT_TAGS) > _RECENT_TAGS_SIZE:
            _RECENT_TAGS.popitem(last=False)


def canonical_tag(text: str) -> Any:
    """The structural tag whose canonical text is `text` (as `json.loads(text)`; shared with the
    per-schema caches, so never to be mutated)."""
    with _RECENT_TAGS_LOCK:
        tag = _RECENT_TAGS.get(text)
    return json.loads(text) if tag is None else tag


def _load_json(value: Any, name: str) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError as err:
        raise ValueError(f"structured_outputs.{name} is not valid JSON ({err}): "
                         f"{short(value)}") from None


def clear_schema_caches() -> None:
    """Forget every schema's canonical text and meta-schema check (benchmarks' cold runs)."""
    _canonical_schema.cache_clear()
    _tag_schema.cache_clear()
    _check_schema.cache_clear()
    with _RECENT_TAGS_LOCK:
        _RECENT_TAGS.clear()


def schema_cache_stats() -> tuple[int, int]:
    """(distinct schemas whose canonical text is kept, lookups that found one): a tool's
    parameters seen before (in any tool set, in any order) are worked out once."""
    infos = (_canonical_schema.cache_info(), _tag_schema.cache_info())
    return sum(i.currsize for i in infos), sum(i.hits for i in infos)


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
