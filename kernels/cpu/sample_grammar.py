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

Greedy float32 rows take `greedy_grammar` first: numpy on views of the logits and the mask
(fewer and cheaper calls than the torch routes, which matters because after the forward every
call runs cache-cold, and numpy's first-occurrence argmax reads 8 x 151,936 logits in ~0.2 ms
against ~0.6 ms for torch's `max(dim)` here). When the whole batch allows at most FEW_BITS
columns it walks their set bits in Python. Rows it cannot settle exactly (NaN or a banned +inf
in the way) go down the routes above.

Every route gives the greedy id of `sampling.sample_ref` and samples softmax(x / T) over the
allowed columns; a row's draws depend only on its (seed, step).
"""

from __future__ import annotations

import threading

import numpy as np
import torch
from thinkgate.kernels.cpu.inverse_cdf import invert_cdf, uniform_cpu
from thinkgate.kernels.cpu.sample_rows import sample_rows
from thinkgate.kernels.sampling import temperature_scale

SPARSE_FRACTION = 1 / 16  # non-zero words x 32 below this share of the row: sparse route
DENSE_FRACTION = 3 / 4  # allowed columns above this share: unmasked first
_POPCOUNT: dict[torch.device, torch.Tensor] = {}
FEW_BITS = 256  # allowed columns in a whole batch up to which Python walks the set bits
_UNSETTLED = -2  # greedy_grammar's answer for a row it leaves to the torch routes
_LANES = np.arange(32, dtype=np.int32)
_BAN = np.float32(3e38)  # subtracted from banned logits in the masked argmax (see _masked_argmax)
_scratch = threading.local()  # .buf: (rows, columns) float32, grown to the largest batch seen


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
    words = bitmask if bitmask.shape[1] == (n + 31) // 32 else bitmask[:, : (n + 31) // 32]
    if n % 32:  # bits past n are banned: clear them so counts and reads stop at n
        words = words.clone()
        words[:, -1] &= (1 << (n % 32)) - 1
    if logits.dtype != torch.float32 or n == 0:
        return _routes(logits, temperature, seeds, steps, bitmask, words, limit, n)
    # Python, not numpy, for these few values: after the forward the first call of each numpy
    # function in a step costs ~10 us (cache-cold), the second ~1 us.
    greedy = [t <= 0 for t in temperature.tolist()]  # (a NaN temperature takes the torch routes)
    if all(greedy):
        ids, settled = greedy_grammar(logits, words, n)
        if settled:
            return torch.from_numpy(ids)
    elif any(greedy):
        ids = np.full(num_rows, _UNSETTLED, dtype=np.int64)
        rows = np.flatnonzero(greedy)
        ids[rows] = greedy_grammar(logits, words, n, rows)[0]
    else:
        return _routes(logits, temperature, seeds, steps, bitmask, words, limit, n)
    out = torch.from_numpy(ids)
    part = torch.from_numpy(np.flatnonzero(ids == _UNSETTLED))  # sampled rows, NaN in the way
    out[part] = _routes(logits[part], temperature[part], seeds[part], steps[part],
                        bitmask[part], words[part], limit, n)
    return out


def _routes(logits: torch.Tensor, temperature: torch.Tensor, seeds: torch.Tensor,
            steps: torch.Tensor, bitmask: torch.Tensor, words: torch.Tensor, limit: int, n: int
            ) -> torch.Tensor:
    """The torch routes by mask shape (sparse, dense, masked), for any row; `words` is the
    bitmask clipped to n columns."""
    num_rows, num_cols = logits.shape
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
    """Whether column `cols` (R,) is allowed by each row of `words` (R, W); False for -1 and
    for a column past the words (a padded lm_head's columns beyond a narrower mask)."""
    inside = (cols >= 0) & (cols < 32 * words.shape[1])
    safe = torch.where(inside, cols, 0)
    word = words.gather(1, (safe >> 5)[:, None])[:, 0]
    return ((word >> (safe & 31)) & 1).bool() & inside


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


def greedy_grammar(logits: torch.Tensor, words: torch.Tensor, n: int,
                   rows: np.ndarray | None = None) -> tuple[np.ndarray, bool]:
    """(R,) int64 greedy ids of float32 `logits` rows (all, or `rows`) under `words` (B, ceil(n/32))
    int32, bits past `n` clear: the first maximal allowed column, -1 where no allowed logit is
    above -inf, `_UNSETTLED` where the torch routes must answer (a NaN in the way); and whether
    no row is `_UNSETTLED`.

    Sparse rows (few non-zero words) read only the logits their set bits name; the others take
    the row's unmasked first maximum when the mask allows it (the first maximal allowed column
    then, since no earlier column reaches it) and otherwise a masked argmax in a scratch buffer.
    Reads the tensors in place (numpy views); writes neither."""
    x = logits.numpy()  # (B, V) view
    w = words.numpy()  # (B, W) view
    sub = w if rows is None else w[rows]  # (R, W)
    seg, word = np.nonzero(sub)  # row-major: each row's non-zero words in column order
    if seg.size <= FEW_BITS:
        ids = _few_bits_argmax(x, rows, sub.shape[0], seg, word, sub[seg, word].tolist())
        if ids is not None:
            return ids, True
    rows = np.arange(x.shape[0]) if rows is None else rows
    words_at = seg, word, np.bincount(seg, minlength=sub.shape[0])
    sparse = words_at[2] * 32 <= SPARSE_FRACTION * x.shape[1]
    if sparse.all():
        return _sparse_argmax(x, sub, rows, words_at), True
    out = np.empty(rows.size, dtype=np.int64)
    if sparse.any():
        out[sparse] = _sparse_argmax(x, sub[sparse], rows[sparse], _nonzero_words(sub[sparse]))
    wide = ~sparse
    out[wide] = _checked_argmax(x, w, rows[wide], n)
    return out, bool(out.min() > _UNSETTLED)


def _few_bits_argmax(x: np.ndarray, rows: np.ndarray | None, num_rows: int, seg: np.ndarray,
                     word: np.ndarray, values: list[int]) -> np.ndarray | None:
    """The sparse route in plain Python when the batch allows at most FEW_BITS columns in all
    (a step's numpy calls cost more than walking a few set bits); None above that. `seg`
    indexes `rows` (x's rows themselves when None)."""
    if sum((v & 0xFFFFFFFF).bit_count() for v in values) > FEW_BITS:
        return None
    hit_rows, hit_cols = [], []
    for r, base, v in zip(seg.tolist(), word.tolist(), values):
        v &= 0xFFFFFFFF
        base *= 32
        while v:
            low = v & -v
            hit_rows.append(r)
            hit_cols.append(base + low.bit_length() - 1)
            v ^= low
    out, best = [-1] * num_rows, [-np.inf] * num_rows
    if hit_rows:
        at = hit_rows if rows is None else rows[hit_rows]
        for r, c, v in zip(hit_rows, hit_cols, x[at, hit_cols].tolist()):
            if v > best[r]:  # strict: the first maximum (columns ascend); never NaN, never -inf
                best[r], out[r] = v, c
    return np.array(out, dtype=np.int64)


def _nonzero_words(sub: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(row, word) of each non-zero word of `sub` (R, W) in row-major order, and per-row counts."""
    row, word = np.divmod(np.flatnonzero(sub != 0), sub.shape[1])
    return row, word, np.bincount(row, minlength=sub.shape[0])


def _sparse_argmax(x: np.ndarray, sub: np.ndarray, rows: np.ndarray,
                   words_at: tuple[np.ndarray, np.ndarray, np.ndarray]) -> np.ndarray:
    """First maximal allowed column of x's `rows` under their words `sub` (S, W), reading only
    the columns of the non-zero words (`words_at`, from `_nonzero_words(sub)`)."""
    seg, word, counts = words_at
    out = np.full(rows.size, -1, dtype=np.int64)
    if seg.size == 0:
        return out
    bits = (sub[seg, word][:, None] >> _LANES) & 1  # (N, 32)
    cols = np.minimum(word[:, None] * 32 + _LANES, x.shape[1] - 1)  # (N, 32), ascending per row
    vals = x[rows[seg][:, None], cols]  # (N, 32) copy of the named logits only
    vals[(bits == 0) | np.isnan(vals)] = -np.inf  # NaN is never allowed
    nonempty = np.flatnonzero(counts)
    starts = 32 * (np.cumsum(counts) - counts)  # first entry of each row in vals.ravel()
    flat_vals = vals.ravel()
    best = np.maximum.reduceat(flat_vals, starts[nonempty])  # (L,)
    hits = np.flatnonzero(flat_vals == np.repeat(best, 32 * counts[nonempty]))
    first = hits[np.searchsorted(hits, starts[nonempty])]  # each row's first maximum
    out[nonempty] = np.where(best > -np.inf, cols.ravel()[first], -1)
    return out


def _checked_argmax(x: np.ndarray, w: np.ndarray, rows: np.ndarray, n: int) -> np.ndarray:
    """Unmasked first maximum where the mask allows it, else `_masked_argmax`."""
    if rows.size == x.shape[0]:  # every row, in order (rows are distinct and ascending)
        ids = x.argmax(axis=1)
    else:
        ids = np.array([x[r].argmax() for r in rows], dtype=np.int64)
    vals = x[rows, ids]
    allowed = (w[rows, np.minimum(ids >> 5, w.shape[1] - 1)] >> (ids & 31)) & 1
    ok = (allowed == 1) & (ids < n) & (vals > -np.inf)  # False for NaN too
    if not ok.all():
        miss = np.flatnonzero(~ok)
        ids[miss] = _masked_argmax(x, w, rows[miss], n)
    return ids


def _masked_argmax(x: np.ndarray, w: np.ndarray, rows: np.ndarray, n: int) -> np.ndarray:
    """First maximal allowed column by one argmax over x - 3e38 * banned (scratch buffer).

    An allowed logit is unchanged (x - 0); a banned one drops to about -3e38. If the argmax lands
    on an allowed, non-NaN column c, every earlier allowed column is below x[c] and none later is
    above it, so c is the answer (or -1 when x[c] is -inf: nothing allowed is above -inf). A
    banned or NaN winner (a banned +inf, NaN logits, allowed logits below -3e38) is left to the
    torch routes."""
    buf = getattr(_scratch, "buf", None)
    if buf is None or buf.shape[0] < rows.size or buf.shape[1] < n:
        old = (0, 0) if buf is None else buf.shape
        buf = _scratch.buf = np.empty((max(rows.size, old[0]), max(n, old[1])), np.float32)
    pen = buf[: rows.size, :n]
    bits = np.unpackbits(w[rows].view(np.uint8), axis=1, count=n, bitorder="little")  # (M, n)
    np.subtract(bits, np.float32(1), out=pen)
    pen *= _BAN  # 0 where allowed, -3e38 where banned
    for k, r in enumerate(rows):
        pen[k] += x[r, :n]
    ids = pen.argmax(axis=1)
    vals = x[rows, ids]
    settled = (bits[np.arange(rows.size), ids] == 1) & ~np.isnan(vals)
    return np.where(settled, np.where(vals > -np.inf, ids, -1), _UNSETTLED)
