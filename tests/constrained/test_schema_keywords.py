"""Every JSON-Schema (draft 2020-12) keyword and format: enforced by the grammar, or rejected.

Enforced: the compiled grammar refuses an instance that breaks the keyword, and sampled outputs
on the demo model validate. Rejected: `ValueError` naming the keyword and its JSON path (HTTP
400 on the server, tests/api/test_structured_server.py), unless `best_effort`.
"""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema
import pytest
import xgrammar as xgr
from thinkgate import SamplingParams, StructuredOutputsParams
from thinkgate.engine.structured.grammar_compile import GrammarCompileCache

INT = {"type": "integer", "minimum": 0, "maximum": 9}
OBJ_AB = {"a": {"type": "integer", "minimum": 0, "maximum": 9}, "b": {"type": "boolean"}}

# keyword -> (schema using it, an instance that breaks it: the grammar must refuse it)
ENFORCED: dict[str, tuple[Any, str]] = {
    "type": ({"type": "boolean"}, '1'),
    "enum": ({"enum": ["red", 3]}, '"blue"'),
    "const": ({"const": "x"}, '"y"'),
    "properties": ({"type": "object", "properties": {"a": INT}}, '{"a": "z"}'),
    "required": ({"type": "object", "properties": OBJ_AB, "required": ["b"]}, '{"a": 1}'),
    "additionalProperties": ({"type": "object", "properties": OBJ_AB,
                              "additionalProperties": False}, '{"c": 1}'),
    "items": ({"type": "array", "items": INT, "maxItems": 3}, '["x"]'),
    "prefixItems": ({"type": "array", "prefixItems": [{"type": "boolean"}, INT],
                     "items": False}, '[1, true]'),
    "minItems": ({"type": "array", "items": INT, "minItems": 2, "maxItems": 3}, '[1]'),
    "maxItems": ({"type": "array", "items": INT, "maxItems": 2}, '[1, 2, 3]'),
    "minLength": ({"type": "string", "minLength": 3, "maxLength": 5}, '"ab"'),
    "maxLength": ({"type": "string", "maxLength": 3}, '"abcd"'),
    "pattern": ({"type": "string", "pattern": "^[a-c]{2}[0-9]$"}, '"zz1"'),
    "minimum": ({"type": "integer", "minimum": 5, "maximum": 99}, '4'),
    "maximum": ({"type": "number", "minimum": 0, "maximum": 2.5}, '2.6'),
    "exclusiveMinimum": ({"type": "integer", "exclusiveMinimum": 3, "maximum": 9}, '3'),
    "exclusiveMaximum": ({"type": "integer", "minimum": 0, "exclusiveMaximum": 3}, '3'),
    "multipleOf": ({"type": "integer", "multipleOf": 7}, '8'),
    "minProperties": ({"type": "object", "properties": OBJ_AB, "minProperties": 1}, '{}'),
    "maxProperties": ({"type": "object", "properties": OBJ_AB, "maxProperties": 1},
                      '{"a": 1, "b": true}'),
    "anyOf": ({"anyOf": [{"type": "boolean"}, {"type": "null"}]}, '1'),
    "$ref": ({"$defs": {"d": INT}, "$ref": "#/$defs/d"}, '"x"'),
    "$defs": ({"$defs": {"d": {"type": "boolean"}}, "$ref": "#/$defs/d"}, '1'),
    "definitions": ({"definitions": {"d": {"type": "null"}}, "$ref": "#/definitions/d"}, '1'),
    "unevaluatedItems": ({"type": "array", "prefixItems": [INT], "unevaluatedItems": False},
                         '[1, 2]'),
    "unevaluatedProperties": ({"type": "object", "properties": {"a": INT},
                               "unevaluatedProperties": False}, '{"a": 1, "b": 2}'),
    "format": ({"type": "string", "format": "date"}, '"tomorrow"'),
}
ANNOTATIONS = ["$schema", "$id", "$comment", "$vocabulary", "title", "description", "default",
               "examples", "deprecated", "readOnly", "writeOnly", "contentEncoding",
               "contentMediaType", "contentSchema"]
ANNOTATION_VALUES: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema", "$id": "https://x.test/s",
    "$comment": "c", "$vocabulary": {"https://json-schema.org/draft/2020-12/vocab/core": True},
    "title": "t", "description": "d", "default": True, "examples": [True], "deprecated": False,
    "readOnly": False, "writeOnly": False, "contentEncoding": "base64",
    "contentMediaType": "text/plain", "contentSchema": {"type": "string"},
}
# keyword -> schema the grammar cannot enforce (the error must name keyword and path)
REJECTED: dict[str, tuple[Any, str]] = {
    "uniqueItems": ({"type": "array", "items": INT, "uniqueItems": True}, "/"),
    "contains": ({"type": "array", "items": INT, "contains": {"const": 5}}, "/"),
    "minContains": ({"type": "array", "items": INT, "contains": {"const": 5},
                     "minContains": 2}, "/"),
    "maxContains": ({"type": "array", "items": INT, "contains": {"const": 5},
                     "maxContains": 1}, "/"),
    "patternProperties": ({"type": "object", "patternProperties": {"^x": INT}}, "/"),
    "propertyNames": ({"type": "object", "propertyNames": {"maxLength": 2}}, "/"),
    "dependentRequired": ({"type": "object", "properties": OBJ_AB,
                           "dependentRequired": {"a": ["b"]}}, "/"),
    "dependentSchemas": ({"type": "object", "properties": OBJ_AB,
                          "dependentSchemas": {"a": {"required": ["b"]}}}, "/"),
    "if": ({"type": "integer", "if": {"minimum": 5}, "then": {"maximum": 7}}, "/"),
    "then": ({"type": "integer", "then": {"maximum": 7}}, "/"),
    "else": ({"type": "integer", "else": {"maximum": 7}}, "/"),
    "not": ({"type": "integer", "not": {"const": 3}}, "/"),
    "oneOf": ({"oneOf": [{"type": "integer"}, {"minimum": 5}]}, "/"),
    "allOf": ({"allOf": [{"type": "integer"}, {"minimum": 5}]}, "/"),
    "$anchor": ({"$defs": {"x": {"$anchor": "n", "type": "integer"}}, "$ref": "#n"},
                "/$defs/x"),
    "$dynamicRef": ({"$dynamicAnchor": "n", "type": "object",
                     "properties": {"c": {"$dynamicRef": "#n"}}}, "/properties/c"),
    "$dynamicAnchor": ({"$dynamicAnchor": "n", "type": "integer"}, "/"),
}
# format -> (an instance of it, one that is not)
FORMATS_ENFORCED = {
    "date-time": ('"2024-01-31T12:00:00Z"', '"yesterday"'), "date": ('"2024-01-31"', '"2024-13"'),
    "time": ('"12:00:00Z"', '"noon"'), "duration": ('"P1D"', '"1 day"'),
    "email": ('"a@b.co"', '"nobody"'), "hostname": ('"ab.example"', '"a_b"'),
    "ipv4": ('"10.0.0.1"', '"1.2.3"'), "ipv6": ('"::1"', '"1.2.3.4"'),
    "uri": ('"https://a.test/x"', '"no scheme"'), "uri-reference": ('"/a/b"', '"a b"'),
    "uuid": ('"123e4567-e89b-12d3-a456-426614174000"', '"1234"'),
    "uri-template": ('"/a/{b}"', '"{"'), "json-pointer": ('"/a/b"', '"a/b"'),
    "relative-json-pointer": ('"0/a"', '"/a"'),
}
# formats JSON Schema defines that xgrammar does not check: refused
FORMATS_REJECTED = ["idn-email", "idn-hostname", "iri", "iri-reference", "regex"]

PROMPT = ("<|im_start|>user\nAnswer as JSON.<|im_end|>\n<|im_start|>assistant\n"
          "<think>\n\n</think>\n\n")


@pytest.fixture(scope="module")
def cache() -> GrammarCompileCache:
    info = xgr.TokenizerInfo([chr(c) for c in range(32, 127)])
    return GrammarCompileCache(info, "ascii")


def _accepts(cache: GrammarCompileCache, schema: Any, text: str) -> bool:
    m = xgr.GrammarMatcher(cache.get(StructuredOutputsParams(json=schema)),
                           terminate_without_stop_token=True)
    return m.accept_string(text) and m.is_terminated()


def test_the_tables_cover_every_draft_2020_12_keyword() -> None:
    from jsonschema_specifications import REGISTRY

    keywords: set[str] = set()
    for vocab in ("core", "applicator", "unevaluated", "validation", "meta-data",
                  "format-annotation", "content"):
        meta = REGISTRY[f"https://json-schema.org/draft/2020-12/meta/{vocab}"].contents
        keywords |= set(meta.get("properties", {}))
    covered = set(ENFORCED) | set(ANNOTATIONS) | set(REJECTED)
    assert keywords - covered == set()


@pytest.mark.parametrize("keyword", sorted(ENFORCED))
def test_enforced_keyword_refuses_a_breaking_instance(cache: GrammarCompileCache,
                                                      keyword: str) -> None:
    schema, bad = ENFORCED[keyword]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(json.loads(bad), schema, format_checker=jsonschema.FormatChecker())
    assert not _accepts(cache, schema, bad)


@pytest.mark.parametrize("keyword", ANNOTATIONS)
def test_annotations_compile(cache: GrammarCompileCache, keyword: str) -> None:
    schema = {"type": "boolean", keyword: ANNOTATION_VALUES[keyword]}
    assert _accepts(cache, schema, "true") and not _accepts(cache, schema, "1")


@pytest.mark.parametrize("keyword", sorted(REJECTED))
def test_unenforced_keyword_is_rejected_with_its_path(cache: GrammarCompileCache,
                                                      keyword: str) -> None:
    schema, path = REJECTED[keyword]
    with pytest.raises(ValueError, match=re.escape(f"{keyword} at {path} (")):
        cache.get(StructuredOutputsParams(json=schema))
    cache.get(StructuredOutputsParams(json=schema, best_effort=True))  # compiles when asked


def test_nested_path_and_other_unenforced_uses(cache: GrammarCompileCache) -> None:
    schema = {"type": "object", "properties": {"tags": {
        "type": "array", "items": {"type": "string"}, "uniqueItems": True}}}
    with pytest.raises(ValueError, match="uniqueItems at /properties/tags"):
        cache.get(StructuredOutputsParams(json=schema))
    for bad, word in [({"minimum": 3}, "minimum"),  # no numeric type: basic_any
                      ({"type": "number", "multipleOf": 0.5}, "multipleOf"),
                      ({"type": "integer", "multipleOf": 3, "maximum": 9}, "multipleOf"),
                      ({"type": "object", "additionalProperties": INT}, "additionalProperties"),
                      ({"$ref": "https://x.test/other.json"}, "[$]ref"),
                      ({"type": "object", "required": ["a"]}, "required")]:
        with pytest.raises(ValueError, match=word):
            cache.get(StructuredOutputsParams(json=bad))


@pytest.mark.parametrize("fmt", sorted(FORMATS_ENFORCED))
def test_enforced_formats(cache: GrammarCompileCache, fmt: str) -> None:
    schema = {"type": "string", "format": fmt}
    good, bad = FORMATS_ENFORCED[fmt]
    assert _accepts(cache, schema, good) and not _accepts(cache, schema, bad)


def _check_format(fmt: str, value: str) -> None:
    """Standard-library checks of the formats that have one (jsonschema's format checker needs
    optional packages for most formats and passes anything without them)."""
    import datetime
    import ipaddress
    import uuid

    checks = {"date": datetime.date.fromisoformat, "ipv4": ipaddress.IPv4Address,
              "ipv6": ipaddress.IPv6Address, "uuid": uuid.UUID,
              "date-time": lambda v: datetime.datetime.fromisoformat(v.replace("Z", "+00:00")),
              "time": lambda v: datetime.time.fromisoformat(v.replace("Z", "+00:00")),
              "email": lambda v: v.index("@")}
    if fmt in checks:
        checks[fmt](value)


@pytest.mark.parametrize("fmt", FORMATS_REJECTED)
def test_unchecked_formats_are_rejected(cache: GrammarCompileCache, fmt: str) -> None:
    with pytest.raises(ValueError, match=f"format at / .*{'format'}"):
        cache.get(StructuredOutputsParams(json={"type": "string", "format": fmt}))


@pytest.mark.parametrize("fmt", ["float", "no-such", "phone"])
def test_unknown_formats_are_annotations(cache: GrammarCompileCache, fmt: str) -> None:
    """A format JSON Schema does not define asserts nothing (the spec): any string is valid."""
    schema = {"type": "string", "format": fmt}
    assert _accepts(cache, schema, '"anything at all"')
    assert not _accepts(cache, schema, "12")  # the type still holds


def test_enforced_keywords_sampled_on_the_demo_model_validate(llm: Any) -> None:
    """Each enforced keyword's schema (and each enforced format), two samples at temperature
    1, completed before max_tokens: every output validates."""
    schemas = [s for s, _ in ENFORCED.values()]
    schemas += [{"type": "string", "format": f} for f in sorted(FORMATS_ENFORCED)]
    params = [SamplingParams(temperature=1.0, seed=seed, max_tokens=48,
                             structured_outputs=StructuredOutputsParams(
                                 json=s, complete_before_max_tokens=True))
              for s in schemas for seed in (0, 1)]
    outs = llm.generate([PROMPT] * len(params), params, use_tqdm=False)
    for out, p in zip(outs, params):
        schema = p.structured_outputs.json
        value = json.loads(out.outputs[0].text)
        jsonschema.validate(value, schema)
        if "format" in schema:
            _check_format(schema["format"], value)
