"""Object schemas with `anyOf` / `allOf` / `oneOf` branches, as one object schema per branch
(json_any_order.py then writes each branch's members in any order).

- `required_branches`: branches that only say which keys are present or absent, or what a key
  holds (`required`, properties set to false or to a schema: what the schema rewrites write for
  `oneOf`, `not` and `dependencies`, and a discriminator's `const`), nested in any way, in
  their disjunctive form, each merged into the object (at most `MAX_BRANCHES`);
- `merged_branches`: an `anyOf` of object schemas (or `$ref`s to them), each merged with the
  node's own members: a key's two schemas side by side (`allOf`), a key one side does not list
  held by that side's `additionalProperties`;
- `typed`: an `anyOf` branch with its node's `type` moved into it.

Each returns None where the branches are something else: the caller then writes the node as
llguidance's own JSON.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from thinkgate.engine.structured.json_schema_rules import ANNOTATIONS

MAX_BRANCHES = 32  # objects one node's branches may become
# keywords that assert on every type: a branch with one keeps its own node
ANY_TYPE_KEYS = frozenset({"enum", "const", "anyOf", "oneOf", "allOf", "not", "if", "then",
                           "else", "$ref", "$dynamicRef", "$recursiveRef"})


def typed(branch: Any, types: Any, resolve: Callable[[str], Any]) -> Any:
    """`branch` of an `anyOf` whose node also says `type: types`, as one schema: the type
    moved into it (or into the target of its `$ref`; a branch with the same type as is);
    None where that would change its meaning."""
    if types is None:
        return branch
    if not isinstance(branch, dict):
        return None
    target = resolve(branch["$ref"]) if set(branch) - ANNOTATIONS == {"$ref"} and (
        isinstance(branch["$ref"], str)) else branch
    if not isinstance(target, dict):
        return None
    if "type" in target:
        return branch if target["type"] == types else None
    if any(k in target for k in ANY_TYPE_KEYS | {"definitions", "$defs"}):
        return None
    return {**target, "type": types}


def required_branches(schema: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The object as branches without `anyOf` / `allOf`: `anyOf` / `allOf` of key sets
    (`required`, properties set to false, as the schema rewrites write them for `oneOf`,
    `not` and `dependencies`, or to a schema, as a discriminator's `const`), nested in any
    way, become the object merged with each set of its disjunctive form (at most
    `MAX_BRANCHES`); any other `anyOf` / `allOf` None."""
    own = schema.get("type") in ("object", ["object"])
    sets = _key_sets({k: schema[k] for k in ("anyOf", "allOf") if k in schema}, own)
    if sets is None or not isinstance(schema.get("properties", {}), dict):
        return None
    out = []
    for required, constrained in sets:
        props = _merged(schema.get("properties", {}), schema.get("additionalProperties"),
                        constrained, bool(schema.get("patternProperties")))
        if props is None:
            return None
        out.append({**schema, "properties": props,
                    "required": list(dict.fromkeys([*schema.get("required", []),
                                                    *required]))})
    return out

def merged_branches(schema: dict[str, Any],
                    resolve: Callable[[str], Any]) -> list[dict[str, Any]] | None:
    """An object node with an `anyOf` of object schemas (or `$ref`s to them) as one object
    per branch, the node's members and the branch's both holding: a key's schemas side by
    side (`allOf`), a key one side does not list held by that side's
    `additionalProperties`; None for other branches (or `allOf`, `patternProperties`)."""
    if "allOf" in schema or not isinstance(schema["anyOf"], list) or not schema["anyOf"]:
        return None
    base = {k: v for k, v in schema.items() if k != "anyOf"}
    out = []
    for branch in schema["anyOf"]:
        if isinstance(branch, dict) and set(branch) - ANNOTATIONS == {"$ref"} and (
                isinstance(branch["$ref"], str)):
            branch = resolve(branch["$ref"])
        if not isinstance(branch, dict) or set(branch) - ANNOTATIONS - {
                "type", "properties", "required", "additionalProperties"} or branch.get(
                "type", "object") not in ("object", ["object"]):
            return None
        merged = _merge_objects(base, branch)
        if merged is None:
            return None
        out.append(merged)
    return out


KeySet = tuple[list[str], list[tuple[str, Any]]]  # required keys, (key, its schema) if present


def _key_sets(node: Any, objects_only: bool) -> list[KeySet] | None:
    """The disjunctive form of a node that says only which keys are present (`required`),
    absent (a property set to false) or what a key holds if present (a property's schema,
    e.g. the `const` of a discriminator), through `anyOf` / `allOf`: a list of key sets, or
    None for anything else (or past `MAX_BRANCHES`). `type: object` is allowed in it where
    the object's own type is object alone."""
    if not isinstance(node, dict) or set(node) - ANNOTATIONS - {
            "required", "properties", "anyOf", "allOf", "type"}:
        return None
    if "type" in node and not (objects_only and node["type"] in ("object", ["object"])):
        return None
    required, props = node.get("required", []), node.get("properties", {})
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required) or (
            not isinstance(props, dict)):
        return None
    out: list[KeySet] = [(list(required), list(props.items()))]
    groups = [node["anyOf"]] if "anyOf" in node else []
    every = node.get("allOf", [])
    if not isinstance(every, list):
        return None
    groups += [[item] for item in every]
    for group in groups:
        if not isinstance(group, list) or not group:
            return None
        alts = []
        for alt in group:
            found = _key_sets(alt, objects_only)
            if found is None:
                return None
            alts.extend(found)
        out = [(r1 + r2, p1 + p2) for r1, p1 in out for r2, p2 in alts]
        if len(out) > MAX_BRANCHES:
            return None
    return out


def _merged(props: dict[str, Any], extra: Any, constrained: list[tuple[str, Any]],
            patterns: bool) -> dict[str, Any] | None:
    """An object's properties with a branch's constraints on them (`_key_sets`): false keeps
    a key out, a schema holds beside the key's own (`allOf`), or the extra members' where the
    object does not list the key; None where pattern members may hold it too."""
    out = dict(props)
    for key, sub in constrained:
        own = out.get(key, extra if extra is not None else True)
        if sub is True or own is False or sub == own:
            continue
        if key not in out and patterns:
            return None
        out[key] = sub if sub is False or own is True or own == {} else {"allOf": [own, sub]}
    return out


def _merge_objects(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any] | None:
    """One object schema holding where both `a` (with its other keywords) and `b` (members
    only) hold, or None (pattern members, or lists where maps belong)."""
    props_a, props_b = a.get("properties", {}), b.get("properties", {})
    req_a, req_b = a.get("required", []), b.get("required", [])
    if "patternProperties" in a or not all(isinstance(x, dict) for x in (props_a, props_b)) or (
            not all(isinstance(x, list) for x in (req_a, req_b))):
        return None
    extra_a, extra_b = a.get("additionalProperties", True), b.get("additionalProperties", True)
    props = {k: _both(props_a.get(k, extra_a), props_b.get(k, extra_b))
             for k in [*props_a, *(k for k in props_b if k not in props_a)]}
    out = {**a, "properties": props, "required": list(dict.fromkeys([*req_a, *req_b])),
           "additionalProperties": _both(extra_a, extra_b)}
    if "type" in b and "type" not in a:
        out["type"] = "object"
    return out


def _both(a: Any, b: Any) -> Any:
    """A schema both `a` and `b` hold for."""
    if a is True or a == {} or a == b:
        return b
    if b is True or b == {}:
        return a
    if a is False or b is False:
        return False
    return {"allOf": [a, b]}
