"""Grammar rows on the CPU path, by how much of the row the mask allows.

A masked dense copy costs several passes over the row (151,936 columns at the Qwen3
vocabulary); most grammar steps do not need it:

- sparse rows (the allowed columns fit in few 32-column words: JSON structure, keys, digits)
  read only the logits of their non-zero mask words: greedy takes the first maximum there,
  a sampled row inverts the CDF over those columns (banned ones weigh 0);
- dense rows (most columns allowed: inside a string) take the unmasked row's greedy id or draw
  and keep it when the mask allows it; a greedy miss takes the masked route (the masked
  maximum is then elsewhere), a sampled miss draws again from the masked row with an
  independent uniform, which keeps the draw exact: p(t) = p(t) + (1 - p(A)) p(t) / p(A)
  = p(t) / p(A) for allowed t;
- the rest, and rows with NaN logits, take `sample_rows`' masked route.

Every route gives the greedy id of `sampling.sample_ref` and samples softmax(x / T) over the
allowed columns; a row's draws depend only on its (seed, step).
"""

from __future__ import annotations

import torch
from thinkgate.kernels.inverse_cdf import invert_cdf, uniform_cpu
from thinkgate.kernels.sample_rows_cpu import sample_rows
from thinkgate.kernels.sampling import temperature_scale

SPARSE_FRACTION = 1 / 16  # non-zero words x 32 below this share of the row: sparse route
DENSE_FRACTION = 3 / 4  # allowed columns above this share: unmasked first
_POPCOUNT: dict[torch.device, torch.Tensor] = {}


def sample_grammar(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    seeds: torch.Tensor,
    steps: torch.Tensor,
    bitmask: torch.Tensor,
    limit: int,
) -> torch.Tensor:
    """(R,) int64 ids for rows that all apply their `bitmask` row (R, W); columns >= `limit`
    (or past the mask) are banned; -1 where nothing is allowed."""
    num_rows, num_cols = logits.shape
    n = min(num_cols, limit, 32 * bitmask.shape[1])
    words = bitmask[:, : (n + 31) // 32]
    if n % 32:  # bits past n are banned: clear them so counts and reads stop at n
        words = words.clone()
        words[:, -1] &= (1 << (n % 32)) - 1
    nonzero_words = (words != 0).sum(dim=1)
    sparse = nonzero_words * 32 <= SPARSE_FRACTION * num_cols
    dense = torch.zeros_like(sparse)
    if not bool(sparse.all()):
        wide = (~sparse).nonzero()[:, 0]
        dense[wide] = _popcount(words[wide]) >= DENSE_FRACTION * num_cols
    ids = torch.full((num_rows,), -1, dtype=torch.int64)
    rest = ~sparse & ~dense
    if bool(sparse.any()):
        rows = sparse.nonzero()[:, 0]
        ids[rows] = _sparse(logits, rows, words, temperature, seeds, steps, n)
    if bool(dense.any()):
        rows = dense.nonzero()[:, 0]
        got = _dense_first(logits[rows], words[rows], temperature[rows], seeds[rows],
                           steps[rows], n)
        ids[rows] = got
        rest[rows[got == -2]] = True
    if bool(rest.any()):
        rows = rest.nonzero()[:, 0]
        draw = torch.where(dense[rows], 1, 0)  # a dense miss draws again, independently
        for d in (0, 1):
            part = rows[draw == d]
            if part.numel():
                ids[part] = sample_rows(logits[part], temperature[part], seeds[part],
                                        steps[part], bitmask[part], torch.ones(part.numel(),
                                        dtype=torch.bool), limit, draw=d)[0]
    return ids


def _popcount(words: torch.Tensor) -> torch.Tensor:
    """(R,) number of set bits per row of int32 `words` (R, W)."""
    table = _POPCOUNT.get(words.device)
    if table is None:
        values = torch.arange(256, device=words.device)
        table = sum((values >> b) & 1 for b in range(8)).to(torch.int32)
        _POPCOUNT[words.device] = table
    return table[words.contiguous().view(torch.uint8).long()].sum(dim=1)


def _bit_set(words: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """Whether column `cols` (R,) is allowed by each row of `words` (R, W); False for -1."""
    safe = cols.clamp(min=0)
    word = words.gather(1, (safe >> 5)[:, None])[:, 0]
    return ((word >> (safe & 31)) & 1).bool() & (cols >= 0)


def _sparse(logits: torch.Tensor, rows: torch.Tensor, words: torch.Tensor,
            temperature: torch.Tensor, seeds: torch.Tensor, steps: torch.Tensor, n: int
            ) -> torch.Tensor:
    """Rows whose allowed columns lie in few words: read only those words' logits."""
    sub_words = words[rows]
    live = sub_words != 0  # (S, W)
    at = live.nonzero()  # (N, 2): row-major, so each row's words in column order
    width = int(live.sum(dim=1).max()) if at.numel() else 0
    num = rows.numel()
    if width == 0:
        return torch.full((num,), -1, dtype=torch.int64)
    slot = live.to(torch.int32).cumsum_(dim=1)[at[:, 0], at[:, 1]].long() - 1
    word_idx = torch.zeros(num, width, dtype=torch.int64)
    word_val = torch.zeros(num, width, dtype=torch.int32)
    word_idx[at[:, 0], slot] = at[:, 1]
    word_val[at[:, 0], slot] = sub_words[at[:, 0], at[:, 1]]
    lanes = torch.arange(32)
    cols = (word_idx[:, :, None] * 32 + lanes).view(num, -1)  # (S, width * 32), ascending
    ok = ((word_val[:, :, None] >> lanes) & 1).bool().view(num, -1) & (cols < n)
    cols_in = cols.clamp(max=logits.shape[1] - 1)
    if num == logits.shape[0]:
        vals = logits.gather(1, cols_in).float()
    else:  # read only the words' logits, never copy whole rows
        vals = logits[rows[:, None], cols_in].float()
    vals = torch.where(ok & ~torch.isnan(vals), vals, float("-inf"))
    best, pos = vals.max(dim=1)  # the first maximum: columns ascend along the row
    scale = temperature_scale(temperature[rows])
    sampled = ((scale > 0) & (best > float("-inf")) & (best < float("inf"))).nonzero()[:, 0]
    if sampled.numel():
        p = vals[sampled].sub_(best[sampled, None]).mul_(scale[sampled, None]).exp2_()
        u = uniform_cpu(seeds[rows][sampled], steps[rows][sampled])
        pos[sampled] = invert_cdf(p.cumsum_(dim=1), u)
    picked = cols.gather(1, pos[:, None])[:, 0]
    return torch.where(best > float("-inf"), picked, -1)


def _dense_first(logits: torch.Tensor, words: torch.Tensor, temperature: torch.Tensor,
                 seeds: torch.Tensor, steps: torch.Tensor, n: int) -> torch.Tensor:
    """Rows with most columns allowed: the unmasked id where the mask allows it, else -2."""
    x = logits.to(torch.float32, copy=True)
    best, ids = x.max(dim=1)
    scale = temperature_scale(temperature)
    bad = torch.isnan(best) | (best == float("-inf")) | (best == float("inf"))
    sampled = ((scale > 0) & ~bad).nonzero()[:, 0]
    if sampled.numel():
        p = x[sampled].sub_(best[sampled, None]).mul_(scale[sampled, None]).exp2_()
        ids[sampled] = invert_cdf(p.cumsum_(dim=1), uniform_cpu(seeds[sampled], steps[sampled]))
    ok = _bit_set(words, ids) & (ids < n) & ~bad
    return torch.where(ok, ids, -2)
