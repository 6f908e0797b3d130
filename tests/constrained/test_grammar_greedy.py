"""The CPU grammar path's greedy route (`kernels/cpu/sample_grammar.py`'s `greedy_grammar`) against the spec.

Each case is built to take one route (a few set bits walked in Python, sparse words read in
place, the unmasked maximum kept, the masked argmax after a miss, the torch routes for a row the
route cannot settle); a spy checks the route was taken, and the ids must equal
`sampling.sample_ref`'s greedy ids.
"""

from __future__ import annotations

import pytest
import torch
from thinkgate.kernels import SamplingTensors, sample
from thinkgate.kernels.bitmask import pack_bitmask_ref
from thinkgate.kernels.cpu import sample_grammar as sg
from thinkgate.kernels.sampling import sample_ref

VOCABS = [1, 31, 33, 2048, 8064, 32001]


def _spec(logits: torch.Tensor, bitmask: torch.Tensor, limit: int) -> torch.Tensor:
    rows = logits.shape[0]
    zeros = torch.zeros(rows, dtype=torch.int64)
    return sample_ref(logits, torch.zeros(rows), zeros, zeros, bitmask, cover=limit)[0]


def _ours(logits: torch.Tensor, bitmask: torch.Tensor, limit: int,
          temperature: torch.Tensor | None = None) -> torch.Tensor:
    rows = logits.shape[0]
    temperature = torch.zeros(rows) if temperature is None else temperature
    seeds = torch.arange(rows, dtype=torch.int64)
    return sg.sample_grammar(logits, temperature, seeds, seeds + 7, bitmask, limit)


@pytest.fixture
def gen() -> torch.Generator:
    return torch.Generator().manual_seed(4321)


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Counts of calls into each route of `greedy_grammar` and into the torch routes."""
    calls = {"few": 0, "sparse": 0, "checked": 0, "masked": 0, "torch": 0}
    for name, key in (("_few_bits_argmax", "few"), ("_sparse_argmax", "sparse"),
                      ("_checked_argmax", "checked"),
                      ("_masked_argmax", "masked"), ("_routes", "torch")):
        real = getattr(sg, name)

        def counted(*args: object, _real: object = real, _key: str = key) -> object:
            calls[_key] += 1
            return _real(*args)  # type: ignore[operator]

        monkeypatch.setattr(sg, name, counted)
    return calls


def _case(route: str, vocab: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits (4, vocab), allowed (4, vocab) bool) that send every row down `route`."""
    rows = 4
    logits = torch.randn(rows, vocab, generator=gen) * 3
    if route == "few":  # a few allowed columns in at most two words
        allowed = torch.zeros(rows, vocab, dtype=torch.bool)
        for r in range(rows):
            allowed[r, torch.randint(0, vocab, (3,), generator=gen)] = True
            allowed[r, 32 * (r % max(vocab // 32, 1)):][:5] = r != 3  # row 3: one word
        allowed[2] = False  # nothing allowed: -1
    elif route == "sparse":  # too many columns for Python, in few enough words
        allowed = torch.zeros(rows, vocab, dtype=torch.bool)
        for r in range(rows):
            start = int(torch.randint(0, vocab // 32 - 12, (1,), generator=gen))
            allowed[r, 32 * start: 32 * (start + 12)] = True
            allowed[r, 32 * start + r] = False
    else:
        allowed = torch.rand(rows, vocab, generator=gen) < 0.9
        top = logits.argmax(dim=1)
        allowed[torch.arange(rows), top] = route == "hit"
        if route == "unsettled":  # a banned +inf wins the masked argmax: the torch routes decide
            logits[torch.arange(rows), top] = float("inf")
    return logits, allowed


@pytest.mark.parametrize(("route", "vocab"), [  # 12 allowed words are sparse from 8064 on
    (r, v) for r in ("few", "sparse", "hit", "masked", "unsettled") for v in VOCABS
    if v >= 32 and (r != "sparse" or v >= 8064)])
def test_each_greedy_route_matches_the_spec(route: str, vocab: int, gen: torch.Generator,
                                            spy: dict[str, int]) -> None:
    logits, allowed = _case(route, vocab, gen)
    bitmask = pack_bitmask_ref(allowed)
    before = logits.clone(), bitmask.clone()
    assert torch.equal(_ours(logits, bitmask, vocab), _spec(logits, bitmask, vocab))
    assert torch.equal(logits, before[0]) and torch.equal(bitmask, before[1])  # read only
    if route == "few":
        assert spy == {"few": 1, "sparse": 0, "checked": 0, "masked": 0, "torch": 0}
    if vocab < 8064:  # short rows allow few columns in all: Python walks them whatever the case
        return
    assert spy["sparse"] == (1 if route == "sparse" else 0)
    assert spy["checked"] == (1 if route in ("hit", "masked", "unsettled") else 0)
    assert spy["masked"] == (1 if route in ("masked", "unsettled") else 0)
    assert spy["torch"] == (1 if route == "unsettled" else 0)


@pytest.mark.parametrize("vocab", VOCABS)
def test_awkward_rows_match_the_spec(vocab: int, gen: torch.Generator) -> None:
    """Ties, NaN, -inf rows, +inf, a limit short of the row, strided and repeated rows."""
    rows = 10
    full = torch.randn(rows, vocab + 5, generator=gen) * 2
    logits = full[:, :vocab]  # strided rows
    logits[0] = float("-inf")
    logits[1, :] = 0.5  # all tied: the first allowed column
    logits[2, vocab // 2] = float("nan")
    logits[3, :] = float("nan")
    logits[4, vocab - 1] = float("inf")
    logits[5, :: max(vocab // 7, 1)] = 9.0  # tied maxima, some banned
    allowed = torch.rand(rows, vocab, generator=gen) < torch.linspace(0.02, 1.0, rows)[:, None]
    allowed[6] = False
    allowed[7, :] = True
    bitmask = pack_bitmask_ref(allowed)
    for limit in sorted({vocab, max(vocab - 3, 1), max(vocab // 2, 1)}):
        assert torch.equal(_ours(logits, bitmask, limit), _spec(logits, bitmask, limit)), limit
    one = logits[5:6].expand(6, vocab)  # stride-0 rows
    mask = bitmask[5:6].expand(6, -1)
    assert torch.equal(_ours(one, mask, vocab), _spec(one, mask, vocab))


@pytest.mark.parametrize("extra", [0, 128])  # 0: Python walks the bits; 128: numpy does
def test_sparse_rows_with_nan_and_minus_inf(extra: int, gen: torch.Generator,
                                            spy: dict[str, int]) -> None:
    vocab = 4096
    logits = torch.randn(3, vocab, generator=gen)
    allowed = torch.zeros(3, vocab, dtype=torch.bool)
    cols = [5, 40, 41, 3000, *range(3456, 3456 + extra)]
    allowed[:, cols] = True
    logits[0, 40] = float("nan")  # banned as NaN; the others compete
    logits[1, cols] = float("-inf")  # allowed but all -inf: -1
    logits[2, [40, 3000]] = 7.0  # tie: the first
    bitmask = pack_bitmask_ref(allowed)
    ours = _ours(logits, bitmask, vocab)
    assert torch.equal(ours, _spec(logits, bitmask, vocab))
    assert ours[1] == -1 and ours[2] == 40
    assert spy["sparse"] == (0 if extra == 0 else 1)  # (Python declines 3 x 132 columns)


def test_mixed_batch_greedy_rows_match_and_sampled_rows_stay_allowed(gen: torch.Generator
                                                                     ) -> None:
    vocab, rows = 5000, 12
    logits = torch.randn(rows, vocab, generator=gen) * 2
    allowed = torch.rand(rows, vocab, generator=gen) < torch.linspace(0.001, 0.95, rows)[:, None]
    allowed[:, 17] = True
    bitmask = pack_bitmask_ref(allowed)
    temperature = torch.tensor([0.0, 0.8] * (rows // 2))
    ours = _ours(logits, bitmask, vocab, temperature)
    greedy = temperature <= 0
    assert torch.equal(ours[greedy], _spec(logits, bitmask, vocab)[greedy])
    sampled = ours[~greedy]
    assert bool(allowed[(~greedy).nonzero()[:, 0], sampled].all())


def test_public_sample_at_a_large_vocabulary_takes_the_route(gen: torch.Generator,
                                                             spy: dict[str, int]) -> None:
    """Through `kernels.sample` (the engine's call) at a width that selects the grammar routes."""
    vocab, rows = 40_000, 8
    logits = torch.randn(rows, vocab, generator=gen)
    allowed = torch.rand(rows, vocab, generator=gen) < torch.tensor([0.0005, 0.5] * 4)[:, None]
    bitmask = pack_bitmask_ref(allowed)
    tensors = SamplingTensors.from_lists([0.0] * rows)
    got = sample(logits, tensors, bitmask=bitmask, vocab_size=vocab - 1).token_ids
    assert torch.equal(got, _spec(logits, bitmask, vocab - 1))
    assert spy["sparse"] == 1 and spy["checked"] == 1 and spy["torch"] == 0
