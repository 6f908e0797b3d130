"""Reading one pythonic keyword argument that Python itself rejects, as vLLM's parsers recover it.

Models write shell commands as pythonic string arguments and break Python's syntax in a few
common ways: a raw newline (or NUL) inside a string, a zero-padded integer (``month=07``), and
same-style quotes nested in a string (``command='sed -n '1,9p' f.py'``). Each repair below keeps
the value exactly as the model wrote it; a text none of them makes parse is left to the caller.
"""

from __future__ import annotations

import ast
import re
import warnings
from typing import Any

_CTRL = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\x00": "\\x00"}
_PADDED = re.compile(r"(?<![\w.])0+(?=\d)(\d+)(?![\w.])")


def parse_keyword(text: str) -> tuple[str, ast.AST] | None:
    """``key=value`` -> (key, value node), trying the repairs in turn; None if none parses."""
    candidates = [text]
    fixed = _outside_strings(text, lambda s: _PADDED.sub(r"\1", s))
    candidates.append(_escape_ctrl(fixed))
    requoted = _requote(fixed)
    if requoted is not None:
        candidates.append(_escape_ctrl(requoted))
    for cand in candidates:
        got = _keyword(cand)
        if got is not None:
            return got
    return None


def _keyword(text: str) -> tuple[str, ast.AST] | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # `\,` in a shell command: an invalid escape, kept
            call = ast.parse(f"_({text})", mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    if not isinstance(call, ast.Call) or call.args or len(call.keywords) != 1:
        return None
    kw = call.keywords[0]
    return (kw.arg, kw.value) if kw.arg is not None else None


def _string_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of each one-quote string literal (quotes included), escapes honoured."""
    spans, i, n = [], 0, len(text)
    while i < n:
        if text[i] in "'\"":
            q, j = text[i], i + 1
            while j < n and text[j] != q:
                j += 2 if text[j] == "\\" else 1
            spans.append((i, min(j + 1, n)))
            i = j + 1
        else:
            i += 1
    return spans


def _outside_strings(text: str, fn: Any) -> str:
    out, last = [], 0
    for a, b in _string_spans(text):
        out += [fn(text[last:a]), text[a:b]]
        last = b
    out.append(fn(text[last:]))
    return "".join(out)


def _escape_ctrl(text: str) -> str:
    """Escape raw control characters inside string literals (their values stay the same)."""
    out, last = [], 0
    for a, b in _string_spans(text):
        out += [text[last:a], "".join(_CTRL.get(c, c) for c in text[a:b])]
        last = b
    out.append(text[last:])
    return "".join(out)


def _requote(text: str) -> str | None:
    """``key='..'..'..'``: a value that is one string whose inner quotes were not escaped.

    The value's first and last characters are its quotes; every unescaped inner one is escaped.
    """
    key, eq, value = text.partition("=")
    value = value.strip()
    if not eq or len(value) < 2 or value[0] not in "'\"" or value[-1] != value[0]:
        return None
    q, inner, out, i = value[0], value[1:-1], [], 0
    while i < len(inner):
        ch = inner[i]
        if ch == "\\" and i + 1 < len(inner):
            out.append(inner[i:i + 2])
            i += 2
            continue
        out.append("\\" + q if ch == q else ch)
        i += 1
    return f"{key}={q}{''.join(out)}{q}"
