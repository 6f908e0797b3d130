"""What the JSON-schema grammar enforces, and bounded numbers.

xgrammar (0.2.9) turns a schema into a grammar but drops some keywords without a word: an
`uniqueItems` array repeats items, a `patternProperties` object repeats keys, `not` is ignored.
`unenforced_keywords(schema)` walks a schema and lists every keyword the grammar would not
enforce, with its JSON path (`"uniqueItems at /properties/tags"`); the compile step rejects such a
schema with `ValueError` unless the request opts into best effort. The tables below are the
result of generating with xgrammar 0.2.9 (tests/constrained/test_schema_keywords.py checks each
row: enforced keywords validate, the others are rejected).

`bound_schema_numbers(schema)` gives every integer / number with only one schema bound the other
one (magnitude below 10**16), so xgrammar's range grammar keeps the digits finite; unbounded
numbers are bounded in the grammar text (`bound_number_rules`): at most 16 integer digits, 16
fraction digits and 3 exponent digits.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

MAX_INT_DIGITS = 16
MAX_FRACTION_DIGITS = 16
MAX_EXPONENT_DIGITS = 3
_NUMBER_LIMIT = 10**MAX_INT_DIGITS - 1

# Enforced by the grammar (outputs always satisfy them).
ENFORCED = frozenset({
    "type", "enum", "const", "properties", "required", "additionalProperties", "items",
    "prefixItems", "minItems", "maxItems", "minLength", "maxLength", "pattern", "minimum",
    "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "minProperties",
    "maxProperties", "anyOf", "$ref", "$defs", "definitions", "unevaluatedItems",
    "unevaluatedProperties", "format",
})
# Annotations: they assert nothing about an instance, so there is nothing to enforce.
ANNOTATIONS = frozenset({
    "$schema", "$id", "$comment", "$vocabulary", "title", "description", "default", "examples",
    "deprecated", "readOnly", "writeOnly", "contentEncoding", "contentMediaType",
    "contentSchema",
})
# Not enforced by xgrammar 0.2.9: rejected unless the request asks for best effort.
NOT_ENFORCED = {
    "uniqueItems": "arrays may repeat items",
    "contains": "the grammar does not require a matching item",
    "minContains": "the grammar does not count matching items",
    "maxContains": "the grammar does not count matching items",
    "patternProperties": "keys may repeat and other keys may appear",
    "propertyNames": "keys may repeat",
    "dependentRequired": "ignored by the grammar",
    "dependentSchemas": "ignored by the grammar",
    "dependencies": "ignored by the grammar",
    "if": "ignored by the grammar", "then": "ignored by the grammar",
    "else": "ignored by the grammar",
    "not": "ignored by the grammar",
    "oneOf": "treated as anyOf (more than one branch may match)",
    "allOf": "only the first branch's type is enforced",
    "$anchor": "references to anchors are not resolved",
    "$dynamicRef": "not resolved", "$dynamicAnchor": "not resolved",
    "additionalItems": "not supported",
}
ENFORCED_FORMATS = frozenset({
    "date-time", "date", "time", "duration", "email", "hostname", "ipv4", "ipv6", "uri",
    "uri-reference", "uuid", "uri-template", "json-pointer", "relative-json-pointer",
})
# The formats JSON Schema (draft 2020-12) defines. Any other `format` value is unknown: by the
# spec an annotation, which asserts nothing, so the backends drop it (`without_unknown_formats`).
# Defined formats a backend cannot check make it refuse the schema (idn-email, idn-hostname,
# iri, iri-reference, regex for xgrammar).
SPEC_FORMATS = ENFORCED_FORMATS | {"idn-email", "idn-hostname", "iri", "iri-reference", "regex"}

_ONE_SCHEMA = ("additionalProperties", "items", "contains", "propertyNames", "if", "then", "else",
               "not", "unevaluatedItems", "unevaluatedProperties", "additionalItems",
               "contentSchema")
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SCHEMA_LISTS = ("prefixItems", "allOf", "anyOf", "oneOf")
_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")


def subschemas(schema: Any, path: str = "") -> Iterator[tuple[dict[str, Any], str]]:
    """Every schema object inside `schema` (itself included) with its JSON pointer."""
    if not isinstance(schema, dict):
        return
    yield schema, path
    for key in _ONE_SCHEMA:
        value = schema.get(key)
        if isinstance(value, dict):
            yield from subschemas(value, f"{path}/{key}")
        elif isinstance(value, list) and key in ("items", "additionalItems"):
            for i, item in enumerate(value):
                yield from subschemas(item, f"{path}/{key}/{i}")
    for key in _SCHEMA_MAPS:
        value = schema.get(key)
        if isinstance(value, dict):
            for name, sub in value.items():
                yield from subschemas(sub, f"{path}/{key}/{_escape(name)}")
    for key in _SCHEMA_LISTS:
        value = schema.get(key)
        if isinstance(value, list):
            for i, sub in enumerate(value):
                yield from subschemas(sub, f"{path}/{key}/{i}")
    deps = schema.get("dependencies")
    if isinstance(deps, dict):
        for name, sub in deps.items():
            yield from subschemas(sub, f"{path}/dependencies/{_escape(name)}")


def unenforced_keywords(schema: Any) -> list[str]:
    """`"<keyword> at <json path> (<why>)"` for every keyword the grammar would not enforce."""
    found = []
    for sub, path in subschemas(schema):
        where = path or "/"
        for key, value in sub.items():
            why = _why_unenforced(sub, key, value)
            if why is not None:
                found.append(f"{key} at {where} ({why})")
    return found


def _why_unenforced(sub: dict[str, Any], key: str, value: Any) -> str | None:
    if key in NOT_ENFORCED:
        if key == "uniqueItems" and value is not True:
            return None
        if key == "allOf" and isinstance(value, list) and len(value) <= 1:
            return None
        return NOT_ENFORCED[key]
    types = sub.get("type")
    types = {t for t in types if isinstance(t, str)} if isinstance(types, list) else {types}
    numeric = bool(types & {"integer", "number"})
    if key in _BOUNDS + ("multipleOf",) and not numeric:
        return "applies to numbers, but the schema has no numeric type, so it is not enforced"
    if key == "multipleOf":
        if "integer" not in types or not isinstance(value, int) or isinstance(value, bool):
            return "enforced only for integers with an integer divisor"
        if any(b in sub for b in _BOUNDS):
            return "ignored by the grammar when the integer also has bounds"
    if key == "format" and value in SPEC_FORMATS and value not in ENFORCED_FORMATS:
        return "the grammar does not check this format"
    if key == "additionalProperties" and value is not False and value is not None:
        return "keys under additionalProperties may repeat"
    if key == "$ref" and not (isinstance(value, str) and value.startswith("#")):
        return "only local references (#...) are resolved"
    if key == "required" and isinstance(value, list):
        props = sub.get("properties") if isinstance(sub.get("properties"), dict) else {}
        extra = sub.get("additionalProperties")
        missing = [n for n in value if n not in props]
        if missing and (extra is False or extra is None):
            return f"names {missing} that are not in properties: the grammar never writes them"
    return None


def bound_schema_numbers(schema: Any) -> Any:
    """A copy of `schema` where each integer/number with one bound gets the other (|x| < 1e16).

    A schema bound takes precedence; a side is left open when the default would contradict it
    (e.g. `minimum: 1e20`), and `multipleOf` integers keep no range (xgrammar drops multipleOf
    when a range is given). Schemas with no bound at all keep xgrammar's number rules, which
    `bound_number_rules` bounds (the llguidance backend counts digits instead)."""
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    for key in _ONE_SCHEMA:
        value = schema.get(key)
        if isinstance(value, dict):
            out[key] = bound_schema_numbers(value)
        elif isinstance(value, list) and key in ("items", "additionalItems"):
            out[key] = [bound_schema_numbers(v) for v in value]
    for key in _SCHEMA_MAPS + ("dependencies",):
        if isinstance(schema.get(key), dict):
            out[key] = {n: bound_schema_numbers(s) for n, s in schema[key].items()}
    for key in _SCHEMA_LISTS:
        if isinstance(schema.get(key), list):
            out[key] = [bound_schema_numbers(v) for v in schema[key]]
    types = schema.get("type")
    types = {t for t in types if isinstance(t, str)} if isinstance(types, list) else {types}
    if not types & {"integer", "number"} or "multipleOf" in schema:
        return out
    low = [schema[k] for k in ("minimum", "exclusiveMinimum") if _is_num(schema.get(k))]
    high = [schema[k] for k in ("maximum", "exclusiveMaximum") if _is_num(schema.get(k))]
    if low and not high and max(low) < _NUMBER_LIMIT:
        out["maximum"] = _NUMBER_LIMIT
    if high and not low and min(high) > -_NUMBER_LIMIT:
        out["minimum"] = -_NUMBER_LIMIT
    return out


_RULE_REWRITES = [
    # integer part: one nonzero digit and at most 15 more
    (re.compile(r"^(basic_integer|basic_number_2) ::= (.*)\[1-9\] \[0-9\]\*(.*)$"),
     rf"\1 ::= \2[1-9] [0-9]{{0, {MAX_INT_DIGITS - 1}}}\3"),
    (re.compile(r"^(basic_number_3 ::= .*\"\.\" basic_number_digits)\{1, -1\}(.*)$"),
     rf"\1{{1, {MAX_FRACTION_DIGITS}}}\2"),
    (re.compile(r"^(basic_number_5 ::= .*\[eE\] basic_number_4 basic_number_digits)\{1, -1\}(.*)$"),
     rf"\1{{1, {MAX_EXPONENT_DIGITS}}}\2"),
]


def bound_number_rules(ebnf: str) -> str:
    """xgrammar's JSON grammar text with its number rules bounded (see the module docstring)."""
    lines = ebnf.split("\n")
    for i, line in enumerate(lines):
        if line.startswith("basic_"):
            for pattern, repl in _RULE_REWRITES:
                line = pattern.sub(repl, line)
            lines[i] = line
    return "\n".join(lines)


def _is_num(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)  # noqa: UP038


def _escape(name: str) -> str:
    return str(name).replace("~", "~0").replace("/", "~1")


def _unknown_format(sub: dict[str, Any]) -> bool:
    return "format" in sub and sub["format"] not in SPEC_FORMATS


def without_unknown_formats(schema: Any, in_place: bool = False) -> Any:
    """`schema` without the `format` values JSON Schema does not define (annotations): a copy
    when there are any, or `schema` itself changed with `in_place` (the caller owns it)."""
    if not any(_unknown_format(sub) for sub, _ in subschemas(schema)):
        return schema
    copy = schema if in_place else json.loads(json.dumps(schema))
    for sub, _ in subschemas(copy):
        if _unknown_format(sub):
            del sub["format"]
    return copy


def allows_free_keys(schema: Any) -> bool:
    """Whether an instance of `schema` may hold an object with keys the schema does not list
    (additional properties allowed, or a value of any type): those keys could repeat, so the
    repeated-key checks (engine/structured/json_keys.py) must watch the output. Errs towards
    True: the checks cost a little time, never a valid output."""
    if schema is True or schema == {}:
        return True
    for sub, _ in subschemas(schema):
        types = sub.get("type")
        if any(k in sub for k in ("const", "enum", "$ref")) or (
                types is None and "properties" not in sub
                and any(k in sub for k in ("anyOf", "oneOf", "allOf"))):  # their branches decide
            continue
        objects = types is None or types == "object" or (
            isinstance(types, list) and "object" in types)
        if objects and sub.get("additionalProperties", True) is not False:
            return True
        extra = sub.get("additionalProperties")
        if extra is True or extra == {} or sub.get("patternProperties"):  # llguidance: may repeat
            return True
    return False


def open_non_ascii_names(schema: Any) -> frozenset[str]:
    """The listed property names with characters past ASCII of the objects that take other
    keys too: llguidance's JSON takes such a name's `\\u` spelling as one of those other keys
    (with their value), so the key checks (json_keys.py) have these names written as is."""
    names: set[str] = set()
    for sub, _ in subschemas(schema):
        props = sub.get("properties")
        if isinstance(props, dict) and sub.get("additionalProperties", True) is not False:
            names.update(name for name in props if not name.isascii())
    return frozenset(names)


def closed_objects(schema: Any) -> Any:
    """A copy of `schema` whose objects take no properties beyond the ones they list
    (`additionalProperties: false` wherever the schema leaves it unset)."""
    copy = json.loads(json.dumps(schema))
    for sub, _ in subschemas(copy):
        types = sub.get("type")
        objects = types == "object" or (isinstance(types, list) and "object" in types) or (
            "properties" in sub)
        if objects and "additionalProperties" not in sub and "patternProperties" not in sub:
            sub["additionalProperties"] = False
    return copy


_NOT_PROMOTED = ("format", "pattern", "patternProperties", "propertyNames")


def promotable(schema: Any) -> bool:
    """Whether xgrammar enforces `schema` exactly as llguidance does, so a hot schema may move
    to xgrammar's faster masks (grammar_compile.py): every keyword enforced by xgrammar, every
    object closed (xgrammar's strict mode closes the open ones), and none of the string
    keywords whose checks differ between the two (`format`: xgrammar lets `2022-02-31` through;
    `pattern`: xgrammar matches it whole, llguidance searches)."""
    if not isinstance(schema, dict) or allows_free_keys(schema) or unenforced_keywords(schema):
        return False
    return not any(k in sub for sub, _ in subschemas(schema) for k in _NOT_PROMOTED)


def tag_schemas(node: Any, path: str = "") -> list[tuple[Any, str]]:
    """(schema, path) of each json_schema element of a structural tag."""
    if isinstance(node, list):
        return [found for i, v in enumerate(node) for found in tag_schemas(v, f"{path}/{i}")]
    if not isinstance(node, dict):
        return []
    if node.get("type") == "json_schema":
        return [(node.get("json_schema"), f"{path}/json_schema")]
    return [found for k, v in node.items() for found in tag_schemas(v, f"{path}/{k}")]


def map_tag_schemas(node: Any, fn: Any) -> Any:
    """A copy of a structural tag with `fn` applied to each json_schema element's schema."""
    if isinstance(node, list):
        return [map_tag_schemas(v, fn) for v in node]
    if not isinstance(node, dict):
        return node
    if node.get("type") == "json_schema":
        return {**node, "json_schema": fn(node.get("json_schema"))}
    return {k: map_tag_schemas(v, fn) for k, v in node.items()}


# The deepest nesting a schema may have (JSON objects and arrays inside each other): real
# schemas stay under ~21 (MaskBench's real-world set), and the walks here recurse.
MAX_SCHEMA_DEPTH = 64


def check_depth(value: Any, where: str, limit: int = MAX_SCHEMA_DEPTH) -> None:
    """ValueError naming the limit and the JSON path where `value` nests deeper than `limit`
    (walked without recursion, so any depth is safe to check; the path is only worked out for
    the error)."""
    if too_deep(value, limit):
        at = _path_to_depth(value, limit + 1) or "/"
        raise ValueError(f"{where} nests deeper than {limit} levels (at {at}); schemas may "
                         f"nest at most {limit} objects and arrays deep")


def too_deep(value: Any, limit: int = MAX_SCHEMA_DEPTH) -> bool:
    """Whether `value` nests objects and arrays deeper than `limit` (one level at a time,
    without recursion: a chat request's 150 tools cost ~0.15 ms)."""
    containers = (dict, list)
    level = [value] if isinstance(value, containers) else []
    depth = 0
    while level:
        depth += 1
        if depth > limit:
            return True
        below = []
        for node in level:
            for child in node.values() if isinstance(node, dict) else node:
                if isinstance(child, containers):
                    below.append(child)
        level = below
    return False


def _path_to_depth(value: Any, depth: int) -> str:
    """The JSON path of the first container found `depth` levels down in `value`."""
    stack: list[tuple[Any, int, str]] = [(value, 1, "")]
    while stack:
        node, level, path = stack.pop()
        if level >= depth:
            return path
        items = node.items() if isinstance(node, dict) else enumerate(node)
        stack.extend((v, level + 1, f"{path}/{_escape(str(k))}") for k, v in items
                     if isinstance(v, dict | list))
    return ""
