"""The CPU sampling path: the fused sampler's semantics at the cost of one pass over the logits.

Same allowed set, gate, forced tokens, greedy rule (first maximal logit) and logprob as
`sampling.sample_ref`; only the randomness differs. Instead of one Gumbel draw per column (a
Philox call per 4 columns, emulated in int64 torch ops: ~0.45 ms per row per step), a sampled
row draws ONE uniform and inverts the CDF of its allowed distribution::

    p[c]   = 2 ** ((x[c] - max_c x) * log2(e) / T)   over allowed c, 0 elsewhere
    cdf    = cumsum(p)                                  # (placed by 64-column chunk sums)
    u      = uniform(seed, step) in (0, 1)             # a counter-based hash, 24 bits
    id     = first c with cdf[c] > u * cdf[-1]          # never a column with p[c] == 0

which samples softmax(x / T) over the allowed columns (exactly the distribution Gumbel-max
samples). ``u`` is a pure function of the row's (seed, step), so a seeded request gets the same
tokens alone or in any batch on CPU; it does not get the same tokens as the Triton path, whose
noise is per column.
"""

from __future__ import annotations

import torch
from thinkgate.kernels.cpu.sample_grammar import sample_grammar
from thinkgate.kernels.cpu.sample_rows import sample_rows
from thinkgate.kernels.reasoning import ReasoningState, reasoning_gate_ref

# Grammar rows take `sample_grammar` (routes per mask shape, numpy greedy) from this width on.
# Once it had a numpy greedy route it paid at every width: bench_constrained --clock cpu on the
# demo model (8k columns), constrained/plain at batch 1/8/32: 0.91/0.87/0.86 with the masked
# dense copy below 32,768 columns, 0.95/0.89/0.96 with every width routed.
GRAMMAR_ROUTES_FROM = 0


def sample_cpu(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    seeds: torch.Tensor,
    steps: torch.Tensor,
    bitmask: torch.Tensor | None = None,
    grammar_rows: torch.Tensor | None = None,
    reasoning: ReasoningState | None = None,
    slots: torch.Tensor | None = None,
    top_k: torch.Tensor | None = None,
    top_p: torch.Tensor | None = None,
    min_p: torch.Tensor | None = None,
    cover: int | None = None,
    logprobs: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(ids (B,) int64, logprobs (B,) fp32 or None) for CPU `logits` (B, V); arguments checked.

    Top-k / top-p / min-p apply as `filters.logit_floor` over the allowed columns (computed by
    `logit_floor_sparse`, which sorts only the candidates). Grammar rows without filters or
    logprobs take `sample_grammar`'s cheaper routes; everything else the masked dense path,
    `sample_rows`."""
    num_rows, num_cols = logits.shape
    gate = reasoning_gate_ref(reasoning, slots) if reasoning is not None else None
    filters = (top_k, top_p, min_p)
    use, limit = None, num_cols
    if bitmask is not None:
        use = torch.ones(num_rows, dtype=torch.bool)
        if grammar_rows is not None:
            use &= grammar_rows.bool()
        if gate is not None:
            use &= gate[0]
        limit = 32 * bitmask.shape[1] if cover is None else min(cover, 32 * bitmask.shape[1])
    if num_cols == 0:
        ids = torch.full((num_rows,), -1, dtype=torch.int64)
        return _finish(ids, None if not logprobs else torch.full((num_rows,), float("-inf")), gate)
    if (use is None or logprobs or any(f is not None for f in filters)
            or num_cols < GRAMMAR_ROUTES_FROM):
        ids, lp = sample_rows(logits, temperature, seeds, steps, bitmask, use, limit, filters,
                              logprobs)
        return _finish(ids, lp, gate)
    if bool(use.all()):
        return _finish(sample_grammar(logits, temperature, seeds, steps, bitmask, limit), None, gate)
    ids = torch.empty(num_rows, dtype=torch.int64)
    for rows, grammar in ((use.nonzero()[:, 0], True), ((~use).nonzero()[:, 0], False)):
        if rows.numel() == 0:
            continue
        args = (logits[rows], temperature[rows], seeds[rows], steps[rows])
        ids[rows] = (sample_grammar(*args, bitmask[rows], limit) if grammar
                     else sample_rows(*args)[0])
    return _finish(ids, None, gate)


def _finish(
    ids: torch.Tensor,
    lp: torch.Tensor | None,
    gate: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    if gate is not None:
        _, forced, forced_id = gate
        ids = torch.where(forced, forced_id, ids)
        if lp is not None:
            lp = torch.where(forced, 0.0, lp)
    return ids, lp
