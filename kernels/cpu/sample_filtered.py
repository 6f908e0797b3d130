"""Top-k / top-p / min-p on the CPU sampling path without sorting rows.

`filters.logit_floor` defines the kept set S as a prefix of the row sorted by logit (all tokens
tied with the last kept one stay), and sorting 32 x 8k logits costs ~13 ms on this CPU. With
p = 2 ** ((x - max) * scale) (the maximum has p = 1) each sampled row takes one of three routes:

- top-k rows (k <= `MAX_TOP_K`): S lies inside the row's k + 1 largest logits. The k + 1
  `PIECE`-column pieces with the largest maxima hold them (a column outside those pieces is <=
  the (k+1)-th piece maximum), so a partial sort of those pieces finds them (`top_candidates`);
  the floor rule runs on the candidates (top-p normalised over the top k, min-p against p = 1)
  and the draw inverts the CDF over the kept ones;
- rows without top-k: one pass writes the weights (`weights.weights`: p up to a per-row
  factor; p itself on min-p rows); min-p zeroes p < min_p in place (one threshold pass);
  top-p is a rejection on top of that: draw t from p by the inverted CDF (chunked, no cumsum)
  and keep it when M(t) = sum(p[p > p_t]) < top_p * Z (Z: the whole row's mass, before
  min-p), which is the floor rule at the first position of t's tie group; else take the next of
  the row's `MAX_DRAWS` draws. A try succeeds with probability p(S) / p(min-p set) >= top_p and
  costs one vectorised pass (p / p_t, thresholded at 1, summed), only for the rows still
  drawing. That samples exactly p | S: a token t with p_t >= min_p has every heavier token
  above min_p too, so M(t) over the thresholded row is M(t) over the whole row;
- rows still drawing after `MAX_DRAWS` tries, rows with k > `MAX_TOP_K`, and rows whose
  (k+1)-th logit ties the floor take the exact floor (`logit_floor_sparse`) and one last draw.

A row's draws depend only on its (seed, step); the chunk sums and the per-row reductions never
mix rows, so a row samples the same token alone or in any batch.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F
from thinkgate.kernels.cpu.inverse_cdf import (
    CHUNK,
    invert_cdf,
    invert_chunked,
    invert_np,
    uniform_cpu,
    uniforms_np,
)
from thinkgate.kernels.cpu.weights import exp2_rows, exp2_weights, weights, workspace
from thinkgate.kernels.filters import logit_floor_sparse

MAX_DRAWS = 6
MAX_TOP_K = 1024
PIECE = 32  # columns per piece when `top_candidates` skips most of a row


def sample_filtered(
    x: torch.Tensor,
    best: torch.Tensor,
    scale: np.ndarray,
    temperature: torch.Tensor,
    seeds: np.ndarray,
    steps: np.ndarray,
    top_k: torch.Tensor | None,
    top_p: torch.Tensor | None,
    min_p: torch.Tensor | None,
) -> np.ndarray:
    """(R,) ids for sampled rows `x` (R, V) (-inf where banned, no NaN; each row's max `best`
    (R,) fp32 is finite), `scale` (R,) = log2(e) / T > 0; `x` is only read."""
    num_rows, num_cols = x.shape
    filters = (top_k, top_p, min_p)
    k = (np.full(num_rows, num_cols, dtype=np.int64) if top_k is None
         else np.minimum(np.where(top_k.numpy() > 0, top_k.numpy(), num_cols), num_cols))
    ids = np.full(num_rows, -1, dtype=np.int64)
    exact = (k < num_cols) & (k > MAX_TOP_K)
    routes = ((k < num_cols) & (k <= MAX_TOP_K), k == num_cols)
    for route, on in zip((_top_k_candidates, _rejection), routes):
        rows = np.flatnonzero(on)
        if rows.size == 0:
            continue
        whole = rows.size == num_rows
        index = torch.from_numpy(rows)
        pick = [None if f is None else (f if whole else f[index]).numpy() for f in filters]
        got = route(x if whole else x[index], best if whole else best[index], scale[rows],
                    seeds[rows], steps[rows], k[rows], *pick)
        ids[rows] = got
        exact[rows[got == -2]] = True
    if exact.any():
        rows = np.flatnonzero(exact)
        index = torch.from_numpy(rows)
        rest = x[index].float()
        floor = logit_floor_sparse(rest, temperature[index],
                                   *[None if f is None else f[index] for f in filters])
        rest.masked_fill_(rest < floor[:, None], -math.inf)
        rest.sub_(best[index, None]).mul_(torch.from_numpy(scale[rows])[:, None])
        q = rest.exp2_().cumsum_(dim=1)
        u = uniform_cpu(torch.from_numpy(seeds[rows]), torch.from_numpy(steps[rows]), MAX_DRAWS)
        ids[rows] = invert_cdf(q, u).numpy()
    return ids


def top_candidates(x: torch.Tensor, width: int) -> tuple[np.ndarray, np.ndarray]:
    """(values fp32, columns int64), each (R, width), of the `width` largest entries of each
    row of `x` (R, V), values descending (ties in any order).

    When `width` pieces of `PIECE` columns are a small part of the row, only those with the
    `width` largest maxima are read: every entry outside them is <= the `width`-th largest
    maximum, itself <= the row's `width`-th largest value, so they hold the `width` largest
    values."""
    num_rows, num_cols = x.shape
    num_pieces = num_cols // PIECE
    every = np.arange(num_rows)[:, None]
    if num_cols % PIECE or 2 * width > num_pieces:
        values, pieces = x.float().numpy(), None
    else:
        xp = x.contiguous().view(num_rows * num_pieces, PIECE)
        maxima = xp.view(num_rows, num_pieces, PIECE).amax(dim=2)
        pieces = maxima.topk(width, dim=1, sorted=False).indices.numpy()  # (R, width)
        flat = torch.from_numpy((pieces + every * num_pieces).reshape(-1))
        values = xp.index_select(0, flat).float().numpy().reshape(num_rows, width * PIECE)
    at = np.argpartition(-values, width - 1, axis=1)[:, :width]
    top = values[every, at]
    order = np.argsort(-top, axis=1, kind="stable")
    at = at[every, order]
    cols = at if pieces is None else pieces[every, at // PIECE] * PIECE + at % PIECE
    return top[every, order], cols.astype(np.int64)


def _top_k_candidates(x: torch.Tensor, best: torch.Tensor, scale: np.ndarray,
                      seeds: np.ndarray, steps: np.ndarray, k: np.ndarray,
                      top_k: np.ndarray | None, top_p: np.ndarray | None,
                      min_p: np.ndarray | None) -> np.ndarray:
    """The floor rule on each row's k largest logits; -2 where the (k+1)-th logit ties the
    floor (S may then go past the k candidates)."""
    num_rows, num_cols = x.shape
    width = min(int(k.max()) + 1, num_cols)
    vals, cols = top_candidates(x, width)  # (R, width), descending
    every = np.arange(num_rows)
    in_k = np.arange(width)[None, :] < k[:, None]
    with np.errstate(invalid="ignore"):  # -inf - max
        q = np.exp2((vals - best.numpy()[:, None]) * scale[:, None])  # p of each candidate
    keep = in_k.copy()
    if top_p is not None:
        kept = q * in_k
        kept /= np.maximum(kept.sum(axis=1, keepdims=True), np.float32(1e-30))
        before = np.cumsum(kept, axis=1) - kept
        keep &= (before < top_p[:, None]) | (top_p >= 1)[:, None]
    if min_p is not None:
        keep &= q >= np.maximum(min_p, 0)[:, None]
    keep[:, 0] = True
    floor = vals[every, keep.sum(axis=1) - 1]
    w = np.where(in_k & (vals >= floor[:, None]), q, np.float32(0))
    at = invert_np(np.cumsum(w, axis=1), uniforms_np(seeds, steps, 0, 1))[:, 0]
    ids = cols[every, at]
    nxt = vals[every, np.minimum(k, width - 1)]
    ties = (k < width) & (nxt == floor) & (nxt > -np.inf)
    return np.where(ties, -2, ids)


def _rejection(x: torch.Tensor, best: torch.Tensor, scale: np.ndarray, seeds: np.ndarray,
               steps: np.ndarray, k: np.ndarray, top_k: np.ndarray | None,
               top_p: np.ndarray | None, min_p: np.ndarray | None) -> np.ndarray:
    """Rows without top-k: min-p thresholded, top-p by rejection; -2 after `MAX_DRAWS` misses."""
    num_rows = x.shape[0]
    on = np.zeros(num_rows, dtype=bool) if min_p is None else min_p > 0
    if on.all():  # min-p compares p with p = 1 at the maximum
        p = exp2_weights(x, best, scale)  # (R, V'), zero-padded; the workspace
    else:
        p = weights(x, best, scale)
        if on.any():
            exp2_rows(p, x, best, scale, np.flatnonzero(on))
    drawing = top_p is not None and bool((top_p < 1).any())
    if not drawing:
        if min_p is not None:
            _threshold_min_p(p, min_p)
        return invert_chunked(p, uniforms_np(seeds, steps, 0, 1))[:, 0]
    assert top_p is not None
    norm = None  # top-p is normalised over the whole row, before min-p
    if min_p is not None:
        norm = p.view(num_rows, -1, CHUNK).sum(dim=2).numpy().sum(axis=1, dtype=np.float64)
        _threshold_min_p(p, min_p)
    drawn, total = invert_chunked(p, uniforms_np(seeds, steps, 0, MAX_DRAWS), totals=True)
    bound = top_p * (total if norm is None else norm)  # accept t when M(t) < top_p * Z
    ids = np.where(top_p >= 1, drawn[:, 0], -2)
    pending = np.flatnonzero(top_p < 1)
    for draw in range(MAX_DRAWS):  # about 1 - top_p of the rows reach the second draw
        if pending.size == 0:
            break
        t = drawn[pending, draw : draw + 1]
        ok = _mass_above(p, pending, t)[:, 0] < bound[pending]
        ids[pending[ok]] = t[ok, 0]
        pending = pending[~ok]
    return ids


def _mass_above(p: torch.Tensor, rows: np.ndarray | None, t: np.ndarray) -> np.ndarray:
    """(n, D) M = sum(p[r][p[r] > p[r, t]]) for each of `rows` (None: all) and its columns `t`
    (n, D): p / p_t (exactly 1 at ties) thresholded at 1, in the second workspace."""
    num_rows, num_cols = p.shape
    n, num_draws = t.shape
    if rows is None:
        rows = np.arange(num_rows)
    src = p if n == num_rows else p.index_select(0, torch.from_numpy(rows))
    pt = p.numpy()[rows[:, None], t]  # (n, D), > 0: a drawn column has weight
    ratio = workspace(n * num_draws, num_cols, 1).view(n, num_draws, num_cols)
    torch.div(src[:, None, :], torch.from_numpy(pt)[:, :, None], out=ratio)
    F.threshold_(ratio, 1.0, 0.0)
    sums = ratio.view(n, num_draws, -1, CHUNK).sum(dim=3).numpy()
    return sums.sum(axis=2, dtype=np.float64) * pt


def _threshold_min_p(p: torch.Tensor, min_p: np.ndarray) -> None:
    """Zero p < min_p in place (p relative to the row's maximum, as `logit_floor`'s rule)."""
    level = np.maximum(min_p, 0).astype(np.float32)
    # F.threshold keeps values strictly above its level: step just below min_p to keep p == min_p
    below = np.nextafter(level, np.float32(0))
    if (level == level[0]).all():
        if level[0] > 0:
            F.threshold_(p, float(below[0]), 0.0)
        return
    for row in np.flatnonzero(level > 0):
        F.threshold_(p[row], float(below[row]), 0.0)
