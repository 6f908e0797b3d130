"""The lark rules of one JSON object's members (json_any_order.py writes the rest of a schema).

An object is `{`, members separated by the request's item separator, `}`; a member is a key
rule, the key separator and a value rule (all written by the caller). `any_order` writes a rule
per set of members written (2^n for n members): the next member is any not yet written, `}`
once the required ones are all in, extra members (an open object's) once the required ones are
in. `declared_order` writes the members in their order, each optional one skippable, extra
members after them (what llguidance's JSON compiler accepts), in 2n + 2 rules. `extra_key` is
the terminal of an extra member's key: a JSON string that is no spelling of a declared name.
The separators are llguidance's JSON ones: compact `", "` / `": "`, or `WS?` around each token
(`WS`: its whitespace pattern).
"""

from __future__ import annotations

import re
from typing import Any

from thinkgate.engine.structured.json_schema_rules import subschemas

# an extra key: a JSON string whose `\u` escapes spell non-ASCII characters only (an ASCII one
# has its own spelling), so the spellings of the declared names to keep out stay short
EXTRA_KEY = (r'"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u(?:00[89a-fA-F][0-9a-fA-F]'
             r'|0[1-9a-fA-F][0-9a-fA-F]{2}|[1-9a-fA-F][0-9a-fA-F]{3}))*"')
WS = r"/[\x20\t]{1,2}(\n[\x20\t]{0,48})?|\n[\x20\t]{0,48}/"
_SHORT_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "\b": "b", "\f": "f", "\n": "n", "\r": "r",
                  "\t": "t"}


def key_spellings(name: str) -> str:
    """A regex of the spellings of `name` an extra key (`EXTRA_KEY`) could take: each
    character as is or as its short escape, a non-ASCII one also as `\\u` escapes (either
    case)."""
    out = []
    for ch in name:
        code = ord(ch)
        alts = [re.escape("\\" + _SHORT_ESCAPES[ch])] if ch in _SHORT_ESCAPES else []
        if ch not in '"\\' and code >= 0x20:
            alts.append(re.escape(ch))
        if code >= 0x80:
            units = [code] if code < 0x10000 else [0xD800 + ((code - 0x10000) >> 10),
                                                      0xDC00 + ((code - 0x10000) & 0x3FF)]
            alts.append("".join(r"\\u" + "".join(
                f"[{h.lower()}{h.upper()}]" if h.isalpha() else h for h in f"{u:04x}")
                for u in units))
        out.append(alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")")
    return '"' + "".join(out) + '"'


def any_order(name: str, members: list[str], required: list[int], extra: str | None, ws: str,
              comma: str) -> list[str]:
    """The rules of object `name` (`members`: member rule names, `required`: their indices,
    `extra`: an extra member's rule or None): `{`, then a rule per set of members written
    (bit i: member i). Extra members come once every required one is written: a search for
    a short completion (json_completion.py) then never loops on extra keys, nor does a
    model."""
    need = sum(1 << i for i in required)

    def then(written: int) -> list[str]:
        alts = [f"{m} {name}_{written | 1 << i}" for i, m in enumerate(members)
                if not written >> i & 1]
        more = extra is not None and written & need == need
        return alts + ([f"{extra} {name}_{written}"] if more else [])

    first = then(0) + (['"}"'] if not need else [])
    rules = [f'{name}: "{{" {ws}({" | ".join(first)})']
    for written in range(1 << len(members)):
        if written == 0 and (extra is None or need):
            continue  # no member written yet: only `{` leads there
        alts = [f"{comma}({' | '.join(then(written))})"] if then(written) else []
        if written & need == need:
            alts.append(f'{ws}"}}"')
        rules.append(f"{name}_{written}: {' | '.join(alts)}")
    return rules


def declared_order(name: str, members: list[str], required: list[int], extra: str | None,
                   ws: str, comma: str) -> list[str]:
    """The rules of object `name` with its members in the declared order (each optional
    one may be left out), extra members after them, as llguidance's JSON writes it.
    `{name}_f{i}`: nothing written yet, the next member is i or later; `{name}_r{i}`: the
    same after a member (a comma first)."""
    n, more = len(members), extra is not None
    rules = [f'{name}: "{{" {ws}{name}_f0',
             f'{name}_f{n}: ' + (f"{extra} {name}_r{n} | " if more else "") + '"}"',
             f'{name}_r{n}: ' + (f"{comma}{extra} {name}_r{n} | " if more else "") + f'{ws}"}}"']
    for i in reversed(range(n)):
        skip = i not in required
        rules.append(f"{name}_f{i}: {members[i]} {name}_r{i + 1}"
                     + (f" | {name}_f{i + 1}" if skip else ""))
        rules.append(f"{name}_r{i}: {comma}{members[i]} {name}_r{i + 1}"
                     + (f" | {name}_r{i + 1}" if skip else ""))
    return rules


def declared_key(name: str, literal: str) -> str:
    """The terminal body of a declared key: its JSON text (`literal`, a lark string) for an
    ASCII name; for a name past ASCII every spelling an extra key may not take (the
    characters as is or `\\u`-escaped in either case, `key_spellings`)."""
    return literal if name.isascii() else _regex(key_spellings(name))


def extra_key(declared: list[str]) -> str:
    """The terminal body of an extra key: `EXTRA_KEY` without the spellings of `declared`."""
    names = "|".join(key_spellings(n) for n in declared)
    return _regex(EXTRA_KEY) + (f" & ~{_regex(names)}" if names else "")


def _regex(pattern: str) -> str:
    return "/" + pattern.replace("/", "\\/") + "/"


def required_any_order(name: str, members: list[str], required: list[int], extra: str | None,
                       ws: str, comma: str) -> list[str]:
    """The rules of object `name` whose required members come in any order, tracked by a rule
    per set of them written (2^r for r required), the optional ones at any point (extra
    members once every required one is in). The grammar lets an optional member repeat: only
    for an object whose output the repeated-key checks watch (json_keys.py), which take the
    repeat out, so the two together take each member at most once, in any order."""
    optional = [m for i, m in enumerate(members) if i not in required]
    full = (1 << len(required)) - 1

    def then(done: int) -> list[str]:
        alts = [f"{m} {name}_{done}" for m in optional]
        alts += [f"{members[r]} {name}_{done | 1 << j}" for j, r in enumerate(required)
                 if not done >> j & 1]
        return alts + ([f"{extra} {name}_{done}"] if extra is not None and done == full else [])

    first = then(0) + (['"}"'] if not required else [])
    rules = [f'{name}: "{{" {ws}({" | ".join(first)})']
    for done in range(full + 1):
        alts = [f"{comma}({' | '.join(then(done))})"] if then(done) else []
        if done == full:
            alts.append(f'{ws}"}}"')
        rules.append(f"{name}_{done}: {' | '.join(alts)}")
    return rules


def required_in_order(name: str, members: list[str], orders: list[list[int]],
                      extra: str | None, ws: str, comma: str) -> list[str]:
    """The rules of object `name` whose required members come in one of `orders` (lists of
    their indices), the optional ones at any point, extra members after the last required
    one: `{name}_{k}_{i}` has i members of order k written. As `required_any_order`, only for
    an object the repeated-key checks watch."""
    num_required = len(orders[0])
    optional = [m for i, m in enumerate(members) if i not in orders[0]]

    def then(k: int, i: int) -> list[str]:
        alts = [f"{m} {name}_{k}_{i}" for m in optional]
        if i < num_required:
            alts.append(f"{members[orders[k][i]]} {name}_{k}_{i + 1}")
        elif extra is not None:
            alts.append(f"{extra} {name}_{k}_{i}")
        return alts

    first = [a for k in range(len(orders)) for a in then(k, 0)]
    rules = [f'{name}: "{{" {ws}({" | ".join(dict.fromkeys(first))})']
    for k in range(len(orders)):
        for i in range(num_required + 1):
            alts = [f"{comma}({' | '.join(then(k, i))})"] if then(k, i) else []
            if i == num_required:
                alts.append(f'{ws}"}}"')
            rules.append(f"{name}_{k}_{i}: {' | '.join(alts)}")
    return rules


# a key written without escapes, of printable ASCII: its text is its value, so a regex on the
# text is the schema's pattern on the key (ECMA and llguidance's regexes agree on ASCII once
# `\d`, `\w` and `.` are spelled out)
PLAIN_KEY = r'"[\x20\x21\x23-\x5b\x5d-\x7e]*"'
_CLASS_ESCAPES = {"d": "0-9", "w": "A-Za-z0-9_"}
_REFUSED_ESCAPES = frozenset("DWsSbBpPkcxu0123456789")


def pattern_key(pattern: str, declared: list[str], others: list[str]) -> str | None:
    """The terminal body of a key `pattern` (a `patternProperties` regex, unanchored as JSON
    Schema has it) matches, written as `PLAIN_KEY`, no spelling of a `declared` name and
    matched by none of the `others` patterns; None for a pattern outside the subset written
    here (lookarounds, inner anchors, Unicode classes, back references)."""
    body = _key_regex(pattern)
    if body is None:
        return None
    rest = [_key_regex(p) for p in others]
    if any(r is None for r in rest):
        return None
    names = "|".join(key_spellings(n) for n in declared)
    return " & ".join([_regex(body), _regex(PLAIN_KEY)]
                      + [f"~{_regex(r)}" for r in rest if r is not None]
                      + ([f"~{_regex(names)}"] if names else []))


def other_key(declared: list[str], patterns: list[str]) -> str | None:
    """The terminal body of a key no pattern matches (an additional member's, beside
    `patternProperties`): `PLAIN_KEY`, no spelling of a `declared` name; None as
    `pattern_key`."""
    rest = [_key_regex(p) for p in patterns]
    if any(r is None for r in rest):
        return None
    names = "|".join(key_spellings(n) for n in declared)
    return " & ".join([_regex(PLAIN_KEY)] + [f"~{_regex(r)}" for r in rest if r is not None]
                      + ([f"~{_regex(names)}"] if names else []))


def _key_regex(pattern: str) -> str | None:
    """A regex of the quoted keys `pattern` matches somewhere, or None (`pattern_key`)."""
    try:
        re.compile(pattern)
    except (re.error, TypeError):
        return None
    if "[]" in pattern or "[^]" in pattern:  # ECMA's empty and any-character classes
        return None
    out, depth, in_class, i = [], 0, False, 0
    start = pattern.startswith("^")
    end = pattern.endswith("$") and not pattern.endswith("\\$")
    core = pattern[1 if start else 0:len(pattern) - 1 if end else len(pattern)]
    while i < len(core):
        ch = core[i]
        if ch == "\\":
            nxt = core[i + 1:i + 2]
            if not nxt or nxt in _REFUSED_ESCAPES:
                return None
            if nxt in _CLASS_ESCAPES:
                out.append(_CLASS_ESCAPES[nxt] if in_class else f"[{_CLASS_ESCAPES[nxt]}]")
            else:
                out.append("\\" + nxt)
            i += 2
            continue
        if in_class:
            in_class = ch != "]"
        elif ch in "^$" or core.startswith("(?", i) or ch == "|" and depth == 0 and (
                start or end):
            return None
        elif ch == "[":
            in_class = True
        elif ch == ".":
            ch = "[^\\n]"
        elif ch in "()":
            depth += 1 if ch == "(" else -1
        out.append(ch)
        i += 1
    if in_class or depth:
        return None
    return '"' + ("" if start else ".*") + "(?:" + "".join(out) + ")" + ("" if end else ".*") + '"'


def may_reorder(schema: Any) -> bool:
    """Whether llguidance may take an object of `schema` in another order than declared (an
    object with properties, but a closed one whose every property is required, OpenAI's
    strict-mode shape, listed in `required` in the declared order): xgrammar, which keeps
    declared order, would then accept less (grammar_compile.py promotes a hot schema only
    when both accept the same)."""
    for sub, _ in subschemas(schema):
        props = sub.get("properties")
        if not isinstance(props, dict) or not props:
            continue
        required = sub.get("required", [])
        if sub.get("additionalProperties") is not False or not isinstance(required, list) or (
                set(props) - set(required)) or [r for r in dict.fromkeys(required)
                                                if r in props] != list(props):
            return True
    return False
