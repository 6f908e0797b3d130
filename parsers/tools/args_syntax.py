"""Arguments in each body syntax, both ways: written from a dict (``render_args``) and
constrained by a JSON schema (``args_format``, an xgrammar structural-tag format as a dict)."""

from __future__ import annotations

import json
from typing import Any

from .convert import items_schema, member_schema, property_schema, schema_types
from .nested_body import nested_value
from .spec import Region
from .xml_body import ParamSyntax

_PY_STR = r'"([^"\\\r\n]|\\[\\"nt])*"'
_PY_INT = r"-?(0|[1-9][0-9]{0,15})"
_PY_NUM = r"-?(0|[1-9][0-9]{0,15})(\.[0-9]{1,15})?([eE][-+]?[0-9]{1,3})?"


def _const(v: str) -> dict:
    return {"type": "const_string", "value": v}


def _seq(*elements: dict) -> dict:
    items = [e for e in elements if not (e["type"] == "const_string" and not e["value"])]
    if not items:
        return _const("")
    return items[0] if len(items) == 1 else {"type": "sequence", "elements": items}


def _props(schema: dict | None) -> tuple[list[tuple[str, dict]], set[str]]:
    schema = schema or {}
    props = [(k, v if isinstance(v, dict) else {})
             for k, v in (schema.get("properties") or {}).items()]
    return props, set(schema.get("required") or ())


def _ordered(items: list[tuple[dict, bool]], sep: str) -> dict:
    """The elements in their declared order joined by ``sep``: each required one always, each
    optional one at will (as the JSON formats' objects keep the schema's property order)."""
    # `rest[i]`: elements i.. after something was written (each optional one with its sep)
    rest: list[list[dict]] = [[] for _ in range(len(items) + 1)]
    for i in range(len(items) - 1, -1, -1):
        e, required = items[i]
        part = _seq(_const(sep), e)
        rest[i] = [part if required else {"type": "optional", "content": part}, *rest[i + 1]]
    # `first`: elements i.. before anything was written
    first: dict = _const("")
    for i in range(len(items) - 1, -1, -1):
        e, required = items[i]
        here = _seq(e, *rest[i + 1])
        first = here if required else {"type": "or", "elements": [here, first]}
    return first


def _string_value(prop: dict, excludes: list[str]) -> dict:
    if "const" in prop:
        return _const(str(prop["const"]))
    if "enum" in prop:
        return {"type": "or", "elements": [_const(str(v)) for v in prop["enum"]]}
    if "pattern" in prop:
        return {"type": "regex", "pattern": prop["pattern"]}
    return {"type": "any_text", "excludes": excludes}


def _is_plain_string(prop: dict) -> bool:
    return schema_types(prop) == ["string"] or not schema_types(prop) and not prop


# ---- XML-ish parameters ----
def _xml_key(syn: ParamSyntax, key: str, string: bool) -> str:
    if syn.open.endswith("name=") or syn.open.endswith("key="):
        attrs = ""
        if "DSML" in syn.open:
            attrs = f' string="{"true" if string else "false"}"'
        elif syn.open.endswith("key="):
            attrs = f' type="{"string" if string else "json"}"'
        return syn.open + '"' + key + '"' + attrs + syn.key_close
    return syn.open + key + syn.key_close


def _xml_param(syn: ParamSyntax, key: str, string: bool) -> tuple[str, str]:
    head = _xml_key(syn, key, string) + syn.value_open + syn.value_open_close
    tail = syn.close + (key + syn.close_tail if syn.close_tail else "")
    if syn.trim_newline:
        head, tail = head + "\n", "\n" + tail
    return head, tail


def _xml_excludes(syn: ParamSyntax) -> list[str]:
    return [x for x in (syn.close, syn.open, "<|", "｜") if x]


# ---- rendering ----
def _py_literal(v: Any) -> str:
    """Python for scalars; containers as JSON, as the grammar writes them (ast reads both)."""
    if isinstance(v, bool):
        return "True" if v else "False"
    if v is None:
        return "None"
    return json.dumps(v, ensure_ascii=False)


def _gemma_literal(v: Any, d: str, top: bool = True) -> str:
    """Gemma 4 writes every level its way; FunctionGemma nests plain JSON (as its grammar)."""
    if not top and d != '<|"|>':
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, str):
        return d + v + d
    if isinstance(v, list):
        return "[" + ",".join(_gemma_literal(x, d, False) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ",".join(k + ":" + _gemma_literal(x, d, top and isinstance(x, str))
                              for k, x in v.items()) + "}"
    return json.dumps(v)


def _nested(v: Any, ns: str, schema: dict | None = None, root: dict | None = None) -> str:
    """``v`` as MiniMax-M3 elements: objects nest elements, arrays repeat ``<item>``. Elements
    carry no types, so a member the schema does not type reads back as a string (``<math>90``
    is ``"90"``, in vLLM's reader as in ours); a container holding one is written as JSON text
    instead where its schema says object or array, which both readers JSON-decode."""
    if isinstance(v, dict):
        text = "".join(f"{ns}<{k}>{_nested(x, ns, member_schema(schema, k, root), root)}{ns}</{k}>"
                       for k, x in v.items())
    elif isinstance(v, list):
        items = items_schema(schema, root)
        text = "".join(f"{ns}<item>{_nested(x, ns, items, root)}{ns}</item>" for x in v)
    else:
        return v if isinstance(v, str) else json.dumps(v)
    if schema is None or _reads_as(text, schema, ns, root, v):
        return text
    as_json = json.dumps(v, ensure_ascii=False)
    return as_json if _reads_as(as_json, schema, ns, root, v) else text


def _reads_as(text: str, schema: dict, ns: str, root: dict | None, want: Any) -> bool:
    got = nested_value(text, schema, ns, root)
    return json.dumps(got, sort_keys=True) == json.dumps(want, sort_keys=True)


def render_args(region: Region, args: dict[str, Any], schema: dict | None = None) -> str:
    """``args`` written the way the region's body writes them (``schema``: the tool's
    parameters, which the nested XML body needs to write values that read back typed)."""
    kind = region.render_args
    if kind == "json":
        return json.dumps(args, ensure_ascii=False)
    if kind == "nested_xml":
        ns = region.namespace
        return "".join(f"{ns}<{k}>{_nested(x, ns, property_schema(schema, k), schema)}{ns}</{k}>"
                       for k, x in args.items())
    if kind == "pythonic":
        return ", ".join(f"{k}={_py_literal(v)}" for k, v in args.items())
    if kind == "gemma":
        return _gemma_literal(args, region.string_delim)
    syn = region.params
    assert syn is not None
    out = []
    for k, v in args.items():
        head, tail = _xml_param(syn, k, isinstance(v, str))
        out.append(head + (v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)) + tail)
    return "".join(out)


# ---- grammar ----
def args_format(region: Region, schema: dict | None, excludes: list[str]) -> dict:
    """The structural-tag format of one call's arguments under ``schema``; string values may
    not contain ``excludes`` (the format's markers)."""
    schema = schema if isinstance(schema, dict) and schema else {"type": "object"}
    kind = region.render_args
    if kind == "json":
        return {"type": "json_schema", "json_schema": schema, "excludes": excludes}
    if kind == "nested_xml":  # xgrammar's own MiniMax-M3 style (it rejects excludes)
        return {"type": "json_schema", "json_schema": schema, "style": "minimax_m3_xml"}
    props, required = _props(schema)
    if kind == "gemma" and region.string_delim == '<|"|>':
        return {"type": "json_schema", "json_schema": schema, "style": "gemma"}
    items: list[tuple[dict, bool]] = []
    for key, prop in props:
        string = _is_plain_string(prop) or schema_types(prop) == ["string"]
        if kind == "pythonic":
            items.append((_seq(_const(key + "="), _py_value(prop, excludes)), key in required))
        elif kind == "gemma":
            d = region.string_delim
            value = (_seq(_const(d), _string_value(prop, [d, *excludes]), _const(d)) if string
                     else {"type": "json_schema", "json_schema": prop, "excludes": excludes})
            items.append((_seq(_const(key + ":"), value), key in required))
        else:
            syn = region.params
            assert syn is not None
            head, tail = _xml_param(syn, key, string)
            value = (_string_value(prop, _xml_excludes(syn) + excludes) if string else
                     {"type": "json_schema", "json_schema": prop, "excludes": excludes})
            items.append((_seq(_const(head), value, _const(tail)), key in required))
    if kind == "xml":
        return _seq(*[e if r else {"type": "optional", "content": e} for e, r in items])
    if kind == "gemma":
        return _seq(_const("{"), _ordered(items, ","), _const("}"))
    return _ordered(items, ", ")


def _py_value(prop: dict, excludes: list[str]) -> dict:
    types = schema_types(prop)
    if types == ["string"] and not ({"enum", "const", "pattern"} & set(prop)):
        return {"type": "regex", "pattern": _PY_STR}
    if types == ["integer"]:
        return {"type": "regex", "pattern": _PY_INT}
    if types == ["number"]:
        return {"type": "regex", "pattern": _PY_NUM}
    if types == ["boolean"]:
        return {"type": "or", "elements": [_const("True"), _const("False")]}
    if types == ["null"]:
        return _const("None")
    return {"type": "json_schema", "json_schema": prop, "excludes": excludes}
