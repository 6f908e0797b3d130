"""Raw argument values (XML-ish formats write them as bare text) to JSON, by the tool's schema."""

from __future__ import annotations

import ast
import json
import math
from typing import Any


def tool_parameters(tools: list[dict] | None, name: str) -> dict | None:
    """The JSON schema of ``name``'s parameters in an OpenAI ``tools`` list, if given."""
    for tool in tools or ():
        fn = tool.get("function", tool) if isinstance(tool, dict) else None
        if isinstance(fn, dict) and fn.get("name") == name:
            params = fn.get("parameters")
            return params if isinstance(params, dict) else None
    return None


def property_schema(params: dict | None, key: str) -> dict | None:
    """``key``'s schema in a tool's parameters; a local ``$ref`` (``#/$defs/Location``) is
    followed within the parameters schema."""
    if not params:
        return None
    return resolve_ref((params.get("properties") or {}).get(key), params)


def resolve_ref(schema: Any, root: dict | None) -> dict | None:
    """``schema``, a local ``$ref`` in it followed within ``root`` (the parameters schema)."""
    for _ in range(8):  # a chain of references, not a cycle
        ref = schema.get("$ref") if isinstance(schema, dict) else None
        if not isinstance(ref, str) or not ref.startswith("#/"):
            break
        target: Any = root
        for part in ref[2:].split("/"):
            target = target.get(part) if isinstance(target, dict) else None
        if not isinstance(target, dict):
            break
        schema = target
    return schema if isinstance(schema, dict) else None


def container_schema(schema: dict | None, kind: str, root: dict | None = None) -> dict | None:
    """The ``kind`` ("object" or "array") alternative of ``schema``: itself, or its first
    ``anyOf``/``oneOf`` branch of that kind (``$ref``s followed within ``root``)."""
    schema = resolve_ref(schema, root)
    if schema is None:
        return None
    t = schema.get("type")
    names = [_type_name(x) for x in (t if isinstance(t, list) else [t]) if isinstance(x, str)]
    keys = ("items",) if kind == "array" else ("properties", "additionalProperties")
    if kind in names or not names and any(k in schema for k in keys):
        return schema
    for field in ("anyOf", "oneOf"):
        for sub in schema.get(field) or ():
            if (found := container_schema(sub, kind, root)) is not None:
                return found
    return None


def member_schema(schema: dict | None, key: str, root: dict | None = None) -> dict | None:
    """The schema of member ``key`` of an object value under ``schema``: its property, else
    the object's ``additionalProperties`` schema."""
    obj = container_schema(schema, "object", root)
    if obj is None:
        return None
    props = obj.get("properties") or {}
    return resolve_ref(props[key] if key in props else obj.get("additionalProperties"), root)


def items_schema(schema: dict | None, root: dict | None = None) -> dict | None:
    """The schema of the items of an array value under ``schema``."""
    arr = container_schema(schema, "array", root)
    return resolve_ref(arr.get("items"), root) if arr is not None else None


# type names tool schemas use that are not JSON Schema's, read as the JSON type they mean
# (as vLLM's schema coercion reads them)
_ALIASES = {
    **dict.fromkeys(("str", "text", "varchar", "char", "enum"), "string"),
    **dict.fromkeys(("int", "int32", "int64", "uint", "uint32", "uint64", "long", "short",
                     "unsigned"), "integer"),
    **dict.fromkeys(("float", "float32", "float64", "double"), "number"),
    "bool": "boolean", "dict": "object", **dict.fromkeys(("arr", "list", "sequence"), "array"),
}


def _type_name(t: str) -> str:
    low = t.strip().lower()
    return _ALIASES.get(low, low)


def schema_types(schema: dict | None) -> list[str]:
    """The JSON types a schema admits, most specific first; empty when unknown."""
    if not schema:
        return []
    t = schema.get("type")
    if isinstance(t, str):
        return [_type_name(t)]
    if isinstance(t, list):
        return [_type_name(x) for x in t if isinstance(x, str)]
    out: list[str] = []
    for key in ("anyOf", "oneOf"):
        for sub in schema.get(key) or ():
            out += [x for x in schema_types(sub) if x not in out]
    if not out and "enum" in schema:
        out = sorted({_json_type(v) for v in schema["enum"]})
    if not out and ("properties" in schema):
        out = ["object"]
    return out


def is_string_schema(schema: dict | None) -> bool:
    """True when a raw value must be kept as a string (no schema counts as string)."""
    types = schema_types(schema)
    return not types or types == ["string"]


def _json_type(v: Any) -> str:
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    if v is None:
        return "null"
    if isinstance(v, str):
        return "string"
    return "array" if isinstance(v, list) else "object"


def _try(raw: str, t: str) -> tuple[bool, Any]:
    s = raw.strip()
    if t == "string":
        return True, raw
    if t == "integer":
        try:
            return True, int(s)
        except ValueError:
            try:
                f = float(s)
            except ValueError:
                return False, None
            return (True, int(f)) if math.isfinite(f) and f.is_integer() else (False, None)
    if t == "number":
        if s.lstrip("+-").isascii() and s.lstrip("+-").isdigit():  # exact: 2**63 - 1 is no float
            return True, int(s)
        try:
            f = float(s)
        except ValueError:
            return False, None
        if f != f or f in (float("inf"), float("-inf")):
            return False, None
        return True, (int(f) if f.is_integer() and "." not in s and "e" not in s.lower() else f)
    if t == "boolean":
        low = s.lower()
        if low in ("true", "false"):
            return True, low == "true"
        return False, None
    if t == "null":
        return (True, None) if s.lower() in ("null", "none", "") else (False, None)
    ok, v = parse_literal(s)
    if ok and isinstance(v, str) and t in ("object", "array"):
        ok, v = parse_literal(v.strip())  # a JSON string holding the value: `"{'n': 1}"`
    if ok and _json_type(v) == t or (ok and t == "number" and _json_type(v) == "integer"):
        return True, v
    return False, None


def parse_literal(s: str) -> tuple[bool, Any]:
    """A JSON value, or failing that a Python literal with JSON-compatible contents (no NaN or
    infinity: `1e999` is none, arguments must stay JSON)."""
    try:
        v = json.loads(s)
    except (ValueError, RecursionError):
        try:
            v = ast.literal_eval(s)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return False, None
    try:
        json.dumps(v, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return False, None
    return True, v


def convert_value(raw: str, schema: dict | None) -> Any:
    """Convert one raw text value by its property schema; unconvertible values stay strings."""
    types = schema_types(schema)
    if not types:
        return raw
    for t in [t for t in types if t != "string"] + (["string"] if "string" in types else []):
        if t == "null" and "string" in types and raw.strip().lower() != "null":
            continue  # `None` for a nullable string stays the text the model wrote
        ok, v = _try(raw, t)
        if ok:
            return v
    return raw


def whole_numbers(value: Any, schema: Any) -> Any:
    """`value` with each whole float of a `number` property written as an integer (`5.0` ->
    `5`), object members and list items by their schemas too: vLLM's engine parsers write
    them so (the same number in JSON)."""
    if not isinstance(schema, dict):
        return value
    if isinstance(value, float):
        whole = math.isfinite(value) and value.is_integer()
        return int(value) if whole and "number" in schema_types(schema) else value
    if isinstance(value, dict):
        props = schema.get("properties")
        if isinstance(props, dict):
            return {k: whole_numbers(v, props.get(k)) for k, v in value.items()}
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [whole_numbers(v, schema["items"]) for v in value]
    return value


# --- schema coercion of raw string leaves, as vLLM's engine parsers do it (gemma4) -----------

_PRIORITY = ("null", "integer", "number", "boolean", "object", "array", "string")


def vllm_types(schema: Any) -> set[str]:
    """The types a property schema names (`type`, `enum` values, `anyOf`/`oneOf`/`allOf`),
    aliases read as JSON types; {"string"} when it names none (vLLM's reading)."""
    if not isinstance(schema, dict):
        return {"string"}
    out: set[str] = set()
    t = schema.get("type")
    for x in (t if isinstance(t, list) else [t]):
        if isinstance(x, str):
            out.add(_type_name(x))
    if isinstance(schema.get("enum"), list):
        out |= {_json_type(v) for v in schema["enum"]}
    for key in ("anyOf", "oneOf", "allOf"):
        for sub in schema.get(key) or () if isinstance(schema.get(key), list) else ():
            out |= vllm_types(sub)
    return out or {"string"}


def _finite(v: Any) -> bool:
    try:
        json.dumps(v, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        return False
    return True


def coerce_raw(raw: str, types: set[str]) -> Any:
    """A raw string value as the first of `types` it reads as (null, integer, number, boolean,
    object, array, string); no fit: its JSON value, else the string."""
    for t in _PRIORITY:
        if t not in types:
            continue
        if t == "string":
            return raw
        if t == "null" and raw.lower() == "null":
            return None
        if t in ("integer", "number"):
            try:
                return int(raw)
            except ValueError:
                pass
        if t == "number":
            try:
                f = float(raw)
            except ValueError:
                continue
            if math.isfinite(f):
                return int(f) if f == int(f) else f
        if t == "boolean" and raw.lower().strip() in ("true", "1", "false", "0"):
            return raw.lower().strip() in ("true", "1")
        if t in ("object", "array"):
            ok, v = _json(raw)
            if ok:
                return v
    ok, v = _json(raw)
    return v if ok else raw


def _json(raw: str) -> tuple[bool, Any]:
    try:
        v = json.loads(raw)
    except (ValueError, RecursionError):
        return False, None
    return _finite(v), v


def coerce_by_schema(value: Any, schema: Any) -> Any:
    """`value` (string leaves, dicts, lists) with each string leaf coerced by its schema:
    object members by `properties`, list items by `items`; a leaf no schema types stays a
    string (vLLM's engine parsers; Gemma 4 writes bare values as text)."""
    if not isinstance(schema, dict):
        return value
    if isinstance(value, str):
        return coerce_raw(value, vllm_types(schema))
    if isinstance(value, dict):
        props = schema.get("properties")
        if not isinstance(props, dict):
            return value
        return {k: coerce_by_schema(v, props[k]) if isinstance(props.get(k), dict) else v
                for k, v in value.items()}
    if isinstance(value, list):
        items = schema.get("items")
        return [coerce_by_schema(v, items) for v in value] if isinstance(items, dict) else value
    return value
