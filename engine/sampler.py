"""Turn a step's logits into token ids: penalties, logit bias, min_tokens, grammar mask, sample.

The per-request logits processors (repetition/presence/frequency penalties, logit_bias, the
min_tokens ban on stop tokens) run here in torch on the rows that use them. Then the batch's
grammar bitmask (when the structured-output hook gives one) and the sampling itself
(temperature, top-k, top-p, min-p, greedy or seeded Gumbel-max) are the kernels' job.
Logprobs, when asked, are those of the raw model distribution (vLLM's default).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from thinkgate.engine.outputs import Logprob
from thinkgate.engine.sequence import Sequence


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
        self, logits: torch.Tensor, seqs: list[Sequence], bitmask: torch.Tensor | None = None
    ) -> SamplerOutput:
        """Sample one token per row of `logits` (B, V) float32; `logits` is modified in place."""
        want_logprobs = [i for i, s in enumerate(seqs) if s.params.logprobs is not None]
        raw_logprobs = torch.log_softmax(logits[want_logprobs], dim=-1) if want_logprobs else None
        self._apply_processors(logits, seqs)
        if bitmask is not None:
            from thinkgate.kernels import apply_token_bitmask_inplace

            apply_token_bitmask_inplace(logits, bitmask)
        token_ids = self._sample(logits, seqs)
        out: list[tuple[float, int, list[tuple[int, float]]] | None] = [None] * len(seqs)
        if raw_logprobs is not None:
            rows = torch.tensor(want_logprobs, device=logits.device)
            chosen = token_ids[rows]
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

    def _sample(self, logits: torch.Tensor, seqs: list[Sequence]) -> torch.Tensor:
        if all(seq.params.greedy for seq in seqs):
            return logits.argmax(dim=-1)
        params = [seq.params for seq in seqs]
        dev = logits.device
        temperature = torch.tensor([p.temperature for p in params], dtype=torch.float32, device=dev)
        top_k = torch.tensor([p.top_k for p in params], dtype=torch.int32, device=dev)
        top_p = torch.tensor([p.top_p for p in params], dtype=torch.float32, device=dev)
        min_p = torch.tensor([p.min_p for p in params], dtype=torch.float32, device=dev)
        seeds = torch.tensor([s.seed for s in seqs], dtype=torch.int64, device=dev)
        steps = torch.tensor([s.num_output_tokens for s in seqs], dtype=torch.int64, device=dev)
        return sample_ref(logits, temperature, top_k, top_p, min_p, seeds, steps)


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


def sample_ref(
    logits: torch.Tensor,  # (B, V) float32
    temperature: torch.Tensor,  # (B,) 0 = greedy
    top_k: torch.Tensor,  # (B,) 0 = off
    top_p: torch.Tensor,  # (B,) 1 = off
    min_p: torch.Tensor,  # (B,) 0 = off
    seeds: torch.Tensor,  # (B,) int64
    steps: torch.Tensor,  # (B,) int64
) -> torch.Tensor:
    """Gumbel-max sampling whose noise depends only on (seed, step): batch-independent."""
    greedy = temperature < 1e-5
    x = logits / torch.where(greedy, 1.0, temperature).unsqueeze(1)
    if bool((top_k > 0).any()) or bool((top_p < 1).any()):
        sorted_x, order = x.sort(dim=-1, descending=True)
        ranks = torch.arange(x.shape[1], device=x.device).unsqueeze(0)
        drop = (top_k.unsqueeze(1) > 0) & (ranks >= top_k.unsqueeze(1))
        probs = torch.softmax(sorted_x.masked_fill(drop, float("-inf")), dim=-1)
        drop |= (probs.cumsum(-1) - probs) > top_p.unsqueeze(1)
        x = x.scatter(1, order, sorted_x.masked_fill(drop, float("-inf")))
    if bool((min_p > 0).any()):
        probs = torch.softmax(x, dim=-1)
        x = x.masked_fill(
            probs < min_p.unsqueeze(1) * probs.max(-1, keepdim=True).values, float("-inf")
        )
    noise = torch.empty_like(x)
    for row, (seed, step) in enumerate(zip(seeds.tolist(), steps.tolist())):
        gen = torch.Generator(device=x.device).manual_seed((seed * 1_000_003 + step) % (1 << 63))
        noise[row].exponential_(generator=gen)
    sampled = (x - noise.log()).argmax(dim=-1)  # argmax of x + Gumbel(0, 1)
    return torch.where(greedy, logits.argmax(dim=-1), sampled)


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
