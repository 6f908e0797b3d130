"""Turn a step's logits into token ids: penalties, logit bias, min_tokens, grammar mask, sample.

The per-request logits processors (repetition/presence/frequency penalties, logit_bias, the
min_tokens ban on stop tokens) run here in torch on the rows that use them. Then the batch's
grammar bitmask (when the structured-output hook gives one) and the sampling itself
(temperature, top-k, top-p, min-p, greedy or seeded Gumbel-max) are the kernels' job.
Logprobs, when asked, are those of the raw model distribution (vLLM's default).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from thinkgate.engine.outputs import Logprob
from thinkgate.engine.sequence import Sequence
from thinkgate.kernels import SamplingTensors, apply_token_bitmask_inplace, sample


@dataclass
class SamplerOutput:
    token_ids: list[int]
    # per row: None, or (sampled logprob, sampled rank, [(id, logprob), ...] top-k)
    logprobs: list[tuple[float, int, list[tuple[int, float]]] | None]


class Sampler:
    def __init__(self, vocab_size: int, eos_token_ids: set[int], device: torch.device) -> None:
        self.vocab_size = vocab_size
        self.eos_token_ids = sorted(eos_token_ids)
        self.device = device

    def __call__(
        self,
        logits: torch.Tensor,
        seqs: list[Sequence],
        bitmask: torch.Tensor | None = None,
        **gate: Any,
    ) -> SamplerOutput:
        """Sample one token per row of `logits` (B, V) float32; `logits` is modified in place.

        `bitmask` (B, W) int32 and the `gate` keywords (`grammar_rows`, `reasoning`, `slots`)
        are passed to `thinkgate.kernels.sample` unchanged (see its docstring)."""
        want_logprobs = [i for i, s in enumerate(seqs) if s.params.logprobs is not None]
        raw_logprobs = torch.log_softmax(logits[want_logprobs], dim=-1) if want_logprobs else None
        self._apply_processors(logits, seqs)
        token_ids = self._sample(logits, seqs, bitmask, **gate)
        out: list[tuple[float, int, list[tuple[int, float]]] | None] = [None] * len(seqs)
        if raw_logprobs is not None:
            rows = torch.tensor(want_logprobs, device=logits.device)
            chosen = token_ids[rows].clamp(min=0)
            chosen_lp = raw_logprobs.gather(1, chosen.unsqueeze(1)).squeeze(1)  # (R,)
            ranks = (raw_logprobs > chosen_lp.unsqueeze(1)).sum(1) + 1
            k = max(seqs[i].params.logprobs or 0 for i in want_logprobs)
            top_lp, top_ids = (
                raw_logprobs.topk(k, dim=-1) if k else (chosen_lp[:, None][:, :0],) * 2
            )
            chosen_lp, ranks = chosen_lp.tolist(), ranks.tolist()
            top_lp, top_ids = top_lp.tolist(), top_ids.tolist()
            for j, i in enumerate(want_logprobs):
                n = seqs[i].params.logprobs or 0
                out[i] = (chosen_lp[j], ranks[j], list(zip(top_ids[j][:n], top_lp[j][:n])))
        return SamplerOutput(token_ids.tolist(), out)

    def _apply_processors(self, logits: torch.Tensor, seqs: list[Sequence]) -> None:
        for row, seq in enumerate(seqs):
            if not seq.has_logits_processors:
                continue
            params = seq.params
            if params.has_penalties:
                _apply_penalties(logits[row], seq)
            if params.logit_bias:
                ids = torch.tensor(list(params.logit_bias), device=logits.device)
                bias = torch.tensor(list(params.logit_bias.values()), device=logits.device)
                logits[row].index_add_(0, ids, bias.to(logits.dtype))
            if seq.num_output_tokens < params.min_tokens:
                banned = list(params.stop_token_ids or [])
                if not params.ignore_eos:
                    banned += self.eos_token_ids
                if banned:
                    logits[row, banned] = float("-inf")

    def _sample(
        self, logits: torch.Tensor, seqs: list[Sequence], bitmask: torch.Tensor | None, **gate: Any
    ) -> torch.Tensor:
        """Greedy rows without a grammar or gate take the argmax (what the kernel computes for
        them); every other row goes through the kernels' fused masked sampler."""
        greedy = [seq.params.greedy for seq in seqs]
        if all(greedy) and not gate:
            if bitmask is not None:  # greedy under a grammar: mask, then argmax (no noise)
                apply_token_bitmask_inplace(logits, bitmask, vocab_size=self.vocab_size)
            return logits.argmax(dim=-1)
        rows = (
            list(range(len(seqs)))
            if bitmask is not None or gate
            else [i for i, g in enumerate(greedy) if not g]
        )
        token_ids = logits.argmax(dim=-1)
        sub = logits if len(rows) == len(seqs) else logits[rows]
        params = [seqs[i].params for i in rows]
        tensors = SamplingTensors.from_lists(
            temperature=[0.0 if p.greedy else p.temperature for p in params],
            seeds=[seqs[i].seed for i in rows],
            steps=[seqs[i].num_output_tokens for i in rows],
            top_k=[p.top_k for p in params] if any(p.top_k > 0 for p in params) else None,
            top_p=[p.top_p for p in params] if any(p.top_p < 1 for p in params) else None,
            min_p=[p.min_p for p in params] if any(p.min_p > 0 for p in params) else None,
            device=logits.device,
        )
        sampled = sample(
            sub, tensors, bitmask=bitmask, vocab_size=self.vocab_size, **gate
        ).token_ids
        if len(rows) == len(seqs):
            return sampled
        token_ids[rows] = sampled
        return token_ids


def _apply_penalties(row: torch.Tensor, seq: Sequence) -> None:
    """vLLM's semantics: repetition over prompt + output; presence/frequency over output only."""
    params = seq.params
    counts = seq.output_counts
    assert counts is not None
    if params.repetition_penalty != 1.0:
        seen = counts > 0
        if seq.prompt_mask is not None:
            seen |= seq.prompt_mask
        penalized = torch.where(
            row > 0, row / params.repetition_penalty, row * params.repetition_penalty
        )
        row.copy_(torch.where(seen, penalized, row))
    if params.frequency_penalty:
        row -= params.frequency_penalty * counts.to(row.dtype)
    if params.presence_penalty:
        row -= params.presence_penalty * (counts > 0).to(row.dtype)


def make_logprob_entry(
    token: int, entry: tuple[float, int, list[tuple[int, float]]], decode: object
) -> dict[int, Logprob]:
    """One position's {token id: Logprob} dict: the sampled token first, then the top-k."""
    chosen_lp, rank, top = entry
    result = {token: Logprob(chosen_lp, rank, decode(token))}  # type: ignore[operator]
    for r, (tid, lp) in enumerate(top, start=1):
        if tid not in result:
            result[tid] = Logprob(lp, r, decode(tid))  # type: ignore[operator]
    return result
