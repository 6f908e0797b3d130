"""A JSON schema as llguidance lark in which an object's properties may come in any order.

JSON Schema does not fix the order of an object's properties, but llguidance's JSON compiler
(and xgrammar's) writes them in the order the schema lists them, so a valid instance in
another order is refused. `any_order_lark(schema, ...)` writes the schema as a lark grammar in
which each object it converts takes its members in any order:

- an open object (additionalProperties absent, true or a schema) with n properties
  (n <= `MAX_ANY_ORDER`) gets a rule per set of properties already written: the next member
  is any property not yet written, `}` only once every required one is written, so no key
  repeats and none that is required is missing;
- a closed object (`additionalProperties: false`) whose every property is required (the
  shape of OpenAI's strict mode, which writes properties in the schema's order) keeps the
  declared order: its next key stays forced (jump-forward writes it) and a hot schema of
  such objects still moves to xgrammar's masks (measured: 13% more decode steps and
  45 -> 211 us of mask fill per batch-8 step on the demo model otherwise), and also the
  order `required` lists them in where that differs (a schema's writer often lists them
  in the order instances use); a closed object with optional properties takes them in any
  order like an open one;
- an object past `MAX_ANY_ORDER` properties (compact separators only) takes its optional
  members anywhere, the grammar letting one repeat and the repeated-key checks (json_keys.py,
  `AnyOrderGrammar.key_checks`) taking the repeat out; its required members are tracked by
  a rule per set written (up to `MAX_ANY_ORDER` of them) or come in the declared order or the
  order `required` lists them (a valid instance in a third order is refused, never an
  invalid one taken);
- `patternProperties` members (compact separators, ASCII names no pattern matches; keys
  written without escapes, so a pattern reads the key as written: `pattern_key`) and extra
  members come once every required member is written (so a completion search or a model does
  not wander among them first); an extra key is no spelling of a declared name (json_object_
  lark.py), repeats among them are the key checks' (json_keys.py);
- everything else (strings, numbers, objects with keywords the conversion does not cover) is
  `%json` of its sub-schema with the request's whitespace options and the `definitions` its
  `$ref`s need; `$ref`s become rules (recursion stays recursion); arrays, `anyOf`, and an
  object's branches (json_branches.py: key sets, a discriminator, object branches merged with
  the node, a node's `type` moved into its `anyOf`) are converted when an object inside them
  takes another order.

Sizes: 2^n rules for n properties, and llguidance compiles a lark rule in ~20 us, so objects
past `MAX_ANY_ORDER` properties, or past `MAX_ANY_ORDER_RULES` in one schema, keep declared
order (their members still converted); a schema past `MAX_LARK_RULES` is not converted at all.
Objects are written inner ones first, so when the budget runs out it is the outer ones that
keep declared order; such a schema (compact separators) is then written again with its
objects of 4 or more members in the tracked form under the repeated-key checks (2^r rules for
r required members, not 2^n), which leaves budget for the outer ones.
None when nothing would change (no object with two or more members converted) or the schema
has what the conversion cannot carry over (`$id`, remote or non-local `$ref`s): the caller then
compiles the schema as it is (also when llguidance refuses the lark grammar).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, Literal, NamedTuple

from thinkgate.engine.structured.json_branches import (
    ANY_TYPE_KEYS,
    merged_branches,
    required_branches,
    typed,
)
from thinkgate.engine.structured.json_object_lark import (
    WS,
    any_order,
    declared_key,
    declared_order,
    extra_key,
    other_key,
    pattern_key,
    required_any_order,
    required_in_order,
)
from thinkgate.engine.structured.json_schema_rules import ANNOTATIONS, subschemas
from thinkgate.engine.structured.lark_tags import lark_string

# Rules per object grow as 2^n: above this many properties an object keeps declared order, and
# so does every object past this many any-order rules in one schema (compile time).
MAX_ANY_ORDER = 6
MAX_ANY_ORDER_RULES = 256
# Larger objects take their optional members in any order under the repeated-key checks
# (json_keys.py), their required ones in any order up to MAX_ANY_ORDER of them, else in the
# declared order or the order `required` lists them; past this many members, declared order
MAX_TRACKED = 128
# Larger schemas (canonical text, or lark rules) keep declared order everywhere: llguidance
# compiles a lark rule in ~20 us, and their compile time is spent already
MAX_ANY_ORDER_CHARS = 16_000
MAX_LARK_RULES = 1000
_OBJECT_KEYS = frozenset({
    "properties", "required", "additionalProperties", "minProperties", "maxProperties",
    "patternProperties", "propertyNames", "dependencies", "dependentRequired",
    "dependentSchemas", "unevaluatedProperties"})
# keywords that assert on every type: a node with one is written as %json (or its anyOf kept)
_ANY_TYPE_KEYS = ANY_TYPE_KEYS
_MAX_ITEMS = 1000  # array bounds written as lark repetitions up to this count
_NOT_OBJECT = ["null", "boolean", "number", "string", "array"]


class _Unsupported(Exception):
    """The schema holds something the conversion cannot carry over."""


class AnyOrderGrammar(NamedTuple):
    """`any_order_grammar`'s answer: the lark text, and whether an object in it relies on the
    repeated-key checks (json_keys.py) to take each member at most once."""

    lark: str
    key_checks: bool
    json_parts: list[Any]  # the sub-schemas written as `%json`


def any_order_grammar(schema: Any, json_text: Callable[[Any], str], any_whitespace: bool,
                      max_any_order: int = MAX_ANY_ORDER,
                      max_rules: int = MAX_ANY_ORDER_RULES) -> AnyOrderGrammar | None:
    """The lark grammar of `schema` with its objects in any order (module docstring), or None.
    json_text: a sub-schema -> the text `%json` takes (with the request's options)."""
    if not isinstance(schema, dict) or not _local_refs_only(schema):
        return None
    root = _without_annotations(schema)
    writer = _Writer(root, json_text, any_whitespace, max_any_order, max_rules)
    try:
        start = writer.value(writer.root)
        if writer.short_of_rules and not any_whitespace:
            # the budget ran out: objects of 4 or more members take the tracked form under the
            # repeated-key checks (2^required rules, not 2^members), so the budget reaches
            # the objects written last (the outer ones)
            writer = _Writer(root, json_text, any_whitespace, max_any_order, max_rules, True)
            start = writer.value(writer.root)
    except _Unsupported:
        return None
    if not writer.num_reordered:
        return None
    return AnyOrderGrammar("\n".join([f"start: {start}", *writer.rules]) + "\n",
                           writer.key_checks, writer.json_parts)


def any_order_lark(schema: Any, json_text: Callable[[Any], str], any_whitespace: bool,
                   max_any_order: int = MAX_ANY_ORDER,
                   max_rules: int = MAX_ANY_ORDER_RULES) -> str | None:
    """`any_order_grammar`'s lark text alone."""
    found = any_order_grammar(schema, json_text, any_whitespace, max_any_order, max_rules)
    return None if found is None else found.lark


def _without_annotations(schema: dict[str, Any]) -> dict[str, Any]:
    """A copy without the keywords that assert nothing (descriptions, examples: most of the
    text of real schemas, which each `%json` part would otherwise carry)."""
    copy = json.loads(json.dumps(schema))
    for sub, _ in subschemas(copy):
        for key in [k for k in sub if k in ANNOTATIONS and k != "$schema" or k.startswith("x-")]:
            del sub[key]
    return copy


def _local_refs_only(schema: dict[str, Any]) -> bool:
    """Whether every `$ref` points into this document (and no `$id` moves a base)."""
    for sub, path in subschemas(schema):
        if path and any(isinstance(sub.get(k), str) and not sub[k].startswith("#")
                        for k in ("$id", "id")):
            return False  # a base URI moved (a fragment alone moves none)
        if "$anchor" in sub or "$dynamicRef" in sub or "$recursiveRef" in sub:
            return False
        ref = sub.get("$ref")
        if ref is not None and (not isinstance(ref, str) or not ref.startswith("#/")):
            return False
    return True


class _Writer:
    def __init__(self, root: dict[str, Any], json_text: Callable[[Any], str],
                 any_whitespace: bool, max_any_order: int, max_rules: int,
                 prefer_tracked: bool = False) -> None:
        self.root = root
        self.rules_left = max_rules  # any-order state rules this schema may still write
        self.json_text = json_text
        self.max_any_order = max_any_order
        self.rules: list[str] = []
        self._named: dict[str, str] = {}
        self._refs: dict[str, str] = {}
        self._num_refs = 0  # never taken back: a name is never reused
        self._log: list[tuple[dict[str, str], str]] = []  # entries to take back with rules
        self.num_reordered = 0  # objects whose members may now come in another order
        self.key_checks = False  # an object relies on the repeated-key checks
        self.prefer_tracked = prefer_tracked  # larger objects: the tracked form first
        self.short_of_rules = False  # an object kept declared order for want of rules
        self.json_parts: list[Any] = []
        self._draft = {"$schema": root["$schema"]} if isinstance(root.get("$schema"), str) else {}
        # llguidance's JSON separators: compact ", " / ": ", or WS around any token
        self.ws = "WS? " if any_whitespace else ""
        if any_whitespace:
            self.rules.append(f"WS: {WS}")
        self.colon = f'{self.ws}":" {self.ws}' if any_whitespace else '": " '
        self.comma = f'{self.ws}"," {self.ws}' if any_whitespace else '", " '

    def rule(self, body: str, prefix: str = "r") -> str:
        if body not in self._named:
            name = f"{prefix}{len(self.rules)}"
            self._named[body] = name
            self._log.append((self._named, body))
            self.rules.append(f"{name}: {body}")
        return self._named[body]

    def json(self, schema: Any) -> str:
        """`%json` of a sub-schema, with the definitions its `$ref`s reach."""
        if isinstance(schema, dict):
            schema = {**schema, **self._definitions(schema), **self._draft}
        self.json_parts.append(schema)
        return self.rule("%json " + self.json_text(schema), "j")

    def _definitions(self, schema: dict[str, Any]) -> dict[str, Any]:
        """The root's `definitions` / `$defs` entries reachable from `schema`'s `$ref`s."""
        found: dict[str, dict[str, Any]] = {}
        todo = [schema]
        while todo:
            for sub, _ in subschemas(todo.pop()):
                ref = sub.get("$ref")
                if not isinstance(ref, str):
                    continue
                parts = ref[2:].split("/")
                if len(parts) < 2 or parts[0] not in ("definitions", "$defs"):
                    raise _Unsupported(ref)
                section, name = parts[0], _unescape(parts[1])
                table = self.root.get(section)
                if not isinstance(table, dict) or name not in table:
                    raise _Unsupported(ref)
                if name not in found.setdefault(section, {}):
                    found[section][name] = table[name]
                    todo.append(table[name])
        return found

    def value(self, schema: Any) -> str:
        """A lark expression for a value of `schema`: converted where an object in it takes
        its members in another order than declared, else `%json` (the rules written for it
        taken back: each costs compile time)."""
        if not isinstance(schema, dict):
            return self.json(schema)
        keys = {k for k in schema if k not in ANNOTATIONS and k not in ("definitions", "$defs")}
        if keys == {"$ref"}:
            return self.ref(schema["$ref"])
        mark = (len(self.rules), len(self._log), len(self.json_parts), self.num_reordered,
                self.rules_left, self.key_checks)
        written = self._convert(schema, keys)
        if written is None or self.num_reordered == mark[3]:
            del self.rules[mark[0]:]
            del self.json_parts[mark[2]:]
            while len(self._log) > mark[1]:
                table, key = self._log.pop()
                del table[key]
            self.num_reordered, self.rules_left, self.key_checks = mark[3:]
            return self.json(schema)
        return written

    def _convert(self, schema: dict[str, Any], keys: set[str]) -> str | None:
        if keys in ({"anyOf"}, {"anyOf", "type"}) and isinstance(schema["anyOf"], list) and (
                schema["anyOf"]):
            branches = [typed(b, schema.get("type"), self._resolve) for b in schema["anyOf"]]
            if any(b is None for b in branches):
                return None
            alts = [self.value(b) for b in branches]
            return self.rule(" | ".join(dict.fromkeys(alts)))
        types = schema.get("type")
        if types == "array" and keys <= {"type", "items", "minItems", "maxItems"} and isinstance(
                schema.get("items"), dict) and _count(schema.get("minItems", 0)) and _count(
                schema.get("maxItems", 0)) and schema.get("minItems", 0) <= schema.get(
                "maxItems", _MAX_ITEMS):
            return self.array(schema)
        objects = types is None and "properties" in schema or types == "object" or (
            isinstance(types, list) and "object" in types)
        if not objects or keys & (_ANY_TYPE_KEYS | _OBJECT_KEYS) - {
                "anyOf", "allOf", "properties", "required", "additionalProperties",
                "patternProperties"}:
            return None
        branches = required_branches(schema)
        if branches is None and "anyOf" in schema:  # object branches: each merged with it
            merged = merged_branches(schema, self._resolve)
            if merged is None:
                return None
            return self.rule(" | ".join(dict.fromkeys(self.value(b) for b in merged)))
        written = [self.object(b) for b in branches] if branches is not None else [None]
        if any(w is None for w in written):
            return None
        alts = [w for w in written if w]
        others = _NOT_OBJECT if types is None else [t for t in types if t != "object"] if (
            isinstance(types, list)) else []
        if others:
            rest = {k: v for k, v in schema.items()
                    if k not in _OBJECT_KEYS and k not in ("anyOf", "allOf")}
            alts.append(self.json({**rest, "type": others}))
        if not alts:
            return None
        return self.rule(" | ".join(alts)) if len(alts) > 1 else alts[0]

    def ref(self, ref: str) -> str:
        if ref not in self._refs:
            self._refs[ref] = name = f"d{self._num_refs}"
            self._num_refs += 1
            self._log.append((self._refs, ref))
            target = self._resolve(ref)
            if isinstance(target, dict) and any(k in target for k in ("definitions", "$defs")):
                # a nested definitions table: refs inside it are written against the root
                target = {k: v for k, v in target.items() if k not in ("definitions", "$defs")}
            self.rules.append(f"{name}: {self.value(target)}")
        return self._refs[ref]

    def _resolve(self, ref: str) -> Any:
        node: Any = self.root
        for part in ref[2:].split("/"):
            part = _unescape(part)
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                raise _Unsupported(ref)
        if ref.split("/")[1] not in ("definitions", "$defs"):
            raise _Unsupported(ref)  # %json parts carry only the definitions tables
        return node

    def array(self, schema: dict[str, Any]) -> str:
        item = self.value(schema["items"])
        low, high = max(schema.get("minItems", 0), 1), schema.get("maxItems")
        if high == 0:
            return self.rule(f'"[" {self.ws}"]"')
        more = f"{{{low - 1},}}" if high is None else f"{{{low - 1},{high - 1}}}"
        items = f'"[" {self.ws}{item} ({self.comma}{item}){more} {self.ws}"]"'
        if schema.get("minItems", 0) > 0:
            return self.rule(items)
        return self.rule(f'"[" {self.ws}"]" | {items}')

    def object(self, schema: dict[str, Any]) -> str | None:
        """The rules of one object; None: written as %json; "" no instance (a branch that
        requires a key it forbids)."""
        if len(self.rules) > MAX_LARK_RULES:
            raise _Unsupported("too many rules")
        props = schema.get("properties", {})
        required = schema.get("required", [])
        extra = schema.get("additionalProperties", True)
        if not isinstance(props, dict) or not isinstance(required, list):
            return None
        if any(not isinstance(r, str) for r in required):
            return None
        patterns = schema.get("patternProperties", {})
        if not isinstance(patterns, dict):
            return None
        listed = list(props)
        # a required key the properties do not list: a member whose value is the one pattern's
        # that matches it, or an extra one's
        for r in required:
            if r in props:
                continue
            matching = [p for p in patterns if _compiles(p) and re.search(p, r)]
            if len(matching) > 1:
                return None
            props = {**props, r: patterns[matching[0]] if matching else extra}
        if any(props[r] is False for r in required):
            return ""
        names = [n for n, s in props.items() if s is not False]
        keys = [self.rule(declared_key(n, lark_string(json.dumps(n, ensure_ascii=False))), "k")
                for n in names]
        values = [self.value(props[n]) for n in names]
        members = [self.rule(f"{k} {self.colon}{v}", "m") for k, v in zip(keys, values)]
        extra_member = self.extra_member(props, extra, patterns, listed)
        if extra_member is False:
            return None
        need = sorted({names.index(r) for r in required})  # a key listed twice is one key
        name = f"o{len(self.rules)}"
        listed = [names.index(r) for r in dict.fromkeys(required)]
        if extra_member is None and len(need) == len(names):  # OpenAI's strict-mode shape
            if listed != need:  # `required` lists them in another order: that one too
                self.num_reordered += 1
                self.rules.extend(required_in_order(name, members, [need, listed], None,
                                                    self.ws, self.comma))
            else:
                self.rules.extend(declared_order(name, members, need, None, self.ws,
                                                 self.comma))
            return name
        tracked_first = self.prefer_tracked and len(names) >= 4 and len(need) < len(names)
        if len(names) <= self.max_any_order and 1 << len(names) <= self.rules_left and (
                not tracked_first):
            self.rules_left -= 1 << len(names)
            if len(names) + (extra_member is not None) >= 2:
                self.num_reordered += 1
            self.rules.extend(any_order(name, members, need, extra_member, self.ws, self.comma))
            return name
        orders = [need] + ([listed] if listed != need else [])
        subsets = len(need) <= self.max_any_order and 1 << len(need) <= self.rules_left
        if not self.ws and len(names) <= MAX_TRACKED and (
                subsets or len(orders) * (len(need) + 1) <= self.rules_left):
            # the repeated-key checks take each member at most once (compact separators: the
            # ones they read), the grammar sees that the required ones are all written
            self.rules_left -= 1 << len(need) if subsets else len(orders) * (len(need) + 1)
            self.num_reordered += 1
            self.key_checks = True
            self.rules.extend(
                required_any_order(name, members, need, extra_member, "", self.comma)
                if subsets else
                required_in_order(name, members, orders, extra_member, "", self.comma))
            return name
        self.short_of_rules = True
        self.rules.extend(declared_order(name, members, need, extra_member, self.ws,
                                         self.comma))
        return name

    def extra_member(self, props: dict[str, Any], extra: Any, patterns: Any,
                     listed: list[str]) -> str | None | Literal[False]:
        """The rule of a member whose key is not declared (`patternProperties`' and
        `additionalProperties`' members), None when there is none, False when the patterns
        are outside what `pattern_key` writes (or match a name of `listed`, whose value would
        then have to satisfy both schemas: the other declared names hold the pattern's own
        schema, `object`). Pattern members may
        repeat a key: the repeated-key checks take those out (`key_checks`)."""
        if not patterns:
            if extra is False:
                return None
            key = self.rule(extra_key(list(props)), "K")
            return self.rule(f"{key} {self.colon}{self.value(extra)}", "m")
        if self.ws or not all(n.isascii() for n in props) or any(
                re.search(p, n) for p in patterns for n in listed if _compiles(p)):
            return False  # compact separators only (the key checks' ones), ASCII names
        alts = []
        for p, sub in patterns.items():
            body = pattern_key(p, list(props), [q for q in patterns if q != p])
            if body is None:
                return False
            alts.append(f"{self.rule(body, 'K')} {self.colon}{self.value(sub)}")
        if extra is not False:
            body = other_key(list(props), list(patterns))
            if body is None:
                return False
            alts.append(f"{self.rule(body, 'K')} {self.colon}{self.value(extra)}")
        self.key_checks = True
        return self.rule(" | ".join(alts), "m")

def _compiles(pattern: str) -> bool:
    try:
        re.compile(pattern)
    except (re.error, TypeError):
        return False
    return True


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _MAX_ITEMS


def _unescape(part: str) -> str:
    return part.replace("~1", "/").replace("~0", "~")
