"""JSON Schema keywords llguidance refuses, rewritten into ones it enforces, with the same meaning.

llguidance refuses `oneOf` (it cannot check "exactly one"), `not`, `dependentRequired` and the
array form of `dependencies`. Common uses of each have an exact equivalent in keywords it does
enforce (`anyOf`, `allOf`, `type`, `required`, and `false` as a property's schema: the key is
absent). `rewrite_for_guidance(schema)` applies these; every other use is left as it is (and
refused). Each rewrite accepts exactly the instances the original accepts:

- `oneOf` of required-key sets on objects (`[{"required": ["radius"]}, {"required": ["length",
  "width"]}]`: exactly one way to give the dimensions): branch i holds, and every other branch
  j misses one of its keys: an `anyOf` over i and a choice of one missing key per other branch;
- `dependentRequired` / `dependencies` with key lists (`{"a": ["b"]}`): `a` absent, or `a` and
  `b` present: one `anyOf` per key, under `allOf`;
- `not` of a `type`: the other types; `not` of `required` keys: an object missing one of them.

One rewrite is narrower than the original, never wider (so an output still always validates):
a `oneOf` of object branches that differ in their required keys becomes an `anyOf` where each
branch also lacks one key each other branch requires (`{"required": ["delete"]}` /
`{"required": ["insert"]}`: an object with `delete` and without `insert`, or the other way).
An instance that has such a key though the other branch fails for another reason is refused.

`disjoint_one_of(schema)`, for both backends (canonical.py applies it to every JSON
schema): a `oneOf` whose branches no instance can match twice is an `anyOf` as it is.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

from thinkgate.engine.structured.json_schema_rules import subschemas

_ONE_OF_LIMIT = 32  # branches the required-set rewrite may write; past it the oneOf stays
_PLAIN = frozenset({"required", "title", "description", "$comment", "type"})
_TYPES = ("null", "boolean", "object", "array", "number", "integer", "string")


def rewrite_for_guidance(schema: Any) -> Any:
    """A copy of `schema` with the rewrites of the module docstring applied (or `schema`)."""
    if not any(("oneOf" in sub or "not" in sub or "dependentRequired" in sub
                or "dependencies" in sub) for sub, _ in subschemas(schema)):
        return schema
    copy = json.loads(json.dumps(schema))
    for _ in range(3):  # again: a rewritten oneOf may copy in a branch that holds another
        for sub, _ in list(subschemas(copy)):
            _required_one_of(sub)
            _exclusive_one_of(sub, copy)
            _dependent_required(sub)
            _negation(sub)
    return copy


def _objects_only(sub: dict[str, Any]) -> bool:
    types = sub.get("type")
    return types == "object" or types == ["object"]


def _required_one_of(sub: dict[str, Any]) -> None:
    branches = sub.get("oneOf")
    if not isinstance(branches, list) or len(branches) < 2 or "anyOf" in sub:
        return
    if not _objects_only(sub):
        return
    sets = []
    for branch in branches:
        if not isinstance(branch, dict) or not set(branch) <= _PLAIN or not isinstance(
                branch.get("required"), list) or branch.get("type", "object") != "object":
            return
        sets.append(frozenset(k for k in branch["required"] if isinstance(k, str)))
    written: list[dict[str, Any]] = []
    for i, mine in enumerate(sets):
        others = [theirs - mine for j, theirs in enumerate(sets) if j != i]
        if any(not missing for missing in others):  # another branch holds whenever this does
            continue
        choices = {frozenset(c) for c in itertools.product(*(sorted(m) for m in others))}
        for absent in sorted(choices, key=sorted):
            if any(other < absent for other in choices):  # a smaller set says more
                continue
            written.append({"required": sorted(mine),
                            "properties": {key: False for key in sorted(absent)}})
            if len(written) > _ONE_OF_LIMIT:
                return
    if written:
        del sub["oneOf"]
        sub["anyOf"] = written


def _exclusive_one_of(sub: dict[str, Any], root: Any) -> None:
    branches = sub.get("oneOf")
    if not isinstance(branches, list) or len(branches) < 2 or "anyOf" in sub:
        return
    resolved = [_resolve(b, root) for b in branches]
    if not all(isinstance(b, dict) for b in resolved):
        return
    objects = _objects_only(sub)
    written = []
    for i, mine in enumerate(resolved):
        mine_req = set(mine.get("required") or ())
        mine_props = mine.get("properties") if isinstance(mine.get("properties"), dict) else {}
        absent = set()
        for j, theirs in enumerate(resolved):
            if j == i or _disjoint(mine, theirs, _own_types(sub), root):
                continue
            # "k absent" rules `theirs` out only for objects: the instance must be one
            if not (objects or _types(mine) == {"object"} or _types(theirs) == {"object"}):
                return
            keys = sorted(set(theirs.get("required") or ()) - mine_req)
            if not keys:
                return
            absent.add(next((k for k in keys if k not in mine_props), keys[0]))
        branch = json.loads(json.dumps(mine))
        if absent:
            props = branch.get("properties") if isinstance(branch.get("properties"), dict) else {}
            branch["properties"] = {**props, **dict.fromkeys(sorted(absent), False)}
        written.append(branch)
    del sub["oneOf"]
    sub["anyOf"] = written


def _dependent_required(sub: dict[str, Any]) -> None:
    clauses = []
    for keyword in ("dependentRequired", "dependencies"):
        deps = sub.get(keyword)
        if not isinstance(deps, dict) or not all(isinstance(v, list) for v in deps.values()):
            continue
        for key, needed in deps.items():
            clauses.append({"anyOf": [{"properties": {key: False}},
                                      {"required": [key, *[n for n in needed if n != key]]}]})
        del sub[keyword]
    if clauses:
        sub["allOf"] = [*sub.get("allOf", []), *clauses]


def _negation(sub: dict[str, Any]) -> None:
    negated = sub.get("not")
    if not isinstance(negated, dict):
        return
    if set(negated) == {"type"}:
        banned = negated["type"] if isinstance(negated["type"], list) else [negated["type"]]
        if "integer" in banned and "number" not in banned:  # 1.5 is allowed, 1 is not
            return
        if "number" in banned:
            banned = [*banned, "integer"]
        allowed = [t for t in _TYPES if t not in banned]
        own = sub.get("type")
        if own is not None:
            own = own if isinstance(own, list) else [own]
            allowed = [t for t in allowed if t in own or (t == "integer" and "number" in own)]
        if not allowed:
            return
        del sub["not"]
        sub["type"] = allowed[0] if len(allowed) == 1 else allowed
    elif set(negated) == {"required"} and isinstance(negated["required"], list) and \
            negated["required"]:
        # `required` holds for every non-object, so its negation holds only for objects
        own = sub.get("type", "object")
        if own != "object" and not (isinstance(own, list) and "object" in own):
            return
        keys = [k for k in negated["required"] if isinstance(k, str)]
        del sub["not"]
        sub["type"] = "object"
        sub["allOf"] = [*sub.get("allOf", []),
                        {"anyOf": [{"properties": {key: False}} for key in keys]}]


def disjoint_one_of(schema: Any) -> Any:
    """`schema` with each `oneOf` whose branches no instance can match twice written as
    `anyOf` (then "exactly one" and "at least one" are the same; a copy when any is). Branches
    are told apart, conservatively, by their JSON types, their `const` / `enum` values, a
    required property whose `const` / `enum` values differ (a discriminator), or a required
    property the other (closed) branch does not allow; a `oneOf` of one branch is that branch.
    A `oneOf` with branches that may overlap is left as it is (the backends refuse it)."""
    found = [sub for sub, _ in subschemas(schema)
             if isinstance(sub.get("oneOf"), list) and _pairwise_disjoint(sub, schema)]
    if not found:
        return schema
    copy = json.loads(json.dumps(schema))
    for sub, _ in subschemas(copy):
        if isinstance(sub.get("oneOf"), list) and _pairwise_disjoint(sub, copy):
            branches = sub.pop("oneOf")
            if "anyOf" in sub:  # both: keep the two constraints (allOf would be refused)
                sub["oneOf"] = branches
                continue
            sub["anyOf"] = branches
    return copy


_JSON_TYPES = frozenset({"null", "boolean", "object", "array", "number", "string"})


def _resolve(branch: Any, root: Any, depth: int = 0) -> Any:
    """A local `$ref` branch's target (`#/$defs/x`, `#/definitions/x`), else the branch."""
    ref = branch.get("$ref") if isinstance(branch, dict) else None
    if not isinstance(ref, str) or not ref.startswith("#/") or depth > 8 or len(branch) > 1:
        return branch
    node = root
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, dict) or part not in node:
            return branch
        node = node[part]
    return _resolve(node, root, depth + 1)


def _value_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    return {dict: "object", list: "array", str: "string"}.get(type(value), "?")


def _types(branch: dict[str, Any]) -> frozenset[str]:
    """The JSON types an instance of `branch` may have (integer counted as number)."""
    if "const" in branch:
        return frozenset({_value_type(branch["const"])})
    if isinstance(branch.get("enum"), list):
        return frozenset(_value_type(v) for v in branch["enum"])
    types = branch.get("type")
    if isinstance(types, str):
        types = [types]
    if not isinstance(types, list) or any(k in branch for k in ("anyOf", "oneOf", "allOf", "$ref")):
        return _JSON_TYPES
    return frozenset("number" if t == "integer" else t for t in types if isinstance(t, str))


def _values(branch: Any) -> list[Any] | None:
    if not isinstance(branch, dict):
        return None
    if "const" in branch:
        return [branch["const"]]
    return branch["enum"] if isinstance(branch.get("enum"), list) else None


def _disjoint(a: Any, b: Any, scope: frozenset[str] = _JSON_TYPES, root: Any = None) -> bool:
    """Whether no instance matches both branches; `scope`: the types the branches' parent
    allows (a branch of a `type: object` node constrains objects only)."""
    if not isinstance(a, dict) or not isinstance(b, dict):
        return False
    ta, tb = _types(a) & scope, _types(b) & scope
    if not ta & tb:
        return True
    va, vb = _values(a), _values(b)
    if va is not None and vb is not None:
        return not any(x == y and type(x) is type(y) for x in va for y in vb)
    if ta != {"object"} or tb != {"object"}:
        return False
    pa, pb = a.get("properties") or {}, b.get("properties") or {}
    ra, rb = set(a.get("required") or ()), set(b.get("required") or ())
    for key in ra & rb & set(pa) & set(pb):  # a discriminator both require
        xa, xb = _values(_resolve(pa[key], root)), _values(_resolve(pb[key], root))
        if xa is not None and xb is not None and not any(
                x == y and type(x) is type(y) for x in xa for y in xb):
            return True
    for req, other, props in ((ra, b, pb), (rb, a, pa)):  # a key the other closed one forbids
        if other.get("additionalProperties") is False and "patternProperties" not in other and (
                req - set(props)):
            return True
    return False


def _pairwise_disjoint(sub: dict[str, Any], root: Any) -> bool:
    resolved = [_resolve(b, root) for b in sub["oneOf"]]
    scope = _own_types(sub)
    return len(resolved) > 0 and all(_disjoint(resolved[i], resolved[j], scope, root)
                                     for i in range(len(resolved))
                                     for j in range(i + 1, len(resolved)))


def _own_types(sub: dict[str, Any]) -> frozenset[str]:
    """The types a node's own `type` keyword allows (all of them without one)."""
    types = sub.get("type")
    if isinstance(types, str):
        types = [types]
    if not isinstance(types, list):
        return _JSON_TYPES
    return frozenset("number" if t == "integer" else t for t in types if isinstance(t, str))
