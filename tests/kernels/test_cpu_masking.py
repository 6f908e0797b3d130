"""One masking rule on the CPU: the sampler's routes against the twin,
`bitmask.apply_token_bitmask_inplace_ref`, on every mask shape the bitmask tests use.

The dense route (`sample_rows.masked`) masks a float32 copy with the twin itself; the grammar
routes (`sample_grammar`: set bits walked in Python, sparse words read in place, the unmasked
maximum checked against its bit, a masked argmax, the torch routes) read the mask without
writing a masked row, so each is checked here to choose only what the twin's masked row allows:
greedy rows the first maximum of that row, sampled rows a column it leaves finite.
"""

from __future__ import annotations

import pytest
import torch
from kernel_inputs import random_bitmask, random_logits
from thinkgate.kernels.bitmask import apply_token_bitmask_inplace_ref, pack_bitmask_ref
from thinkgate.kernels.cpu import sample_grammar as sg
from thinkgate.kernels.cpu.sample_rows import masked

VOCABS = [1, 31, 32, 33, 8192, 32000, 32001, 151936]  # test_kernel_bitmask.py's
SHAPES = ["random", "sparse", "mixed", "narrow", "cover"]
ROUTES = {  # (SPARSE_FRACTION, DENSE_FRACTION) that send every row of `_routes` one way
    "as-is": (sg.SPARSE_FRACTION, sg.DENSE_FRACTION),
    "sparse": (2.0, sg.DENSE_FRACTION),
    "dense": (0.0, 0.0),
    "masked": (0.0, 2.0),
}


def _case(shape: str, vocab: int, dtype: torch.dtype, gen: torch.Generator
          ) -> tuple[torch.Tensor, torch.Tensor, int]:
    """(logits (4, vocab) with strided rows, bitmask, limit) of one mask shape."""
    rows = 4
    logits = random_logits(rows, vocab, dtype, gen, pad=5)
    logits[0, vocab // 2] = float("nan")  # never chosen, allowed or not
    limit = vocab
    if shape == "random":  # all-banned, all-allowed, one-bit and random words
        bitmask = random_bitmask(rows, vocab, gen)
    elif shape in ("sparse", "mixed"):  # scattered single tokens (a few rows dense)
        allowed = torch.rand(rows, vocab, generator=gen) < 0.001
        allowed[:, vocab - 1] = True
        if shape == "mixed":
            allowed[1] = torch.rand(vocab, generator=gen) < 0.7
            allowed[2] = torch.rand(vocab, generator=gen) < 0.2
        allowed[3] = False  # nothing allowed: -1
        bitmask = pack_bitmask_ref(allowed)
    elif shape == "narrow":  # the bitmask covers fewer columns than the row: the rest banned
        bitmask = random_bitmask(rows, vocab, gen)[:, : max(1, (vocab + 31) // 32 // 2)]
        bitmask = bitmask.contiguous()
    else:  # cover: the vocab limit cuts a word; columns past it banned although their bits set
        bitmask = random_bitmask(rows, vocab, gen)
        limit = max(0, vocab - 7)
    return logits, bitmask, limit


def _twin(logits: torch.Tensor, bitmask: torch.Tensor, limit: int) -> torch.Tensor:
    x = logits.float().clone()
    apply_token_bitmask_inplace_ref(x, bitmask, vocab_size=limit)
    return x.nan_to_num_(nan=float("-inf"), posinf=float("inf"), neginf=float("-inf"))  # NaN: banned


@pytest.mark.parametrize("vocab", VOCABS)
@pytest.mark.parametrize("shape", SHAPES)
def test_the_dense_route_masks_by_the_twins_rule(vocab: int, shape: str, gen) -> None:
    """`masked` is the twin's docstring loop on a float32 copy: a column is kept bit for bit
    where its bit is set and it is below the cover, else -inf (NaN included)."""
    logits, bitmask, limit = _case(shape, vocab, torch.bfloat16, gen)
    cover = min(limit, 32 * bitmask.shape[1])
    cols = torch.arange(vocab)
    words = bitmask.long()[:, (cols // 32).clamp(max=bitmask.shape[1] - 1)]  # (R, V)
    keep = ((words >> (cols % 32)) & 1).bool() & (cols < cover)
    want = torch.where(keep, logits.float(), float("-inf"))
    got = masked(logits, bitmask, limit)
    assert got.dtype == torch.float32 and got.shape == logits.shape
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)


# every vocabulary and shape as the routes pick them; each route forced on the narrower ones
CASES = [("as-is", vocab, shape) for vocab in VOCABS for shape in SHAPES] + [
    (route, vocab, shape) for route in ("sparse", "dense", "masked")
    for vocab in (33, 8192) for shape in SHAPES]


@pytest.mark.parametrize(("route", "vocab", "shape"), CASES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_grammar_routes_choose_what_the_twin_allows(route: str, vocab: int, shape: str,
                                                    dtype: torch.dtype, gen, monkeypatch) -> None:
    sparse, dense = ROUTES[route]
    monkeypatch.setattr(sg, "SPARSE_FRACTION", sparse)
    monkeypatch.setattr(sg, "DENSE_FRACTION", dense)
    logits, bitmask, limit = _case(shape, vocab, dtype, gen)
    rows = logits.shape[0]
    x = _twin(logits, bitmask, limit)
    best = x.max(dim=1)
    want = torch.where(best.values > float("-inf"), best.indices, -1)
    seeds = torch.arange(rows, dtype=torch.int64)
    greedy = sg.sample_grammar(logits, torch.zeros(rows), seeds, seeds + 3, bitmask, limit)
    assert torch.equal(greedy, want), (greedy, want)
    for temperature in (0.7, 1e-3):
        ids = sg.sample_grammar(logits, torch.full((rows,), temperature), seeds, seeds + 3,
                                bitmask, limit)
        assert torch.equal(ids < 0, want < 0), (ids, want)  # -1 exactly where nothing is allowed
        live = (want >= 0).nonzero()[:, 0]
        assert bool((x[live, ids[live]] > float("-inf")).all()), ids
