"""Per-sample state: token ids, KV blocks, sampling state, detokenizer, finish reason; and the
batch of sequences one step runs (`ScheduledBatch`, the scheduler's answer, the runner's input).

A request with `n` samples owns `n` sequences; the scheduler only ever sees sequences.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from enum import Enum
from typing import Any

import torch
from thinkgate.engine.outputs import Logprob
from thinkgate.engine.sampling_params import SamplingParams

_seq_counter = itertools.count()


class SequenceStatus(Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


class Sequence:
    def __init__(
        self,
        request_id: str,
        index: int,
        prompt_token_ids: list[int],
        params: SamplingParams,
        seed: int,
        detokenizer: Any,  # core/detokenizer.py's IncrementalDetokenizer, owned by the engine
        max_total_tokens: int,
    ) -> None:
        self.seq_id = next(_seq_counter)
        self.request_id = request_id
        self.index = index
        self.params = params
        self.seed = seed  # per-sample; the sampler draws from (seed, num_output_tokens)
        self.token_ids = list(prompt_token_ids)
        self.num_prompt_tokens = len(prompt_token_ids)
        self.max_total_tokens = max_total_tokens  # prompt + max_tokens, capped by max_model_len
        self.status = SequenceStatus.WAITING
        self.block_table: list[int] = []
        self.kv_row: int | None = None  # row in the contiguous KV layout (slot_cache.py)
        self.num_cached_tokens = 0  # tokens whose K/V are in the cache
        # prefix caching (block_manager.py): chained hashes of its full blocks, kept across
        # preemption (tokens only grow); blocks registered (paged) or saved (contiguous) so far
        self.block_hashes: list[bytes] = []
        self.num_registered_blocks = 0
        self.num_saved_blocks = 0
        self.prefix_blocks: list[int] = []  # contiguous: cached blocks pinned until loaded
        self.num_prompt_cached_tokens = 0  # prompt tokens served by the cache at first prefill
        self.num_preemptions = 0
        self.waiting_since = 0  # the scheduler's decode-step count when it joined the queue
        self.finish_reason: str | None = None
        self.stop_reason: int | str | None = None
        self.detokenizer = detokenizer
        self.logprobs: list[dict[int, Logprob]] | None = [] if params.logprobs is not None else None
        self.cumulative_logprob = 0.0
        self.num_emitted_tokens = 0  # for DELTA outputs
        self.output_counts: torch.Tensor | None = None  # (V,) int32, only with penalties
        self.prompt_mask: torch.Tensor | None = None  # (V,) bool, only with repetition_penalty
        self.structured_state: Any = None  # owned by the structured-output hook (issue 7)
        self.reasoning_state: Any = None  # owned by the reasoning gate (issue 7)
        self.has_logits_processors = bool(
            params.has_penalties or params.logit_bias or params.min_tokens
        )
        # the CPU sampler's short route (kernels/cpu/sample_plain.py): the row's temperature
        # (0.0 greedy) when it asks for nothing else, else None; params never change
        plain = not (self.has_logits_processors or params.logprobs is not None
                     or params.top_k > 0 or params.top_p < 1 or params.min_p > 0)
        self.plain_temperature: float | None = (
            (0.0 if params.greedy else params.temperature) if plain else None)
        self.force_finish: tuple[str, int | str | None] | None = None  # set by hooks
        # jump-forward: ids the grammar forces after the last token, already accepted by its
        # matcher; the next forward computes them with that token, and they become output
        # tokens (before that step's sampled one) in the scheduler's postprocess
        self.forced_ids: list[int] = []
        # speculative decoding (speculative.py): ids proposed after the last token, computed by
        # the next forward with it and kept only as far as that step's samples reproduce them;
        # the n-gram index the proposer keeps of this sequence's tokens (index, tokens indexed)
        self.draft_ids: list[int] = []
        self.spec_counts = [0, 0, 0]  # its drafts verified, their draft ids, the ids kept
        self.ngram_index: tuple[dict[tuple[int, ...], int], int] = ({}, 0)
        self.suffix_index: Any = None  # the suffix proposer's index of its tokens (suffix_drafts.py)
        self.draft_state: Any = None  # its drafts' acceptance (core/draft_policy.py)
        self.trace: list[Any] | None = [] if params.token_trace else None  # engine/core/token_trace.py

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_scheduled_tokens(self) -> int:
        """Tokens the next forward leaves in the cache: the sequence plus its forced and draft
        ids."""
        return len(self.token_ids) + len(self.forced_ids) + len(self.draft_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens :]

    @property
    def is_finished(self) -> bool:
        return self.status is SequenceStatus.FINISHED

    def finish(self, reason: str, stop_reason: int | str | None = None) -> None:
        self.status = SequenceStatus.FINISHED
        self.finish_reason = reason
        self.stop_reason = stop_reason


@dataclass
class ScheduledBatch:
    seqs: list[Sequence]
    is_prefill: bool
