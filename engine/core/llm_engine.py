"""The synchronous engine: add requests, `step()` them forward, read `RequestOutput`s.

`step()` follows the data path of ARCHITECTURE.md, one collaborator per line.
"""

from __future__ import annotations

import gc
import json
import logging
import random
import time
from typing import Any

import torch
from thinkgate.engine.config import EngineConfig, SpeculativeConfig
from thinkgate.engine.core.requests import (
    PromptType,
    Request,
    make_output,
    new_sequence,
    tokenize_prompt,
)
from thinkgate.engine.core.sampler import Sampler
from thinkgate.engine.core.scheduler import Scheduler
from thinkgate.engine.core.speculative import Speculator
from thinkgate.engine.core.step_records import drop_unused, record_forced, record_sampled
from thinkgate.engine.core.token_trace import trace_after, trace_before
from thinkgate.engine.kv.allocate import allocate_kv
from thinkgate.engine.kv.block_manager import BlockManager
from thinkgate.engine.kv.row_prefix_store import RowPrefixStore
from thinkgate.engine.kv.slot_cache import SlotKVCache
from thinkgate.engine.model.model_loader import LoadedModel, load_model
from thinkgate.engine.model.model_runner import ModelRunner
from thinkgate.engine.model.tokenizer import eos_token_ids, load_tokenizer
from thinkgate.engine.outputs import RequestOutput
from thinkgate.engine.sampling_params import RequestOutputKind, SamplingParams
from thinkgate.engine.sequence import Sequence
from thinkgate.engine.structured.compiling import CompilingRequests
from thinkgate.engine.structured.structured_output import StructuredOutputHook

logger = logging.getLogger(__name__)


class LLMEngine:
    """`add_request`, `step`, `abort_request`; `stats` and `reset_prefix_cache` for the API."""

    def __init__(
        self, config: EngineConfig, structured_output: StructuredOutputHook | None = None,
        compile_now: bool = True,
    ) -> None:
        self.config = config
        self.device = torch.device(config.resolved_device)
        self.loaded: LoadedModel = load_model(config.model, config.dtype, self.device.type)
        self.tokenizer = load_tokenizer(config.tokenizer, self.loaded)
        self.vocab_size = self.loaded.vocab_size
        self.eos_token_ids = eos_token_ids(self.loaded, self.tokenizer)
        self.max_model_len = self._max_model_len()
        # prefix caching needs a KV cache: not for the transformers fallback
        self.prefix_caching = config.enable_prefix_caching and self.loaded.arch is not None
        arch = self.loaded.arch
        kv = allocate_kv(config, (arch.num_layers, arch.num_kv_heads, arch.head_dim) if arch
                         else None, self.loaded.dtype, self.device, self.max_model_len,
                         self.prefix_caching)
        self.kv_cache = kv.cache
        self.num_kv_blocks = kv.num_blocks
        self.row_store: RowPrefixStore | None = kv.row_store  # contiguous: cached prefix blocks
        max_tokens = config.max_num_batched_tokens or max(self.max_model_len, 2048)
        if max_tokens < self.max_model_len:
            raise ValueError(
                f"max_num_batched_tokens ({max_tokens}) must be >= "
                f"max_model_len ({self.max_model_len})"
            )
        on_free = self.kv_cache.release if isinstance(self.kv_cache, SlotKVCache) else None
        self.block_manager = BlockManager(
            self.num_kv_blocks, config.block_size, on_free, self.prefix_caching, self.row_store
        )
        self.max_num_seqs = min(config.max_num_seqs, getattr(self.kv_cache, "num_rows", 1 << 30))
        self.scheduler = Scheduler(
            self.block_manager, self.max_num_seqs, max_tokens, self.eos_token_ids,
            on_preempt=lambda seq: self.structured_output.preempt(seq),
            prefill_delay_steps=config.prefill_delay_steps,
        )
        self.runner = ModelRunner(self.loaded, self.kv_cache, self.device, self.row_store)
        self.runner.plan_attention(config, self.max_num_seqs, self.max_model_len)
        self.sampler = Sampler(self.vocab_size, self.eos_token_ids, self.device)
        if structured_output is None:
            from thinkgate.engine.structured.constrained import ConstrainedDecoding

            structured_output = ConstrainedDecoding.for_engine(self, config.reasoning_parser)
        self.structured_output = structured_output
        self.requests: dict[str, Request] = {}
        # requests whose grammar compiles off the step loop (engine/structured/compiling.py)
        self.compiling = CompilingRequests(config.structured_outputs_compile_timeout)
        self.num_traced_requests = 0  # with token_trace: while 0, a step does no trace work
        self.num_steps = 0  # forward passes run, and the sequences they carried in all
        self.num_step_seqs = 0
        self._rng = random.Random(config.seed)
        self.jump_forward_on = config.jump_forward  # per request: structured_outputs.jump_forward
        # n-gram drafts verified under each position's grammar mask (speculative.py); not for
        # the transformers fallback (it recomputes whole sequences, no per-position logits)
        spec = SpeculativeConfig.parse(config.speculative_config)
        self.speculator = (Speculator(spec, self.vocab_size)
                           if spec is not None and not self.runner.full_sequence else None)
        self._backend = self.tokenizer.backend_tokenizer
        # the draft policy's step clock: on CPU the step thread's CPU time, so a step that
        # another process on the machine held up is not taken for a costly verify step
        # (on a shared 2-core machine the wall-clock ratios read 1.4 to 4 for the same step)
        self._clock = time.thread_time if self.device.type == "cpu" else time.perf_counter
        self.closed = False
        if compile_now:
            self.compile_decode_step()

    def _max_model_len(self) -> int:
        limit = self.loaded.max_position_embeddings
        window = self.loaded.arch.sliding_window if self.loaded.arch else None
        if window:  # exact only inside the window: cap instead of approximating
            limit = min(limit, window)
        wanted = self.config.max_model_len or limit
        if wanted > limit:
            raise ValueError(f"max_model_len ({wanted}) exceeds what the model supports ({limit})")
        return wanted

    def compile_decode_step(self) -> None:
        """Compile the CPU decode step (ModelRunner.compile_steps) where it applies. Compiled
        code is specialized to torch's thread count: set it before this (the engine core
        does; `__init__` calls this unless told `compile_now=False`)."""
        self.runner.compile_steps(self.config.enforce_eager, self.max_num_seqs,
                                  self.max_model_len, self.speculator is not None)

    # --- requests -------------------------------------------------------------------------

    def add_request(self, request_id: str, prompt: PromptType, params: SamplingParams) -> None:
        """Validate and queue a request; ValueError for a bad one. A grammar that takes longer
        than a few ms to compile parks the request until it is ready (engine/structured/compiling.py);
        its later failure comes out of `take_rejected`."""
        if self.closed:
            raise RuntimeError("the engine is closed: make a new one")
        if request_id in self.requests or request_id in self.compiling:
            raise ValueError(f"request_id {request_id!r} is already running")
        if not isinstance(params, SamplingParams):
            raise TypeError(f"params must be SamplingParams, got {type(params).__name__}")
        text, ids = tokenize_prompt(prompt, self.tokenizer, self.vocab_size)
        params.check_vocab(self.vocab_size)
        if len(ids) >= self.max_model_len:
            raise ValueError(
                f"prompt has {len(ids)} tokens; max_model_len is {self.max_model_len} "
                "(room for at least one new token is needed)"
            )
        compiling = self.structured_output.prefetch(params)
        if compiling is not None and not self.compiling.settled(compiling):
            self.compiling.park(request_id, text, ids, params, compiling)
            return
        self._admit(request_id, text, ids, params)

    def _admit(self, request_id: str, text: str | None, ids: list[int],
               params: SamplingParams) -> None:
        max_new = params.max_tokens or self.max_model_len
        max_total = min(self.max_model_len, len(ids) + max_new)
        request = Request(request_id, text, ids, params)
        for index in range(params.n):
            seed = self._rng.getrandbits(62) if params.seed is None else params.seed + index
            seq = new_sequence(request, index, seed, self._backend, max_total, self.vocab_size,
                               self.device)
            self.structured_output.add_request(seq)  # a bad grammar fails here, before scheduling
            request.seqs.append(seq)
            request.emitted_chunks.append(0)
        self.requests[request_id] = request
        self.num_traced_requests += params.token_trace
        for seq in request.seqs:
            self.scheduler.add(seq)

    def abort_request(self, request_id: str) -> RequestOutput | None:
        """Stop a request and free its KV blocks; returns its last state, or None if unknown."""
        request = self.requests.pop(request_id, None)
        if request is None:
            self.compiling.drop(request_id)
            return None
        self.num_traced_requests -= request.params.token_trace
        self.scheduler.abort(request.seqs)
        for seq in request.seqs:
            self.structured_output.remove(seq)
        return make_output(request)

    def has_unfinished_requests(self) -> bool:
        return bool(self.requests) or len(self.compiling) > 0

    def take_rejected(self) -> list[tuple[str, BaseException]]:
        """(request id, error) of the requests whose grammar failed to compile (or ran past the
        compile timeout) since the last call; they are gone from the engine."""
        return self.compiling.take_rejected()

    # --- the step -------------------------------------------------------------------------

    @torch.inference_mode()
    def step(self) -> list[RequestOutput]:
        if len(self.compiling):
            self.compiling.admit_ended(self._admit)
        start = self._clock()
        batch = self.scheduler.schedule()
        width = max((len(seq.draft_ids) for seq in batch.seqs), default=0) if batch else 0
        if batch is None:
            self.compiling.wait_any(0.01)  # nothing to run until a grammar is ready
            return []
        self.runner.order(batch)
        self.num_steps += 1
        self.num_step_seqs += len(batch.seqs)
        fill = self.structured_output.start_fill(batch.seqs)
        logits = self.runner.forward(batch)
        gate = self.structured_output.finish_fill(fill)
        trace = (trace_before(batch.seqs, gate, self.vocab_size)  # None unless a row asked
                 if self.num_traced_requests else None)
        if self.runner.verify_starts is not None and self.speculator is not None:
            sampled = self.speculator.verify(logits, self.runner.verify_starts, batch.seqs, gate,
                                             self.sampler, self._decode_token, self._jumps)
        else:
            sampled = self.sampler(logits, batch.seqs, gate)
        self.structured_output.accept(batch.seqs, sampled.token_ids, sampled.reasoning)
        record_forced(batch.seqs, self.runner.forced_logits, self._decode_token)
        if trace is not None:
            trace_after(trace, batch.seqs, sampled.token_ids)
        record_sampled(batch.seqs, sampled, self._decode_token)
        self.scheduler.postprocess(batch.seqs, sampled.token_ids)
        drop_unused(batch.seqs)
        if self.jump_forward_on:
            self.structured_output.jump_forward(batch.seqs, self.runner.logprobs_of_forced)
        if self.speculator is not None:
            if not batch.is_prefill:  # what a verify step costs over a plain one, as timed
                self.speculator.note_step(len(batch.seqs), width, self._clock() - start)
            self.speculator.propose(batch.seqs)  # (finished rows are skipped there)
        return self._collect_outputs(batch.seqs)

    def _jumps(self, seq: Sequence) -> bool:
        """Whether jump-forward will write the text this row's grammar forces (speculative
        drafts stop before such text, as plain decoding samples nothing there)."""
        return self.jump_forward_on and self.structured_output.jumps(
            seq, self.runner.logprobs_of_forced)

    def _decode_token(self, token: int) -> str:
        return self._backend.decode([token], skip_special_tokens=False)

    def _collect_outputs(self, seqs: list[Sequence]) -> list[RequestOutput]:
        outputs = []
        seen: set[str] = set()
        for seq in seqs:
            request = self.requests.get(seq.request_id)
            if request is None or seq.request_id in seen:
                continue
            if request.params.output_kind is RequestOutputKind.FINAL_ONLY and not seq.is_finished:
                continue
            seen.add(seq.request_id)
            finished = request.finished
            if finished:
                if self.speculator is not None:
                    self.speculator.finish_request(request.seqs)
                del self.requests[seq.request_id]
                self.num_traced_requests -= request.params.token_trace
                for s in request.seqs:
                    self.structured_output.remove(s)
            elif request.params.output_kind is RequestOutputKind.FINAL_ONLY:
                continue
            outputs.append(make_output(request))
        return outputs

    # --- helpers for the API layer ----------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        return {
            "num_free_blocks": self.block_manager.num_free_blocks,
            "num_kv_blocks": self.block_manager.num_blocks,
            "num_waiting": len(self.scheduler.waiting),
            "num_compiling": len(self.compiling),
            "num_running": len(self.scheduler.running),
            "num_preemptions": self.scheduler.num_preemptions,
            "num_steps": self.num_steps,
            "num_decode_steps": self.scheduler.num_decode_steps,
            "num_step_seqs": self.num_step_seqs,
            **self.block_manager.stats(),
            **self.structured_output.stats(),
            **(self.speculator.stats() if self.speculator is not None else {}),
        }

    def reset_prefix_cache(self) -> None:
        """Drop every cached prefix block that no running sequence holds (vLLM's name)."""
        self.block_manager.reset_prefix_cache()

    def close(self) -> None:
        """Abort every request and free the weights, the KV cache and the grammar thread now.
        Dropping the last reference is not enough: the engine sits in reference cycles
        (callbacks, compiled graphs), which only a full garbage collection frees."""
        if self.closed:
            return
        for request_id in [*self.requests, *self.compiling.request_ids()]:
            self.abort_request(request_id)
        close_hook = getattr(self.structured_output, "close", None)
        if close_hook is not None:
            close_hook()
        self.closed = True
        self._source = str(self.loaded.source)
        for name in ("kv_cache", "row_store", "block_manager", "scheduler", "runner", "sampler",
                     "speculator", "loaded", "structured_output"):
            setattr(self, name, None)
        gc.collect()

    def __repr__(self) -> str:
        if self.closed:
            return f"LLMEngine({json.dumps({'model': self._source, 'closed': True})})"
        info = {"model": str(self.loaded.source), "native": self.loaded.native}
        return f"LLMEngine({json.dumps(info)})"

