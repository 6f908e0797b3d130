"""The llguidance backend: JSON schemas, regexes, lark / GBNF grammars and choices.

llguidance (the grammar engine of guidance, a Rust wheel) compiles lazily: a matcher on a
schema is ready in about a millisecond where xgrammar's compile of the same schema may take
seconds, it refuses every JSON Schema keyword it does not enforce (so it never lets an output
through that fails its schema) and it writes the same int32 token bitmask layout as xgrammar.

`GuidanceMatcher` gives an llguidance `LLMatcher` the matcher surface the rest of this room uses
(xgrammar's method names: `accept_token`, `rollback`, `fill_next_token_bitmask`,
`find_jump_forward_string` / `_tokens`, `fork`, `accept_string`, `is_completed`,
`is_terminated`), so the reasoning gate, jump-forward, repeated-key checks and
`complete_before_max_tokens` work on it unchanged. Differences it hides:

- llguidance knows one end-of-sequence id; any of the model's stop ids ends the grammar here
  (their bits are set wherever that one's is, and each is consumed as it);
- a token the grammar rejects would put an `LLMatcher` in a permanent error state, so each
  id is checked (`validate_tokens`, no state change; the end: `is_accepting`) before it is
  consumed;
- `is_stopped` is true as soon as nothing but the end may follow; termination here means the
  stop id was accepted, as in xgrammar;
- llguidance's JSON compiler writes an object's properties in the schema's order; a JSON
  schema is compiled as lark whose objects take them in any order where json_any_order.py
  applies (the schema's own compile otherwise);
- llguidance has no bound on a JSON number's digits; with bounded numbers a JSON matcher
  follows the text it accepted (`Digits`) and, at 16 integer, 16 fraction or 3 exponent
  digits, masks out the tokens that would write more (as the xgrammar backend's number rules).
"""

from __future__ import annotations

import functools
import json
import logging
import re
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import llguidance
import llguidance.hf
import numpy as np
import torch
from thinkgate.engine.structured.canonical import (
    SCHEMA_CACHE_SIZE,
    CanonicalSchema,
    canonical_tag,
)
from thinkgate.engine.structured.guidance_digits import DigitMasks, Digits
from thinkgate.engine.structured.json_any_order import MAX_ANY_ORDER_CHARS, any_order_grammar
from thinkgate.engine.structured.json_schema_rules import (
    allows_free_keys,
    open_non_ascii_names,
    subschemas,
)
from thinkgate.engine.structured.lark_tags import Unsatisfiable, plain_json_only, tag_lark
from thinkgate.engine.structured.schema_rewrites import rewrite_for_guidance

logger = logging.getLogger(__name__)


# JSON text as the xgrammar backend writes it with disable_any_whitespace (the default): the
# compact separators the repeated-key checks read (engine/structured/json_keys.py).
_COMPACT = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": ",
            "json_allow_general_unicode_escapes": True}
# With any whitespace: up to two spaces, or a newline and an indentation of up to 48 spaces or
# tabs (pretty-printed JSON) between tokens; never an endless run a model could pad with.
_ANY_WHITESPACE = {"whitespace_flexible": True, "json_allow_general_unicode_escapes": True,
                   "whitespace_pattern": r"[\x20\t]{0,2}(\n[\x20\t]{0,48})?"}


class GuidanceGrammar(NamedTuple):
    """A compiled constraint: the matcher each request's is copied from, whether JSON digits
    are bounded, and the property names past ASCII llguidance's own JSON compiled in an open
    object (it takes their `\\u` spelling as an extra key: the key checks have them written
    as is, json_keys.py)."""

    matcher: llguidance.LLMatcher
    bound_digits: bool
    raw_names: frozenset[str] = frozenset()


_SPECIAL_TOKEN = re.compile(rb"\xff\[(\d+)\]")  # a special token in llguidance's forced bytes


class GuidanceMatcher:
    """One request's llguidance matcher behind the xgrammar-named surface (module docstring)."""

    __slots__ = ("m", "backend", "_end_at", "_count", "digits")

    def __init__(self, matcher: llguidance.LLMatcher, backend: GuidanceBackend,
                 digits: Digits | None = None) -> None:
        self.m = matcher
        self.backend = backend
        self._end_at: int | None = None  # tokens consumed when the stop id was accepted
        self._count = 0  # tokens consumed (and not rolled back)
        self.digits = digits  # JSON with bounded numbers: the digits written

    def accept_token(self, token_id: int) -> bool:
        token = self.backend.eos if token_id in self.backend.stop_ids else int(token_id)
        if not 0 <= token < self.backend.vocab_size:  # e.g. -1: sampled under an empty mask
            return False
        # `validate_tokens` never counts the end of sequence: the grammar may end where it
        # accepts
        valid = self.m.is_accepting() if token == self.backend.eos else (
            self.m.validate_tokens([token]) == 1)
        if not valid or not self.m.consume_token(token):
            return False
        self._count += 1
        if token == self.backend.eos:
            self._end_at = self._count
        if self.digits is not None:
            self.digits.feed(self.backend.text(token))
        return True

    def accept_string(self, text: str) -> bool:
        ids = self.backend.tokenizer.tokenize_str(text)
        if not ids or self.m.validate_tokens(ids) != len(ids):
            return False
        self.m.consume_tokens(ids)
        self._count += len(ids)
        if self.digits is not None:
            for token in ids:
                self.digits.feed(self.backend.text(token))
        return True

    def rollback(self, num_tokens: int) -> None:
        if num_tokens > 0:
            self.m.rollback(num_tokens)
            self._count -= num_tokens
            if self._end_at is not None and self._count < self._end_at:
                self._end_at = None
            if self.digits is not None:
                self.digits.undo(num_tokens)

    def is_terminated(self) -> bool:
        return self._end_at is not None

    def is_completed(self) -> bool:
        return self.m.is_accepting()

    def fill_next_token_bitmask(self, bitmask: torch.Tensor, index: int = 0) -> None:
        row = bitmask[index]  # a contiguous int32 row of the host buffer
        self.m.unsafe_compute_mask_ptr(row.data_ptr(), row.numel() * 4)
        self.backend.widen_stop(row)
        if self.digits is not None and self.digits.run is not None:
            masks = self.backend.digit_masks
            if not masks.limit(row, self.digits.room) and self.digits.room <= 0:
                masks.keep_finishing(self.m, row)

    def find_jump_forward_string(self) -> str:
        """The text the grammar forces next; a forced special token (llguidance's bytes for
        it: 0xFF, then `[id]`) as the token's text, which `accept_string` takes back as it."""
        forced = self.m.compute_ff_bytes()
        if b"\xff" in forced:  # never a byte of UTF-8 text
            forced = _SPECIAL_TOKEN.sub(
                lambda m: self.backend.text(int(m.group(1))).encode(), forced)
        return forced.decode("utf-8", "ignore")

    def find_jump_forward_tokens(self) -> list[int]:
        return list(self.m.compute_ff_tokens())

    def fork(self) -> GuidanceMatcher:
        forked = GuidanceMatcher(self.m.deep_copy(), self.backend,
                                 self.digits.copy() if self.digits is not None else None)
        forked._count, forked._end_at = self._count, self._end_at
        return forked


class GuidanceBackend:
    """llguidance on one tokenizer. tokenizer: Hugging Face; vocab_size: the bitmask width;
    stop_token_ids: the model's stop ids (the first is llguidance's end of sequence);
    token_text: a token's text (`Grammar` passes its token-text index's, so the vocabulary is
    decoded once; default: the tokenizer's decode)."""

    name = "guidance"

    def __init__(self, tokenizer: Any, vocab_size: int, stop_token_ids: Sequence[int],
                 token_text: Callable[[int], str] | None = None) -> None:
        self.stop_ids = frozenset(int(i) for i in stop_token_ids)
        self.eos = int(sorted(stop_token_ids)[0])
        self.vocab_size = vocab_size
        # the tokenizer scan takes ~1 s at 151k tokens: built once per engine, off the loop
        self.tokenizer = llguidance.hf.from_tokenizer(tokenizer, n_vocab=vocab_size,
                                                      eos_token=self.eos)
        self._others = sorted(self.stop_ids - {self.eos})
        self.text = token_text or (lambda token: tokenizer.decode([token]))
        # per token: how many digits its text starts with (~0.1 s at 151k, with the scan above)
        self.digit_masks = DigitMasks(self.text, self.tokenizer.vocab_size, vocab_size)

    def compile(self, kind: str, text: str, any_whitespace: bool,
                bound_numbers: bool = True) -> tuple[Any, bool]:
        """((a matcher every request's matcher is copied from, whether its fraction digits are
        bounded), whether the output may have free-form JSON objects); `ValueError` with
        llguidance's reason when it refuses."""
        if kind in ("json", "json_object"):
            schema = rewrite_for_guidance(json.loads(text))
            free = kind == "json_object" or allows_free_keys(schema)
            parts: list[Any] = []  # what the any-order grammar left to llguidance's JSON
            found = (self._any_order(schema, any_whitespace, parts)
                     if kind == "json" and len(text) <= MAX_ANY_ORDER_CHARS else None)
            if found is not None:
                matcher, key_checks = found
                return (GuidanceGrammar(matcher, bound_numbers, _raw_names(text, parts)),
                        free or key_checks)
            options = _ANY_WHITESPACE if any_whitespace else _COMPACT
            grammar = llguidance.LLMatcher.grammar_from_json_schema(schema, defaults=options)
        elif kind == "regex":
            grammar, free = llguidance.LLMatcher.grammar_from_regex(text), False
        elif kind in ("grammar", "choice"):
            grammar, free = llguidance.grammar_from("grammar", text), False
        elif kind == "structural_tag":
            return self._compile_tag(canonical_tag(text), text, any_whitespace, bound_numbers)
        else:
            raise ValueError(f"the guidance backend does not compile {kind} constraints")
        matcher = llguidance.LLMatcher(self.tokenizer, grammar)
        if matcher.is_error():
            reason = matcher.get_error().splitlines()[0]
            if kind == "json":
                reason = _with_paths(reason, schema)
            raise ValueError(f"structured_outputs.{kind}: the guidance backend cannot compile "
                             f"it: {reason}")
        raw = _raw_names(text, [schema]) if kind == "json" else frozenset()
        return GuidanceGrammar(matcher, bound_numbers and kind in ("json", "json_object"),
                               raw), free

    def _any_order(self, schema: Any, any_whitespace: bool,
                   parts: list[Any]) -> tuple[llguidance.LLMatcher, bool] | None:
        """A matcher whose objects take their properties in any order (json_any_order.py) and
        whether it needs the repeated-key checks, or None where that does not apply or
        llguidance refuses the grammar (the schema is then compiled as it is, and refused
        there with llguidance's reason). `parts` gets the sub-schemas written as `%json`."""
        def json_text(sub: Any) -> str:
            return _json_text(json.dumps(sub, separators=(",", ":")), any_whitespace)

        found = any_order_grammar(schema, json_text, any_whitespace)
        if found is None:
            return None
        parts.extend(found.json_parts)
        matcher = llguidance.LLMatcher(self.tokenizer,
                                       llguidance.LLMatcher.grammar_from_lark(found.lark))
        return None if matcher.is_error() else (matcher, found.key_checks)

    def _compile_tag(self, tag: Any, text: str, any_whitespace: bool,
                     bound_numbers: bool) -> tuple[Any, bool]:
        """A structural tag as lark (lark_tags.py). A json_schema part no value satisfies (a
        tool parameter typed boolean with string enum values) fails llguidance's whole grammar:
        it is left out (an optional parameter) or its call is (a required one), and the rest
        compiles; with nothing left, ValueError. Such schemas are remembered, so only the
        first grammar that holds one compiles twice."""
        written: list[Any] = []  # the schemas tag_lark reached (free keys: the key checks)

        def json_text(schema: Any) -> str:
            written.append(schema)
            schema_text = (schema.text if isinstance(schema, CanonicalSchema)
                           else json.dumps(schema, separators=(",", ":")))
            return _json_text(schema_text, any_whitespace)

        # first with the schemas known to have no value; after a failure, each is checked
        for unsatisfiable in (_KNOWN_UNSATISFIABLE.__contains__, _unsatisfiable):
            written.clear()
            try:
                lark = tag_lark(tag, self.special_tokens, json_text, unsatisfiable)
            except Unsatisfiable as err:
                raise ValueError(f"structured_outputs.structural_tag: no call can be written: "
                                 f"{err}") from None
            matcher = llguidance.LLMatcher(self.tokenizer,
                                           llguidance.LLMatcher.grammar_from_lark(lark))
            error = matcher.get_error() if matcher.is_error() else ""
            if "Unsatisfiable schema" not in error:
                break
        if error:
            raise ValueError(f"structured_outputs.structural_tag: the guidance backend cannot "
                             f"compile it: {error.splitlines()[0]}")
        digits = bound_numbers and plain_json_only(tag)
        raw = _raw_names(text, written) if written else frozenset()
        return GuidanceGrammar(matcher, digits, raw), any(allows_free_keys(s) for s in written)

    @functools.cached_property
    def special_tokens(self) -> dict[str, int]:
        """Text -> id of the tokens llguidance keeps out of text (a lark grammar names them)."""
        return {self.tokenizer.decode_str([t]): t for t in range(self.tokenizer.vocab_size)
                if self.tokenizer.is_special_token(t) and self.tokenizer.decode_str([t])}

    def new_matcher(self, compiled: GuidanceGrammar) -> GuidanceMatcher:
        return GuidanceMatcher(compiled.matcher.deep_copy(), self,
                               Digits() if compiled.bound_digits else None)

    def widen_stop(self, row: torch.Tensor) -> None:
        """Where the grammar may end (its end-of-sequence bit is set), every stop id may end it."""
        if not self._others:
            return
        words = row.numpy().view(np.uint32)
        if not (int(words[self.eos >> 5]) >> (self.eos & 31)) & 1:
            return
        for token in self._others:
            words[token >> 5] |= np.uint32(1 << (token & 31))


# the keywords `rewrite_for_guidance` looks at (a schema without their names keeps its text)
_REWRITTEN_KEYS = ("oneOf", "not", "dependentRequired", "dependencies")


@functools.lru_cache(maxsize=SCHEMA_CACHE_SIZE)
def _json_text(schema_text: str, any_whitespace: bool) -> str:
    """A structural tag's JSON schema as `%json` takes it: rewritten for llguidance, with the
    request's whitespace options (each distinct schema once: a tool's parameters)."""
    options = _ANY_WHITESPACE if any_whitespace else _COMPACT
    if schema_text.startswith("{") and schema_text != "{}" and not any(
            f'"{key}"' in schema_text for key in _REWRITTEN_KEYS):
        # nothing to rewrite (most tools): the options spliced in, no JSON round trip
        return '{"x-guidance":' + json.dumps(options) + "," + schema_text[1:]
    schema = rewrite_for_guidance(json.loads(schema_text))
    if schema is True:
        schema = {}
    if isinstance(schema, dict):
        schema = {**schema, "x-guidance": options}
    return json.dumps(schema, ensure_ascii=False)


_KNOWN_UNSATISFIABLE: set[str] = set()


def _raw_names(text: str, schemas: list[Any]) -> frozenset[str]:
    """`open_non_ascii_names` of the schemas llguidance's JSON compiles (none past ASCII in an
    ASCII text: the common case costs a scan of the text)."""
    if text.isascii() and "\\u" not in text:
        return frozenset()
    return frozenset().union(*(open_non_ascii_names(s) for s in schemas))


def clear_schema_caches() -> None:
    """Forget the per-schema work of structural tags (benchmarks' cold compiles)."""
    _json_text.cache_clear()
    _unsatisfiable.cache_clear()
    _KNOWN_UNSATISFIABLE.clear()


@functools.lru_cache(maxsize=SCHEMA_CACHE_SIZE)
def _unsatisfiable(json_text: str) -> bool:
    """Whether llguidance finds no value for a `%json` schema text (~0.05 ms a schema)."""
    grammar = llguidance.LLMatcher.grammar_from_lark("start: %json " + json_text)
    if "Unsatisfiable schema" not in llguidance.LLMatcher.validate_grammar(grammar):
        return False
    if len(_KNOWN_UNSATISFIABLE) < SCHEMA_CACHE_SIZE:
        _KNOWN_UNSATISFIABLE.add(json_text)
    return True


def _with_paths(reason: str, schema: Any) -> str:
    """llguidance's 'Unimplemented keys: ["uniqueItems"]' with the JSON path of each."""
    if not reason.startswith("Unimplemented keys:"):
        return reason
    try:
        keys = json.loads(reason.split(":", 1)[1])
    except json.JSONDecodeError:
        return reason
    found = [f"{key} at {path or '/'}" for sub, path in subschemas(schema) for key in keys
             if key in sub]
    return f"it does not enforce {'; '.join(found)}" if found else reason
