"""String formats written as the `pattern` that defines them, for both backends.

llguidance refuses `uri-reference`, `json-pointer` and `relative-json-pointer` (unknown to it),
and xgrammar's `uri-reference` refuses absolute URIs (`https://example.com/x`, measured with
xgrammar 0.2.9). Each of these formats has an exact grammar in its RFC, so
`formats_as_patterns(schema)` writes a node's `format` as an anchored `pattern` of that
grammar (a node that already has a `pattern` keeps its format: one string has one pattern).
The regexes accept the RFC's strings (never more):

- `uri-reference`: RFC 3986's URI-reference (an absolute URI or a relative reference; ASCII),
  but for hosts written as IP literals (`http://[::1]/`), which it leaves out;
- `json-pointer`: RFC 6901 (`/` segments, `~0` / `~1` the only escapes);
- `relative-json-pointer`: the draft's non-negative integer, then `#` or a JSON pointer.
"""

from __future__ import annotations

import json
from typing import Any

from thinkgate.engine.structured.json_schema_rules import subschemas

_HEX = "[0-9A-Fa-f]"
_UNRESERVED = r"A-Za-z0-9\-._~"
_SUB_DELIMS = r"!$&'()*+,;="
_PCT = f"%{_HEX}{_HEX}"
_PCHAR = f"(?:[{_UNRESERVED}{_SUB_DELIMS}:@]|{_PCT})"
_SEGMENT = f"{_PCHAR}*"
_SEGMENT_NZ = f"{_PCHAR}+"
_SEGMENT_NZ_NC = f"(?:[{_UNRESERVED}{_SUB_DELIMS}@]|{_PCT})+"
# RFC 3986's host is an IP literal (`[...]`: IPv6, IPvFuture), an IPv4 address or a reg-name;
# IPv4 addresses are reg-names too, and IP literals are left out: exact IPv6 costs llguidance
# ~25 ms and xgrammar ~1 s to compile, for hosts almost no URI in JSON has (narrower, never
# wider)
_HOST = f"(?:[{_UNRESERVED}{_SUB_DELIMS}]|{_PCT})*"
_USERINFO = f"(?:[{_UNRESERVED}{_SUB_DELIMS}:]|{_PCT})*"
_AUTHORITY = f"(?:{_USERINFO}@)?{_HOST}(?::[0-9]*)?"
_PATH_ABEMPTY = f"(?:/{_SEGMENT})*"
_PATH_ABSOLUTE = f"/(?:{_SEGMENT_NZ}(?:/{_SEGMENT})*)?"
_QUERY = f"(?:{_PCHAR}|[/?])*"
_TAIL = rf"(?:\?{_QUERY})?(?:#{_QUERY})?"
_SCHEME = r"[A-Za-z][A-Za-z0-9+\-.]*"
_HIER = f"(?://{_AUTHORITY}{_PATH_ABEMPTY}|{_PATH_ABSOLUTE}|{_SEGMENT_NZ}(?:/{_SEGMENT})*)?"
_RELATIVE = (f"(?://{_AUTHORITY}{_PATH_ABEMPTY}|{_PATH_ABSOLUTE}"
             f"|{_SEGMENT_NZ_NC}(?:/{_SEGMENT})*)?")
_JSON_POINTER = "(?:/(?:[^/~]|~[01])*)*"

PATTERNS = {
    "uri-reference": f"^(?:{_SCHEME}:{_HIER}{_TAIL}|{_RELATIVE}{_TAIL})$",
    "json-pointer": f"^{_JSON_POINTER}$",
    "relative-json-pointer": f"^(?:0|[1-9][0-9]*)(?:#|{_JSON_POINTER})$",
}


def formats_as_patterns(schema: Any, in_place: bool = False) -> Any:
    """`schema` with the formats of `PATTERNS` written as their pattern (module docstring);
    `schema` itself when none is there, else a copy (or `schema` changed, `in_place`)."""
    if not any(_rewritable(sub) for sub, _ in subschemas(schema)):
        return schema
    copy = schema if in_place else json.loads(json.dumps(schema))
    for sub, _ in subschemas(copy):
        if _rewritable(sub):
            sub["pattern"] = PATTERNS[sub.pop("format")]
    return copy


def _rewritable(sub: dict[str, Any]) -> bool:
    return isinstance(sub.get("format"), str) and sub["format"] in PATTERNS and (
        "pattern" not in sub)
