"""Compiling constraints with xgrammar: canonical keys, a bounded cache, clear errors.

`GrammarCompileCache.get(params)` turns a `StructuredOutputsParams` into an xgrammar
`CompiledGrammar`, once per distinct constraint and tokenizer; a bad schema, regex, EBNF grammar
or structural tag raises `ValueError` naming it. JSON grammars never allow unbounded whitespace
(structural tags get at most one whitespace character between JSON tokens) and their strings
never allow raw control characters.
"""

from __future__ import annotations

import functools
import json
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import xgrammar as xgr
from thinkgate.engine.sampling_params import StructuredOutputsParams


class GrammarCompileCache:
    """Compiled grammars for one tokenizer, at most `max_entries` of them (least recently used
    are dropped). Keys are the constraint's kind plus its canonical text, so the same schema
    written with different key order or whitespace compiles once."""

    def __init__(self, tokenizer_info: xgr.TokenizerInfo, tokenizer_key: str,
                 max_entries: int = 128, max_threads: int = 1) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries}")
        self.tokenizer_info = tokenizer_info
        self.tokenizer_key = tokenizer_key
        self.max_entries = max_entries
        # xgrammar's own cache is unbounded; ours replaces it.
        self._compiler = xgr.GrammarCompiler(tokenizer_info, max_threads=max_threads,
                                             cache_enabled=False)
        self._entries: OrderedDict[tuple[str, str, str], xgr.CompiledGrammar] = OrderedDict()
        self.num_hits = 0
        self.num_misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, params: StructuredOutputsParams) -> xgr.CompiledGrammar:
        """The compiled grammar of `params`; `ValueError` naming the constraint when it is bad."""
        kind, text = canonical_constraint(params)
        key = (self.tokenizer_key, kind, text)
        compiled = self._entries.get(key)
        if compiled is not None:
            self.num_hits += 1
            self._entries.move_to_end(key)
            return compiled
        self.num_misses += 1
        compiled = self._compile(kind, text, params)
        self._entries[key] = compiled
        if len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)
        return compiled

    def _compile(self, kind: str, text: str, params: StructuredOutputsParams) -> xgr.CompiledGrammar:
        any_ws = not params.disable_any_whitespace
        try:
            if kind in ("json", "json_object"):
                grammar = xgr.Grammar.from_json_schema(text, any_whitespace=any_ws)
                return self._compiler.compile_grammar(strict_json_strings(str(grammar)))
            if kind == "structural_tag":
                grammar = xgr.Grammar.from_structural_tag(text)
                return self._compiler.compile_grammar(strict_json_strings(str(grammar)))
            if kind == "regex":
                return self._compiler.compile_regex(text)
            return self._compiler.compile_grammar(text)  # grammar, choice
        except (RuntimeError, ValueError, TypeError) as err:
            raise ValueError(f"invalid structured_outputs.{kind} {_short(text)}: "
                             f"{_xgrammar_reason(err)}") from None


# xgrammar (0.2.9) writes length-bounded JSON strings with this character class, which lets raw
# control characters (invalid JSON) into the string; its unbounded strings exclude them.
_LAX_JSON_CHAR = '[^\\"\\\\\\r\\n]'
_STRICT_JSON_CHAR = '[^\\0-\\x1f\\"\\\\\\r\\n]'


def strict_json_strings(ebnf: str) -> str:
    """An xgrammar-generated grammar whose JSON string characters exclude control characters."""
    return ebnf.replace(_LAX_JSON_CHAR, _STRICT_JSON_CHAR)


def canonical_constraint(params: StructuredOutputsParams) -> tuple[str, str]:
    """(kind, canonical text) of a constraint; checks JSON schemas before xgrammar sees them."""
    kind = params.kind
    if kind == "json":
        schema = _load_json(params.json, "json")
        if not isinstance(schema, dict | bool):
            raise ValueError(f"structured_outputs.json must be a JSON schema object, got "
                             f"{_short(json.dumps(schema))}")
        text = json.dumps(schema, separators=(",", ":"))
        _check_schema(text)
        return kind, text
    if kind == "json_object":
        return kind, '{"type":"object"}'
    if kind == "choice":
        return kind, choice_ebnf(params.choice or [])
    if kind == "structural_tag":
        tag = _load_json(params.structural_tag, "structural_tag")
        if params.disable_any_whitespace:
            tag = bound_json_whitespace(tag)
        return kind, json.dumps(tag, separators=(",", ":"))
    return kind, str(getattr(params, kind))


def choice_ebnf(choices: Sequence[str]) -> str:
    """An EBNF grammar matching exactly one of `choices` (JSON string escapes are valid EBNF)."""
    return "root ::= " + " | ".join(json.dumps(c, ensure_ascii=False) for c in choices)


def bound_json_whitespace(node: Any) -> Any:
    """A copy of a structural tag whose JSON parts allow at most one whitespace run character
    between tokens (xgrammar's default is unbounded, letting a model pad to max_tokens)."""
    if isinstance(node, list):
        return [bound_json_whitespace(v) for v in node]
    if not isinstance(node, dict):
        return node
    if node.get("type") == "json_schema":  # its "json_schema" value is a schema: keep it as is
        return {"max_whitespace_cnt": 1, **node} if node.get("max_whitespace_cnt") is None else node
    return {k: bound_json_whitespace(v) for k, v in node.items()}


def _load_json(value: Any, name: str) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError as err:
        raise ValueError(f"structured_outputs.{name} is not valid JSON ({err}): "
                         f"{_short(value)}") from None


@functools.lru_cache(maxsize=256)
def _check_schema(text: str) -> None:
    """Validate a schema (canonical JSON text) against its meta-schema, once per distinct schema:
    a meta-schema check costs milliseconds, and most requests repeat a schema."""
    import jsonschema

    schema = json.loads(text)
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as err:
        raise ValueError(f"invalid structured_outputs.json schema: {err.message} "
                         f"(at {list(err.absolute_path)})") from None


def _xgrammar_reason(err: Exception) -> str:
    """xgrammar prefixes C++ messages with a timestamp and source position; keep the reason."""
    text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    if "] " in text and text.startswith("["):
        text = text.split("] ", 1)[1]
    if ": " in text and ".cc:" in text.split(": ", 1)[0]:
        text = text.split(": ", 1)[1]
    return text


def _short(text: str, limit: int = 200) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")
