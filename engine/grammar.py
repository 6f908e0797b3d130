"""Structured outputs with xgrammar: compile once, one matcher per request, one batch bitmask.

`Grammar` is what the step loop talks to:

    rows = [seq.structured_state for seq in batch]      # RequestGrammar | None per row
    grammar.start_fill(rows)                             # CPU fill on a worker thread ...
    logits = model.forward(...)                          # ... while the forward runs
    bitmask = grammar.finish_fill()                      # (B, W) int32 on the logits' device
    ... sample with the bitmask (rows without a grammar are all-ones) ...
    grammar.accept(rows, token_ids)                      # advance matchers; errors per row

Compiled grammars are cached (bounded LRU, keyed by the tokenizer and the canonical constraint).
A bad schema, regex, EBNF grammar or structural tag raises `ValueError` from `new_request`, so the
engine rejects that request when it is added. A matcher that rejects a sampled token marks only
its own row with an error; the engine finishes that request and carries on.

The bitmask lives in one preallocated host buffer (pinned when the device is CUDA) and one device
buffer; each step fills rows [0, B) and copies them with `non_blocking=True`. Reusing the pinned
buffer is safe because the step loop reads the sampled ids back (a sync) before the next fill.
"""

from __future__ import annotations

import json
import logging
import time
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import torch
import xgrammar as xgr
from thinkgate.engine.reasoning_gate import ReasoningGate
from thinkgate.engine.sampling_params import StructuredOutputsParams

logger = logging.getLogger(__name__)

_ALL_ALLOWED = -1  # an int32 word with every bit set


def _bit(position: int) -> int:
    """The int32 word with only bit `position` set (bit 31 is the sign bit)."""
    return (1 << position) - (1 << 32 if position == 31 else 0)


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
        _check_schema(schema)
        return kind, json.dumps(schema, separators=(",", ":"))
    if kind == "json_object":
        return kind, '{"type":"object"}'
    if kind == "choice":
        return kind, choice_ebnf(params.choice or [])
    if kind == "structural_tag":
        tag = _load_json(params.structural_tag, "structural_tag")
        if params.disable_any_whitespace:
            tag = _bound_whitespace(tag)
        return kind, json.dumps(tag, separators=(",", ":"))
    return kind, str(getattr(params, kind))


def choice_ebnf(choices: Sequence[str]) -> str:
    """An EBNF grammar matching exactly one of `choices` (JSON string escapes are valid EBNF)."""
    return "root ::= " + " | ".join(json.dumps(c, ensure_ascii=False) for c in choices)


def _bound_whitespace(node: Any) -> Any:
    """A copy of a structural tag whose JSON parts allow at most one whitespace run character
    between tokens (xgrammar's default is unbounded, letting a model pad to max_tokens)."""
    if isinstance(node, list):
        return [_bound_whitespace(v) for v in node]
    if not isinstance(node, dict):
        return node
    if node.get("type") == "json_schema":  # its "json_schema" value is a schema: keep it as is
        return {"max_whitespace_cnt": 1, **node} if node.get("max_whitespace_cnt") is None else node
    return {k: _bound_whitespace(v) for k, v in node.items()}


def _load_json(value: Any, name: str) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError as err:
        raise ValueError(f"structured_outputs.{name} is not valid JSON ({err}): "
                         f"{_short(value)}") from None


def _check_schema(schema: dict[str, Any] | bool) -> None:
    try:
        import jsonschema
    except ImportError:  # xgrammar still rejects what it cannot compile
        return
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


class RequestGrammar:
    """One request's (one sample's) matcher plus its reasoning gate.

    The matcher sees only answer tokens: while `gate` says the row is thinking (and the
    constraint does not apply in reasoning), sampled ids go to the gate alone.
    """

    def __init__(self, compiled: xgr.CompiledGrammar, gate: ReasoningGate | None,
                 enable_in_reasoning: bool = False) -> None:
        self.matcher = xgr.GrammarMatcher(compiled)
        self.gate = gate
        self.enable_in_reasoning = enable_in_reasoning
        self.error: str | None = None

    @property
    def constrained(self) -> bool:
        """Whether the next token is constrained by the grammar."""
        if self.error is not None or self.matcher.is_terminated():
            return False
        return self.enable_in_reasoning or self.gate is None or self.gate.answering

    @property
    def waiting(self) -> bool:
        """Still thinking before its grammar applies: the row must not stop yet (a request
        whose answer is constrained cannot end inside its reasoning)."""
        if self.error is not None or self.matcher.is_terminated():
            return False
        return not self.constrained

    @property
    def is_terminated(self) -> bool:
        """The grammar accepted its stop token: the request is complete."""
        return self.matcher.is_terminated()

    def accept(self, token_id: int) -> bool:
        """Advance with a sampled id; False (and `error` set) when the grammar rejects it."""
        constrained = self.constrained
        if self.gate is not None:
            self.gate.advance(token_id)
        if not constrained:
            return self.error is None
        if not self.matcher.accept_token(int(token_id)):
            self.error = f"the grammar rejected token {token_id}"
            logger.warning("structured output: %s; ending the request", self.error)
            return False
        return True


class Grammar:
    """The engine's structured-output layer for one model: compile cache, matchers, bitmask.

    tokenizer: a Hugging Face tokenizer; vocab_size: the padded lm_head width (bitmask columns);
    stop_token_ids: the ids that end generation (the grammar's end is one of them).
    """

    def __init__(self, tokenizer: Any, vocab_size: int, stop_token_ids: Sequence[int], *,
                 max_num_seqs: int, device: torch.device | str = "cpu",
                 max_cache_entries: int = 128, num_fill_threads: int = 1) -> None:
        if not stop_token_ids:
            raise ValueError("Grammar needs at least one stop token id")
        self.vocab_size = vocab_size
        self.device = torch.device(device)
        info = xgr.TokenizerInfo.from_huggingface(
            tokenizer, vocab_size=vocab_size, stop_token_ids=list(stop_token_ids))
        key = f"{getattr(tokenizer, 'name_or_path', '')}|{vocab_size}|{sorted(stop_token_ids)}"
        self.cache = GrammarCompileCache(info, key, max_cache_entries)
        self.max_num_seqs = max_num_seqs
        self.num_words = (vocab_size + 31) // 32
        pin = self.device.type == "cuda"
        self._host = torch.full((max_num_seqs, self.num_words), _ALL_ALLOWED, dtype=torch.int32,
                                pin_memory=pin)  # (max_num_seqs, W)
        self._device_buf = (self._host if self.device.type == "cpu" else
                            torch.empty_like(self._host, device=self.device))
        self._no_stop = torch.full((self.num_words,), _ALL_ALLOWED, dtype=torch.int32)  # (W,)
        for token in stop_token_ids:
            self._no_stop[token // 32] &= ~_bit(token % 32)
        self._batch_matcher = xgr.BatchGrammarMatcher(max_threads=num_fill_threads)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="grammar-fill")
        self._pending: Future[tuple[int, int]] | None = None
        self.last_fill_s = 0.0  # CPU seconds of the last fill (for the overlap benchmark)
        self.last_wait_s = 0.0  # seconds the step loop waited for it (the exposed part)

    def new_request(self, params: StructuredOutputsParams,
                    gate: ReasoningGate | None = None) -> RequestGrammar:
        """Compile (or fetch) the constraint and start a matcher; `ValueError` when it is bad."""
        compiled = self.cache.get(params)
        return RequestGrammar(compiled, gate, params.enable_in_reasoning)

    # ---- per step ----
    def start_fill(self, rows: Sequence[RequestGrammar | None],
                   forced: Sequence[int | None] | None = None) -> None:
        """Begin filling the bitmask rows of this batch on the worker thread. `forced[i]`, when
        not None, is the only id row i may sample (a thinking budget forcing the end marker)."""
        if len(rows) > self.max_num_seqs:
            raise ValueError(f"batch of {len(rows)} rows exceeds max_num_seqs={self.max_num_seqs}")
        assert self._pending is None, "finish_fill was not called after start_fill"
        forced_list = list(forced) if forced is not None else [None] * len(rows)
        self._pending = self._pool.submit(self._fill, list(rows), forced_list)

    def finish_fill(self) -> torch.Tensor | None:
        """Wait for the fill; the (B, W) bitmask on the device, or None when no row is masked."""
        assert self._pending is not None, "start_fill was not called"
        start = time.perf_counter()
        batch, num_masked = self._pending.result()
        self.last_wait_s = time.perf_counter() - start
        self._pending = None
        if num_masked == 0:
            return None
        if self._device_buf is self._host:
            return self._host[:batch]
        out = self._device_buf[:batch]
        out.copy_(self._host[:batch], non_blocking=True)
        return out

    def fill_bitmask(self, rows: Sequence[RequestGrammar | None],
                     forced: Sequence[int | None] | None = None) -> torch.Tensor | None:
        """`start_fill` then `finish_fill`, for callers with nothing to overlap."""
        self.start_fill(rows, forced)
        return self.finish_fill()

    def _fill(self, rows: list[RequestGrammar | None], forced: list[int | None]
              ) -> tuple[int, int]:
        """Fill rows [0, B) of the host buffer; (B, number of masked rows)."""
        start = time.perf_counter()
        host = self._host
        matchers, indices, num_fixed = [], [], 0
        for i, (row, token) in enumerate(zip(rows, forced)):
            if token is not None:
                host[i].zero_()
                host[i, token // 32] = _bit(token % 32)
                num_fixed += 1
            elif row is not None and row.constrained:
                matchers.append(row.matcher)
                indices.append(i)
            elif row is not None and row.waiting:
                host[i].copy_(self._no_stop)
                num_fixed += 1
            else:
                host[i].fill_(_ALL_ALLOWED)
        if len(matchers) == 1:
            matchers[0].fill_next_token_bitmask(host, indices[0])
        elif matchers:
            self._batch_matcher.batch_fill_next_token_bitmask(matchers, host, indices)
        self.last_fill_s = time.perf_counter() - start
        return len(rows), len(matchers) + num_fixed

    def accept(self, rows: Sequence[RequestGrammar | None], token_ids: Sequence[int]) -> list[int]:
        """Advance each row's matcher with its sampled id; the row indices whose grammar
        rejected the token (those requests must end with an error)."""
        failed = []
        for i, (row, token) in enumerate(zip(rows, token_ids)):
            if row is not None and not row.accept(token):
                failed.append(i)
        return failed

    def close(self) -> None:
        self._pool.shutdown(wait=True)
