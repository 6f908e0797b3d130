"""Close the arguments of a call cut off mid-JSON, so they stay valid JSON.

A stream cannot take back argument text it already sent; when the output ends inside a call the
interpreter gets the shortest suffix that makes the sent text a JSON object (the call is still
not *completed*: no ``ToolEnd``, so ``finish_reason`` stays the engine's).
"""

from __future__ import annotations

import json

_LITERALS = ("true", "false", "null")


def json_completion(prefix: str) -> str | None:
    """A suffix making ``prefix`` valid JSON, or None if none of the simple repairs works."""
    if not prefix.strip():
        return "{}"
    stack: list[str] = []
    in_string = escape = False
    hex_left = 0  # digits still owed by a \uXXXX escape the prefix stops in
    key_string = False
    expect = "value"  # value, key, colon, comma
    last = ""
    for ch in prefix:
        if in_string:
            if hex_left:
                hex_left -= 1
            elif escape:
                escape = False
                hex_left = 4 if ch == "u" else 0
            elif ch == "\\":
                escape = True
            elif ch == '"':
                in_string = False
                expect = "colon" if key_string else "comma"
            continue
        if ch in " \t\r\n":
            continue
        last = ch
        if ch == '"':
            in_string, key_string = True, expect == "key"
        elif ch in "{[":
            stack.append("}" if ch == "{" else "]")
            expect = "key" if ch == "{" else "value"
        elif ch in "}]":
            if stack:
                stack.pop()
            expect = "comma"
        elif ch == ":":
            expect = "value"
        elif ch == ",":
            expect = "key" if stack and stack[-1] == "}" else "value"
        else:
            expect = "comma"
    closers = "".join(reversed(stack))
    candidates: list[str] = []
    if in_string:
        head = "0" * hex_left + ('\\"' if escape else '"')
        candidates.append(head + (": null" if key_string else "") + closers)
    elif expect == "colon":
        candidates.append(": null" + closers)
    elif expect == "value" and last in (":", ","):
        candidates.append("null" + closers)
    elif expect == "key" and last == ",":
        candidates.append('"": null' + closers)
    else:
        tail = prefix.rstrip()
        word = tail[len(tail.rstrip("abcdefghijklmnopqrstuvwxyz")):]
        for lit in _LITERALS:
            if word and lit.startswith(word):
                candidates.append(lit[len(word):] + closers)
        candidates += [closers, "0" + closers]
    for suffix in candidates:
        try:
            if isinstance(json.loads(prefix + suffix), dict):
                return suffix
        except ValueError:
            continue
    return None
