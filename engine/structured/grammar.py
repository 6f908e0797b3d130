"""Structured outputs: compile once (xgrammar or llguidance), one matcher per request, one bitmask.

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

import logging
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import torch
import xgrammar as xgr
from thinkgate.engine.sampling_params import StructuredOutputsParams
from thinkgate.engine.structured.backend import Matcher
from thinkgate.engine.structured.canonical import warm_meta_schema_check
from thinkgate.engine.structured.grammar_compile import GrammarCompileCache
from thinkgate.engine.structured.json_completion import CompletionPlanner
from thinkgate.engine.structured.json_keys import KeyTracker, VocabIndex
from thinkgate.engine.structured.reasoning_slots import RowGate

logger = logging.getLogger(__name__)

_ALL_ALLOWED = -1  # an int32 word with every bit set


class RequestGrammar:
    """One request's (one sample's) matcher plus its reasoning gate.

    The matcher sees only answer tokens: while `gate` (the state read back from the device
    after the last step) says the row is thinking and the constraint does not apply in
    reasoning, sampled ids are not the grammar's.
    """

    def __init__(self, matcher: Matcher, gate: RowGate | None,
                 enable_in_reasoning: bool = False,
                 planner: CompletionPlanner | None = None,
                 keys: tuple[KeyTracker, VocabIndex] | None = None,
                 backend: str = "xgrammar") -> None:
        self.matcher = matcher
        self.backend = backend  # which backend compiled the constraint
        self.keys = keys  # free-form objects: the keys written so far (json_keys.py)
        self.gate = gate
        self.enable_in_reasoning = enable_in_reasoning
        self.error: str | None = None
        # complete_before_max_tokens (engine/structured/json_completion.py): the plan that fits
        self.planner = planner
        if planner is not None:
            planner.start(self.matcher)
        self.written: int | None = None  # the id `accept` wrote (the plan's may replace one)
        # The matcher's state changes only in `accept`, so its termination is read once there
        # (the step asks `constrained` several times per row: fill, gate inputs, accept).
        self._terminated = self.matcher.is_terminated()

    @property
    def constrained(self) -> bool:
        """Whether the next token is constrained by the grammar."""
        if self.error is not None or self._terminated:
            return False
        return self.enable_in_reasoning or self.gate is None or self.gate.answering

    @property
    def waiting(self) -> bool:
        """Still thinking before its grammar applies: the row must not stop yet (a request
        whose answer is constrained cannot end inside its reasoning)."""
        if self.error is not None or self._terminated:
            return False
        return not (self.enable_in_reasoning or self.gate is None or self.gate.answering)

    @property
    def forced_token(self) -> int | None:
        """The id the plan forces this step (complete_before_max_tokens), else None."""
        if self.planner is None or not self.constrained:
            return None
        return self.planner.forced_token

    @property
    def completed_at_max_tokens(self) -> bool:
        """The forced completion is written: the request ends ("length")."""
        return self.planner is not None and self.planner.finished()

    @property
    def is_terminated(self) -> bool:
        """The grammar accepted its stop token: the request is complete."""
        return self._terminated

    def accept(self, token_id: int, tokens_left: int | None = None) -> bool:
        """Advance with a sampled id; False (and `error` set) when the grammar rejects it. Call
        before the gate's state after this step is read back: the id is the grammar's only if
        the grammar applied when it was sampled. With a planner, `tokens_left` (after this id)
        lets the plan replace an id after which no completion fits: `written` is the id to
        keep."""
        self.written = int(token_id)
        if not self.constrained:
            return self.error is None
        if self.planner is not None and tokens_left is not None:
            self.written, ok = self.planner.accept(self.matcher, int(token_id), tokens_left)
        else:
            ok = self.matcher.accept_token(int(token_id))
        if ok and self.keys is not None:
            tracker, index = self.keys
            tracker.feed(index.text(self.written))
        if not ok:
            self.error = f"the grammar rejected token {token_id}"
            logger.warning("structured output: %s; ending the request", self.error)
            return False
        self._terminated = self.matcher.is_terminated()
        return True

    def masks_along(self, draft: list[int], words: int, jumps: bool,
                    out: torch.Tensor | None = None) -> tuple[list[int], torch.Tensor]:
        """Speculative decoding (engine/speculative.py): the draft cut before the first id the
        grammar rejects or one that ends it, with the mask after each kept id, as a
        step would fill it (the repeated-key checks on a copy of the key tracker); the matcher
        is back where it was. With `jumps` (jump-forward applies to the row) the draft is also
        cut before an id after which the grammar forces text: plain decoding writes that text
        as jump-forward ids, not samples. The masks go to `out` ((len(draft), words) int32,
        contiguous rows) when given."""
        matcher = self.matcher
        buf = torch.empty(len(draft), words, dtype=torch.int32) if out is None else out
        tracker = self.keys[0].copy() if self.keys is not None else None
        n = 0
        for token in draft:
            if not matcher.accept_token(int(token)):
                break
            # the id that ends the grammar is left to the verify step's sample (a matcher
            # past its end has no mask and no jump-forward text)
            if matcher.is_terminated() or (jumps and matcher.find_jump_forward_string()):
                matcher.rollback(1)
                break
            matcher.fill_next_token_bitmask(buf, n)
            if tracker is not None and self.keys is not None:
                index = self.keys[1]
                tracker.feed(index.text(int(token)))
                _clear_repeated_keys(buf[n], tracker, index)
            n += 1
        if n:
            matcher.rollback(n)
        return draft[:n], buf[:n]

    def take_planned(self, limit: int) -> list[int]:
        """While a completion plan is forced: its ids but the last (at most `limit`), accepted
        by the matcher, for the engine to write in one forward (see `CompletionPlanner`)."""
        if self.planner is None or not self.constrained:
            return []
        ids = self.planner.take_forced(self.matcher, limit)
        if ids and self.keys is not None:
            tracker, index = self.keys
            for token in ids:
                tracker.feed(index.text(token))
        return ids

    def note_forced(self, ids: list[int], room: int) -> bool:
        """Jump-forward ids the matcher accepted outside `accept` (jump_forward.py),
        `room` tokens left after them: the key tracker and the completion plan follow them.
        False when no completion would fit after them: the matcher is rolled back over them
        and they must not be written."""
        if self.planner is not None and not self.planner.note_forced(self.matcher, ids, room):
            self.matcher.rollback(len(ids))
            return False
        if self.keys is not None:
            tracker, index = self.keys
            for token in ids:
                tracker.feed(index.text(token))
        return True


def _guidance_backend(tokenizer: Any, vocab_size: int, stop_token_ids: Sequence[int],
                      token_text: Any) -> Any:
    from thinkgate.engine.structured.guidance_backend import GuidanceBackend

    return GuidanceBackend(tokenizer, vocab_size, stop_token_ids, token_text)


def _clear_repeated_keys(row: torch.Tensor, tracker: KeyTracker, index: VocabIndex) -> None:
    """Disallow the tokens that would close a key the current JSON object already has, or
    write an escape a key may not take (json_keys.py)."""
    prefixes = tracker.forbidden_prefixes(index)
    for found in (index.ids_for(prefixes) if prefixes else None,
                  tracker.refused_escapes(index)):
        if found is not None:
            words, keep = found
            np.bitwise_and.at(row.numpy().view(np.uint32), words, keep)


def _bit_word(bit: int) -> int:
    """The int32 word with only `bit` set."""
    return (1 << bit) - (1 << 32) if bit == 31 else 1 << bit


class _Inline:
    """A fill deferred to `finish_fill` (the no-overlap path), shaped like a Future."""

    def __init__(self, fn: Any, *args: Any) -> None:
        self._fn, self._args = fn, args

    def result(self) -> tuple[int, int]:
        return self._fn(*self._args)


class Grammar:
    """The engine's structured-output layer for one model: compile cache, matchers, bitmask.

    tokenizer: a Hugging Face tokenizer; vocab_size: the padded lm_head width (bitmask columns);
    stop_token_ids: the ids that end generation (the grammar's end is one of them).
    """

    def __init__(self, tokenizer: Any, vocab_size: int, stop_token_ids: Sequence[int], *,
                 max_num_seqs: int, device: torch.device | str = "cpu",
                 max_cache_entries: int = 128, num_fill_threads: int = 1,
                 overlap: bool | None = None, bound_numbers: bool = True,
                 backend: str = "auto", disable_additional_properties: bool = False) -> None:
        if not stop_token_ids:
            raise ValueError("Grammar needs at least one stop token id")
        self.vocab_size = vocab_size
        self.tokenizer = tokenizer
        self._vocab_index: VocabIndex | None = None
        self.device = torch.device(device)
        info = xgr.TokenizerInfo.from_huggingface(
            tokenizer, vocab_size=vocab_size, stop_token_ids=list(stop_token_ids))
        key = f"{getattr(tokenizer, 'name_or_path', '')}|{vocab_size}|{sorted(stop_token_ids)}"
        self.cache = GrammarCompileCache(
            info, key, max_cache_entries, bound_numbers=bound_numbers, backend=backend,
            disable_additional_properties=disable_additional_properties,
            guidance=lambda: _guidance_backend(tokenizer, vocab_size, stop_token_ids,
                                               self.vocab_index.text))
        self.max_num_seqs = max_num_seqs
        self.num_words = (vocab_size + 31) // 32
        pin = self.device.type == "cuda"
        self._host = torch.full((max_num_seqs, self.num_words), _ALL_ALLOWED, dtype=torch.int32,
                                pin_memory=pin)  # (max_num_seqs, W)
        self._device_buf = (self._host if self.device.type == "cpu" else
                            torch.empty_like(self._host, device=self.device))
        self._batch_matcher = xgr.BatchGrammarMatcher(max_threads=num_fill_threads)
        # Overlap the fill with the forward on a worker thread (xgrammar releases the GIL) when
        # the forward runs on a GPU. On CPU the fill runs inline in finish_fill: the thread's
        # hand-offs and its GIL contention with the forward's Python cost more than the fill
        # (demo model, batch 8, one torch thread: ~290 us per step against a 60 us fill).
        if overlap is None:
            overlap = self.device.type == "cuda"
        self.overlap = overlap
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="grammar-fill")
        self._pending: Future[tuple[int, int]] | _Inline | None = None
        self.last_fill_s = 0.0  # CPU seconds of the last fill (for the overlap benchmark)
        self.last_wait_s = 0.0  # seconds finish_fill took (the part not hidden by the forward)

    def new_request(self, params: StructuredOutputsParams, gate: RowGate | None = None,
                    planner: CompletionPlanner | None = None) -> RequestGrammar:
        """Compile (or fetch) the constraint and start a matcher; `ValueError` when it is bad."""
        entry = self.cache.get_entry(params)
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("structured output: a %s constraint on %s%s", params.kind,
                         entry.backend, " (free-form objects: key checks)"
                         if entry.free_objects else "")
        keys = ((KeyTracker(entry.raw_names), self.vocab_index) if entry.free_objects
                else None)
        return RequestGrammar(self.cache.new_matcher(entry), gate, params.enable_in_reasoning,
                              planner, keys, entry.backend)

    def warm_up(self) -> None:
        """The one-time costs a first constrained request would otherwise pay: the token-text
        index of the repeated-key checks (~1 s at 151k), the llguidance tokenizer (~1.4 s at
        151k, unless the backend is xgrammar alone) and jsonschema's meta-schema validators
        (~0.25 s)."""
        self.vocab_index  # noqa: B018 (built on first use)
        if self.cache.backend != "xgrammar":
            self.cache.guidance.special_tokens  # noqa: B018
        warm_meta_schema_check()

    @property
    def vocab_index(self) -> VocabIndex:
        """Token texts sorted for prefix lookups, built on first use."""
        if self._vocab_index is None:
            size = min(len(self.tokenizer), self.vocab_size)
            self._vocab_index = VocabIndex(lambda i: self.tokenizer.decode([i]), size)
        return self._vocab_index

    # ---- per step ----
    def start_fill(self, rows: Sequence[RequestGrammar | None]) -> None:
        """Begin filling the bitmask rows of this batch on the worker thread: a row's grammar
        mask where it applies now, all-allowed elsewhere."""
        if len(rows) > self.max_num_seqs:
            raise ValueError(f"batch of {len(rows)} rows exceeds max_num_seqs={self.max_num_seqs}")
        assert self._pending is None, "finish_fill was not called after start_fill"
        if self.overlap:
            self._pending = self._pool.submit(self._fill, list(rows))
        else:
            self._pending = _Inline(self._fill, list(rows))

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

    def fill_bitmask(self, rows: Sequence[RequestGrammar | None]) -> torch.Tensor | None:
        """`start_fill` then `finish_fill`, for callers with nothing to overlap."""
        self.start_fill(rows)
        return self.finish_fill()

    def _fill(self, rows: list[RequestGrammar | None]) -> tuple[int, int]:
        """Fill rows [0, B) of the host buffer; (B, number of masked rows)."""
        start = time.perf_counter()
        host = self._host
        matchers, indices, others, num_forced = [], [], [], 0
        for i, row in enumerate(rows):
            forced = row.forced_token if row is not None else None
            if forced is not None:  # a forced completion allows one id
                host[i].zero_()
                host[i, forced // 32] = _bit_word(forced % 32)
                num_forced += 1
            elif row is not None and row.constrained:
                if row.backend == "xgrammar":
                    matchers.append(row.matcher)
                    indices.append(i)
                else:  # llguidance: one row at a time
                    row.matcher.fill_next_token_bitmask(host, i)
                    others.append(i)
            else:
                host[i].fill_(_ALL_ALLOWED)
        if len(matchers) == 1:
            matchers[0].fill_next_token_bitmask(host, indices[0])
        elif matchers:
            self._batch_matcher.batch_fill_next_token_bitmask(matchers, host, indices)
        for i in indices + others:
            keys = rows[i].keys  # type: ignore[union-attr]
            if keys is not None:
                _clear_repeated_keys(host[i], *keys)
        self.last_fill_s = time.perf_counter() - start
        return len(rows), len(matchers) + len(others) + num_forced

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
