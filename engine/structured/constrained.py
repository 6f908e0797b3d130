"""The engine's constrained-decoding hook: grammars (xgrammar) behind the device reasoning gate.

`ConstrainedDecoding` implements `StructuredOutputHook` (engine/structured/structured_output.py):

- add_request: compiles the request's constraint (a bad one raises `ValueError`, so only that
  request is rejected) and, with a reasoning parser, gives the row a `RowGate`: thinking, or
  answering when the prompt already closed thinking (`enable_thinking: false`).
- start_fill / finish_fill: the batch bitmask, filled on a worker thread while the forward runs,
  for the rows whose grammar applies now; plus each gated row's slot of the device reasoning
  state (engine/reasoning_slots.py), through which `kernels.sample` gates the grammar and forces
  the end marker when a thinking budget is spent. A row whose grammar waits for the end of
  thinking may not stop, nor write a marker that ends thinking implicitly (`<tool_call>`).
- accept: feeds each sampled id to the row's matcher when its grammar applied to that step; a
  matcher that rejects an id ends that request ("abort", with the error as stop_reason); a
  terminated grammar ends it with "stop". The gate's state comes back with the sampled ids.
- jump_forward: after the step, each answering row whose grammar forces its next text gets the
  ids of that text (engine/structured/jump_forward.py), computed by its next forward in one go.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import torch
from thinkgate.engine.sequence import Sequence
from thinkgate.engine.structured.canonical import schema_cache_stats
from thinkgate.engine.structured.completion_search import tag_closers
from thinkgate.engine.structured.grammar import Grammar, RequestGrammar
from thinkgate.engine.structured.json_completion import (
    COMPLETED_STOP_REASON,
    CompletionPlanner,
    tokenizer_codec,
)
from thinkgate.engine.structured.jump_forward import JumpForward
from thinkgate.engine.structured.reasoning_slots import ReasoningSlots, RowGate, awaited_start
from thinkgate.engine.structured.structured_output import GateInputs, StructuredOutputHook

logger = logging.getLogger(__name__)


class ConstrainedDecoding(StructuredOutputHook):
    """tokenizer / vocab_size (padded lm_head width) / stop_token_ids: the model's;
    reasoning: a parsers `ReasoningFormat` (or None) giving the end-of-thinking marker."""

    def __init__(self, tokenizer: Any, vocab_size: int, stop_token_ids: list[int], *,
                 max_num_seqs: int, device: torch.device | str = "cpu",
                 reasoning: Any = None, max_cache_entries: int = 128,
                 bound_numbers: bool = True, complete_before_max_tokens: bool = False,
                 backend: str = "auto", disable_additional_properties: bool = False) -> None:
        self.backend = backend  # structured_outputs_backend (engine/structured/backend.py)
        self.disable_additional_properties = disable_additional_properties
        self.tokenizer = tokenizer
        self.vocab_size = vocab_size
        self.stop_token_ids = sorted(stop_token_ids)
        self.max_num_seqs = max_num_seqs
        self.device = torch.device(device)
        self.max_cache_entries = max_cache_entries
        self.bound_numbers = bound_numbers  # defaults for requests that leave them None
        self.complete_before_max_tokens = complete_before_max_tokens
        self.reasoning = reasoning
        self.end_ids = reasoning.end_token_ids(tokenizer) if reasoning is not None else None
        starts = reasoning.start_token_ids(tokenizer) if reasoning is not None else []
        self.start_id = starts[0] if len(starts) == 1 else None  # one-token start markers only
        self.implicit_end_ids = _single_token_ids(tokenizer, reasoning.implicit_end
                                                  if reasoning is not None else ())
        self._grammar: Grammar | None = None
        self._grammar_lock = threading.Lock()
        self.jumper = JumpForward(tokenizer)
        self._codec_fns: Any = None
        self.slots = (ReasoningSlots(max_num_seqs, len(self.end_ids), self.device)
                      if self.end_ids else None)

    @classmethod
    def for_engine(cls, engine: Any, reasoning_parser: str | None = None) -> ConstrainedDecoding:
        """The hook for a loaded `LLMEngine` (its tokenizer, vocab, stop ids and batch limit)."""
        reasoning = None
        if reasoning_parser:
            from thinkgate.parsers import get_reasoning_format

            reasoning = get_reasoning_format(reasoning_parser, engine.tokenizer)
        config = engine.config
        hook = cls(engine.tokenizer, engine.vocab_size, sorted(engine.eos_token_ids),
                   max_num_seqs=config.max_num_seqs, device=engine.device, reasoning=reasoning,
                   bound_numbers=getattr(config, "bound_json_numbers", True),
                   backend=getattr(config, "structured_outputs_backend", "auto"),
                   disable_additional_properties=getattr(
                       config, "structured_outputs_disable_additional_properties", False),
                   complete_before_max_tokens=getattr(config, "complete_before_max_tokens",
                                                      False))
        hook.warm_up()  # the tokenizer scans, before the engine serves
        return hook

    @property
    def grammar(self) -> Grammar:
        """The xgrammar layer, built once (its tokenizer scan costs ~0.6-1 s on 150k vocabs, so
        `warm_up` starts it in the background before the first constrained request needs it)."""
        if self._grammar is None:
            with self._grammar_lock:
                if self._grammar is None:
                    self._grammar = Grammar(self.tokenizer, self.vocab_size, self.stop_token_ids,
                                            max_num_seqs=self.max_num_seqs, device=self.device,
                                            max_cache_entries=self.max_cache_entries,
                                            bound_numbers=self.bound_numbers,
                                            backend=self.backend,
                                            disable_additional_properties=(
                                                self.disable_additional_properties))
        return self._grammar

    def warm_up(self) -> None:
        """Build the grammar layer and pay its one-time costs (`Grammar.warm_up`: ~2.5 s at
        151k tokens, ~0.3 s on the demo model) before the engine serves: the llguidance
        tokenizer is built in Rust holding the GIL, so built beside a stream it stalled the
        stream for seconds (bench_compile_stall)."""
        self.grammar.warm_up()

    # ---- per request ----
    def prefetch(self, params: Any) -> Any:
        structured = params.structured_outputs
        return None if structured is None else self.grammar.cache.prefetch(structured)

    def stats(self) -> dict[str, int]:
        if self._grammar is None:
            return {}
        cache = self._grammar.cache
        out = {f"grammar_compiles_{name}": count for name, count in cache.compiled_by.items()}
        entries, hits = schema_cache_stats()
        out.update(grammar_cache_entries=len(cache), grammar_cache_hits=cache.num_hits,
                   grammar_promotions=cache.num_promoted, schema_cache_entries=entries,
                   schema_cache_hits=hits)
        return out

    def add_request(self, seq: Sequence) -> None:
        params = seq.params
        structured = params.structured_outputs
        if params.thinking_token_budget is not None and self.end_ids is None:
            raise ValueError("thinking_token_budget needs a reasoning parser "
                             "(LLM(reasoning_parser=...) / --reasoning-parser)")
        gate = None
        wants_gate = (structured is not None or params.thinking_token_budget is not None
                      or params.token_trace)  # a traced row reports where thinking ends
        if self.end_ids and wants_gate:
            prompt = seq.token_ids[: seq.num_prompt_tokens]
            answered = self.reasoning.is_reasoning_end(prompt, self.tokenizer)
            gate = RowGate(list(self.end_ids), answered, params.thinking_token_budget,
                           structured is not None and structured.enable_in_reasoning,
                           awaited_start(prompt, self.start_id, self.end_ids))
        seq.reasoning_state = gate
        planner = None
        if structured is not None and structured.complete_before_max_tokens is not False and (
                structured.complete_before_max_tokens or self.complete_before_max_tokens):
            closers = (tag_closers(structured.structural_tag)
                       if structured.structural_tag is not None else ())
            planner = CompletionPlanner(*self._codec(), stop_id=self.stop_token_ids[0],
                                        closers=closers)
        seq.structured_state = (self.grammar.new_request(structured, gate, planner)
                                if structured is not None else None)
        room = seq.max_total_tokens - seq.num_prompt_tokens
        if planner is not None and not planner.gave_up and planner.estimate > room:
            seq.structured_state = None
            raise ValueError(
                f"max_tokens={room} is too small for complete_before_max_tokens: the shortest "
                f"output of this constraint found takes {planner.estimate} tokens (raise "
                "max_tokens, or turn the option off to get a cut output)")

    def preempt(self, seq: Sequence) -> None:
        if self.slots is not None:
            self.slots.release(seq)

    def remove(self, seq: Sequence) -> None:
        self.preempt(seq)
        seq.structured_state = None

    # ---- per step ----
    def start_fill(self, seqs: list[Sequence]) -> Any:
        # Once every gated row of the batch answers, the device gate changes nothing (answering
        # slots never move), so the step skips it: no gate, no update, no state read back.
        thinking = any(seq.reasoning_state is not None and not seq.reasoning_state.answering
                       for seq in seqs)
        slots = self.slots.slots_for(seqs) if self.slots is not None and thinking else None
        rows = [seq.structured_state for seq in seqs]
        if slots is None and all(r is None for r in rows):
            return None
        if any(r is not None for r in rows):
            self.grammar.start_fill(rows)
        return rows, slots

    def finish_fill(self, handle: Any) -> GateInputs | None:
        if handle is None:
            return None
        rows, slots = handle
        inputs = GateInputs(slots=slots, reasoning=self.slots.state if slots is not None else None)
        if any(r is not None for r in rows):
            inputs.bitmask = self.grammar.finish_fill()
            if inputs.bitmask is not None:
                applies = [r is not None and r.constrained for r in rows]
                if not all(applies):  # None: every row applies its bitmask row
                    inputs.grammar_rows = torch.tensor(applies).to(self.device, non_blocking=True)
            inputs.banned_rows = [i for i, r in enumerate(rows) if r is not None and r.waiting]
            if inputs.banned_rows:
                inputs.banned_ids = self.stop_token_ids + self.implicit_end_ids
        return inputs

    def accept(self, seqs: list[Sequence], token_ids: list[int],
               reasoning: tuple[list[int], ...] | None = None) -> None:
        """Advance the matchers; a completion plan may replace a row's id in `token_ids`."""
        for i, (seq, token) in enumerate(zip(seqs, token_ids)):
            row: RequestGrammar | None = seq.structured_state
            if row is None:
                continue
            # tokens left after this one (this step's jump-forward ids come before it)
            left = (seq.max_total_tokens - seq.num_tokens - len(seq.forced_ids) - 1
                    if row.planner is not None else None)
            if not row.accept(token, left):
                seq.force_finish = ("abort", f"structured output error: {row.error}")
            elif row.completed_at_max_tokens:
                seq.force_finish = ("length", COMPLETED_STOP_REASON)
            elif row.is_terminated:
                seq.force_finish = ("stop", token)
            if row.written is not None and row.written != token:
                token_ids[i] = row.written
        if reasoning is not None and self.slots is not None:  # after the matchers: they saw
            self.slots.read_back(seqs, *reasoning)            # the gate before this step

    def jumps(self, seq: Sequence, with_logprobs: bool = True) -> bool:
        """Whether jump-forward writes the text this row's grammar forces next."""
        row: RequestGrammar | None = seq.structured_state
        return not (row is None or seq.is_finished or not row.constrained
                    or not seq.params.structured_outputs.jump_forward  # type: ignore[union-attr]
                    or (row.gate is not None and not row.gate.answering)  # never in thinking
                    or (seq.logprobs is not None and not with_logprobs))

    def jump_forward(self, seqs: list[Sequence], with_logprobs: bool = True) -> None:
        for seq in seqs:
            row: RequestGrammar | None = seq.structured_state
            if row is None or not self.jumps(seq, with_logprobs):
                continue
            limit = seq.max_total_tokens - seq.num_tokens - 1  # room for the sampled token
            if row.planner is not None and row.planner.forcing:  # its plan, but the last id
                seq.forced_ids = row.take_planned(limit)
                continue
            ids = self.jumper.forced_ids(row.matcher, limit)
            if ids and row.note_forced(ids, limit + 1 - len(ids)):
                seq.forced_ids = ids

    def _codec(self) -> Any:
        if self._codec_fns is None:
            self._codec_fns = tokenizer_codec(self.tokenizer)
        return self._codec_fns

    def close(self) -> None:
        if self._grammar is not None:
            self._grammar.close()


def _single_token_ids(tokenizer: Any, markers: Any) -> list[int]:
    from thinkgate.parsers.reasoning_format import single_token_id

    ids = [single_token_id(tokenizer, m) for m in markers]
    return [i for i in ids if i is not None]


def install_constrained_decoding(engine: Any, reasoning_parser: str | None = None
                                 ) -> ConstrainedDecoding:
    """Give a loaded `LLMEngine` the grammar + reasoning-gate hook (once; idempotent)."""
    hook = engine.structured_output
    if isinstance(hook, ConstrainedDecoding):
        return hook
    hook = ConstrainedDecoding.for_engine(engine, reasoning_parser)
    engine.structured_output = hook
    return hook
