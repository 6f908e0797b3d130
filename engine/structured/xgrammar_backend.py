"""The xgrammar backend: JSON schemas (with thinkgate's rules), structural tags, EBNF, regexes.

xgrammar compiles a constraint ahead of time into a grammar with a token-mask cache: masks are
fast, compiles of large schemas take seconds. Its JSON-schema compiler drops some keywords
without a word, so a schema is checked first (`check_enforceable`, json_schema_rules.py) and
refused with the keyword and its path unless the request asks for best effort. The grammar
text is then tightened: JSON strings never hold raw control characters and numbers are bounded
(unless `bound_numbers` is off). Structural tags (the tool-call formats) compile only here.
"""

from __future__ import annotations

import json
from typing import Any

import xgrammar as xgr
from thinkgate.engine.structured.json_schema_rules import (
    bound_number_rules,
    bound_schema_numbers,
    tag_schemas,
    unenforced_keywords,
)


class XGrammarBackend:
    """xgrammar on one tokenizer (`xgr.TokenizerInfo`); its own cache is off (ours is bounded)."""

    name = "xgrammar"

    def __init__(self, tokenizer_info: xgr.TokenizerInfo, max_threads: int = 1) -> None:
        self.tokenizer_info = tokenizer_info
        self.compiler = xgr.GrammarCompiler(tokenizer_info, max_threads=max_threads,
                                            cache_enabled=False)

    def compile(self, kind: str, text: str, *, any_whitespace: bool, bound_numbers: bool,
                best_effort: bool) -> tuple[xgr.CompiledGrammar, bool]:
        """(compiled grammar, whether it has free-form JSON objects, whose keys may repeat);
        `ValueError` naming the constraint when xgrammar refuses it or would not enforce it."""
        if not best_effort:
            if kind == "json":
                check_enforceable(json.loads(text))
            elif kind == "structural_tag":
                for schema, path in tag_schemas(json.loads(text)):
                    check_enforceable(schema, f"structured_outputs.structural_tag{path}")
        if kind == "json" and bound_numbers:
            text = json.dumps(bound_schema_numbers(json.loads(text)), separators=(",", ":"))
        try:
            if kind in ("json", "json_object", "structural_tag"):
                grammar = (xgr.Grammar.from_structural_tag(text) if kind == "structural_tag"
                           else xgr.Grammar.from_json_schema(text, any_whitespace=any_whitespace))
                compiled = self.compiler.compile_grammar(json_grammar_text(grammar,
                                                                           bound_numbers))
            elif kind == "regex":
                compiled = self.compiler.compile_regex(text)
            else:  # grammar, choice
                compiled = self.compiler.compile_grammar(text)
        except (RuntimeError, ValueError, TypeError) as err:
            raise ValueError(f"invalid structured_outputs.{kind} {short(text)}: "
                             f"{_xgrammar_reason(err)}") from None
        free = kind == "json_object" or (
            kind in ("json", "structural_tag", "grammar") and _has_free_objects(compiled))
        return compiled, free

    def new_matcher(self, compiled: xgr.CompiledGrammar) -> xgr.GrammarMatcher:
        return xgr.GrammarMatcher(compiled)


def check_enforceable(schema: Any, where: str = "structured_outputs.json") -> None:
    """ValueError naming each keyword of `schema` the grammar would not enforce (with its JSON
    path), and how to accept it anyway."""
    found = unenforced_keywords(schema)
    if found:
        raise ValueError(f"{where}: the grammar cannot enforce {'; '.join(found)}; remove it, "
                         "or set structured_outputs.best_effort to accept unenforced keywords")


def _has_free_objects(compiled: xgr.CompiledGrammar) -> bool:
    """Whether a rule of the grammar's own (not xgrammar's `basic_*` library) uses its
    free-form object or any-value rule."""
    return any(("basic_object" in line or "basic_any" in line)
               for line in str(compiled.grammar).splitlines()
               if not line.startswith("basic_"))


# xgrammar (0.2.9) writes length-bounded JSON strings with this character class, which lets raw
# control characters (invalid JSON) into the string; its unbounded strings exclude them.
_LAX_JSON_CHAR = '[^\\"\\\\\\r\\n]'
_STRICT_JSON_CHAR = '[^\\0-\\x1f\\"\\\\\\r\\n]'


def strict_json_strings(ebnf: str) -> str:
    """An xgrammar-generated grammar whose JSON string characters exclude control characters."""
    return ebnf.replace(_LAX_JSON_CHAR, _STRICT_JSON_CHAR)


def json_grammar_text(grammar: xgr.Grammar, bound_numbers: bool = True) -> str:
    """The EBNF of an xgrammar JSON / structural-tag grammar with strict strings and (unless
    `bound_numbers` is False) bounded numbers."""
    text = strict_json_strings(str(grammar))
    return bound_number_rules(text) if bound_numbers else text


def _xgrammar_reason(err: Exception) -> str:
    """xgrammar prefixes C++ messages with a timestamp and source position; keep the reason."""
    text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    if "] " in text and text.startswith("["):
        text = text.split("] ", 1)[1]
    if ": " in text and ".cc:" in text.split(": ", 1)[0]:
        text = text.split(": ", 1)[1]
    return text


def short(text: str, limit: int = 200) -> str:
    """`text` for an error message: repr, cut at `limit` characters."""
    return repr(text if len(text) <= limit else text[:limit] + "...")
