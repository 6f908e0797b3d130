"""The CPU sampling path: the fused sampler's semantics at the cost of one pass over the logits.

Same allowed set, gate, forced tokens, greedy rule (first maximal logit) and logprob as
`sampling.sample_ref`; only the randomness differs. Instead of one Gumbel draw per column (a
Philox call per 4 columns, emulated in int64 torch ops: ~0.45 ms per row per step), a sampled
row draws ONE uniform and inverts the CDF of its allowed distribution::

    p[c]   = 2 ** ((x[c] - max_c x) * log2(e) / T)   over allowed c, 0 elsewhere
    cdf    = cumsum(p)
    u      = uniform(seed, step) in (0, 1)             # a counter-based hash, 24 bits
    id     = first c with cdf[c] > u * cdf[-1]          # never a column with p[c] == 0

which samples softmax(x / T) over the allowed columns (exactly the distribution Gumbel-max
samples). ``u`` is a pure function of the row's (seed, step), so a seeded request gets the same
tokens alone or in any batch on CPU; it does not get the same tokens as the Triton path, whose
noise is per column.
"""

from __future__ import annotations

import torch
from thinkgate.kernels.bitmask import apply_token_bitmask_inplace_ref
from thinkgate.kernels.filters import logit_floor_sparse
from thinkgate.kernels.inverse_cdf import invert_cdf, uniform_cpu
from thinkgate.kernels.reasoning import ReasoningState, reasoning_gate_ref
from thinkgate.kernels.sample_filtered_cpu import sample_filtered
from thinkgate.kernels.sampling import LOG2E, temperature_scale

_LN2 = 0.6931471805599453
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
    `logit_floor_sparse`, which sorts only the candidates). (Sampling
    unmasked first and masking only on a miss was tried: the demo model misses its JSON
    grammar on ~70% of rows in bench_constrained, so it cost 2x the plain masked pass.)"""
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
    ids, lp = _sample_rows(logits, temperature, seeds, steps, bitmask, use, limit, filters,
                           logprobs)
    return _finish(ids, lp, gate)


def _sample_rows(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    seeds: torch.Tensor,
    steps: torch.Tensor,
    bitmask: torch.Tensor | None = None,
    use: torch.Tensor | None = None,
    limit: int = 0,
    filters: tuple[torch.Tensor | None, ...] = (None, None, None),
    logprobs: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Every row under its mask (where `use`), NaN banned, filters as a floor: greedy rows take
    the first maximal column, sampled rows invert their CDF with `uniform_cpu`."""
    num_rows = logits.shape[0]
    x = logits.to(torch.float32, copy=True)  # (B, V), masked in place below
    if bitmask is not None and use is not None:
        rows = use.nonzero()[:, 0]
        if rows.numel() == num_rows:
            apply_token_bitmask_inplace_ref(x, bitmask, None, vocab_size=limit)
        elif rows.numel():
            apply_token_bitmask_inplace_ref(x, bitmask, rows, vocab_size=limit)
    best, ids = x.max(dim=1)  # the first maximal column: the greedy id
    if bool(torch.isnan(best).any()):  # NaN is never allowed; only then pay for the rewrite
        x.nan_to_num_(nan=float("-inf"), posinf=float("inf"), neginf=float("-inf"))
        best, ids = x.max(dim=1)
    filtered = any(f is not None for f in filters)
    if filtered and logprobs:  # the logprob's normaliser needs the floor itself
        floor = logit_floor_sparse(x, temperature, *filters)
        x.masked_fill_(x < floor[:, None], float("-inf"))
        filtered = False
    scale = temperature_scale(temperature)
    live = best > float("-inf")
    ids = torch.where(live, ids, -1)
    sampled = (scale > 0) & live & (best < float("inf"))
    rows = sampled.nonzero()[:, 0]
    if rows.numel() and filtered:
        pick = tuple(None if f is None else f[rows] for f in filters)
        whole = rows.numel() == num_rows  # x is ours: filter it in place
        ids[rows] = sample_filtered(x if whole else x[rows], best[rows], scale[rows],
                                    temperature[rows], seeds[rows], steps[rows], *pick)
    elif rows.numel():
        whole = rows.numel() == num_rows and not logprobs  # x is ours: sample it in place
        ids[rows] = _invert_cdf(x if whole else x[rows], best[rows], scale[rows],
                                uniform_cpu(seeds[rows], steps[rows]))
    lp = _logprob(x, ids, scale) if logprobs else None
    return ids, lp


def _invert_cdf(
    x: torch.Tensor, best: torch.Tensor, scale: torch.Tensor, u: torch.Tensor
) -> torch.Tensor:
    """Sample each row of `x` (R, V) from softmax(x * scale * ln 2) by one uniform per row."""
    p = x.sub_(best[:, None]).mul_(scale[:, None]).exp2_()  # (R, V); banned -> 0, best -> 1
    return invert_cdf(p.cumsum_(dim=1), u)


def _logprob(x: torch.Tensor, ids: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """log softmax of x / T (T = 1 for greedy rows) at `ids` over the allowed columns."""
    y = x * torch.where(scale > 0, scale, LOG2E)[:, None] * _LN2
    lse = torch.logsumexp(y, dim=1)
    chosen = y.gather(1, ids.clamp(min=0)[:, None])[:, 0]
    return torch.where(ids >= 0, chosen - lse, float("-inf"))


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
