"""apply_token_bitmask_inplace: Triton == twin exactly, twin == xgrammar, argument errors."""

from __future__ import annotations

import pytest
import torch
from kernel_inputs import random_bitmask, random_logits
from thinkgate.kernels import apply_token_bitmask_inplace
from thinkgate.kernels.bitmask import (
    apply_token_bitmask_inplace_ref,
    apply_token_bitmask_inplace_triton,
    check_indices,
    pack_bitmask_ref,
)

VOCABS = [1, 31, 32, 33, 8192, 32000, 32001, 151936]
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def _expected(logits: torch.Tensor, bitmask: torch.Tensor, rows: list[int], cover: int) -> torch.Tensor:
    """The docstring's plain loop, vectorised per row with Python ints."""
    out = logits.clone()
    for r in rows:
        for c in range(logits.shape[1]):
            word = int(bitmask[r, c // 32]) if c // 32 < bitmask.shape[1] else 0
            if c >= cover or not (word >> (c % 32)) & 1:
                out[r, c] = float("-inf")
    return out


@pytest.mark.parametrize("vocab", VOCABS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("which", ["all", "partial"])
def test_triton_matches_twin(vocab: int, dtype: torch.dtype, which: str, gen, device) -> None:
    rows = 3
    logits = random_logits(rows, vocab, dtype, gen, pad=7).to(device)  # strided rows
    bitmask = random_bitmask(rows, vocab, gen).to(device)
    indices = {"all": None, "partial": [2, 0]}[which]
    ours, twin = logits.clone(), logits.clone()
    apply_token_bitmask_inplace_triton(ours, bitmask, check_indices(indices, rows, ours.device))
    apply_token_bitmask_inplace_ref(twin, bitmask, indices)
    assert torch.equal(ours, twin)
    if which == "partial":
        assert torch.equal(ours[1], logits[1])  # a row not in indices is untouched


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("rows", "vocab", "pad", "words"), [
    (1, 3 * 2048 + 5, 0, None),  # one row: launched with stride 0; full programs and a tail
    (1, 2048, 0, None),  # one row, every program full
    (2, 3 * 2048 + 5, 11, None),  # rows padded to a multiple of 16: full programs unmasked
    (2, 3 * 2048, 16, 2 * 64 + 3),  # bitmask narrower than the row: mask bounds end early
])
def test_full_and_tail_programs_match_twin(rows, vocab, pad, words, dtype, gen, device) -> None:
    logits = random_logits(rows, vocab, dtype, gen, pad=pad).to(device)
    bitmask = random_bitmask(rows, vocab, gen)[:, :words].contiguous().to(device)
    for indices in (None, [rows - 1]):
        ours, twin = logits.clone(), logits.clone()
        apply_token_bitmask_inplace_triton(ours, bitmask, check_indices(indices, rows, ours.device))
        apply_token_bitmask_inplace_ref(twin, bitmask, indices)
        assert torch.equal(ours, twin), (indices, rows, vocab, pad)


@pytest.mark.parametrize("indices", [[], torch.zeros(0, dtype=torch.int32)])
def test_empty_indices_change_nothing(indices, gen, device) -> None:
    logits = random_logits(3, 1000, torch.float16, gen).to(device)
    ours = logits.clone()
    apply_token_bitmask_inplace(ours, random_bitmask(3, 1000, gen).to(device), indices)
    assert torch.equal(ours, logits)


def test_twin_matches_plain_loop(gen) -> None:
    logits = random_logits(2, 70, torch.float32, gen)
    bitmask = random_bitmask(2, 70, gen)
    twin = logits.clone()
    apply_token_bitmask_inplace_ref(twin, bitmask, [1])
    assert torch.equal(twin, _expected(logits, bitmask, [1], 96))


def test_strided_rows_leave_the_parent_alone(gen, device) -> None:
    full = torch.randn(4, 100, generator=gen).to(device)
    before = full.clone()
    view = full[:, :64]
    bitmask = torch.zeros(4, 2, dtype=torch.int32, device=device)
    apply_token_bitmask_inplace(view, bitmask)
    assert torch.isinf(full[:, :64]).all()
    assert torch.equal(full[:, 64:], before[:, 64:])


@pytest.mark.parametrize("dtype", DTYPES)
def test_padded_vocab_columns_become_minus_inf(dtype, gen, device) -> None:
    logits = random_logits(2, 32064, dtype, gen).to(device)  # lm_head wider than the grammar
    bitmask = torch.full((2, 1000), -1, dtype=torch.int32, device=device)  # allows all 32000
    apply_token_bitmask_inplace(logits, bitmask)
    assert torch.isfinite(logits[:, :32000]).all()
    assert torch.isneginf(logits[:, 32000:]).all()
    logits = random_logits(2, 100, dtype, gen).to(device)
    apply_token_bitmask_inplace(logits, torch.full((2, 4), -1, dtype=torch.int32, device=device),
                                vocab_size=90)
    assert torch.isfinite(logits[:, :90]).all() and torch.isneginf(logits[:, 90:]).all()


def test_one_dimensional_and_dispatch(gen, device) -> None:
    logits = random_logits(1, 33, torch.float32, gen)[0].to(device)
    bitmask = torch.tensor([0x5, 0x1], dtype=torch.int32, device=device)
    apply_token_bitmask_inplace(logits, bitmask)
    assert torch.isfinite(logits).nonzero().flatten().tolist() == [0, 2, 32]


def test_indices_as_tensor(gen, device) -> None:
    logits = random_logits(4, 100, torch.bfloat16, gen).to(device)
    bitmask = random_bitmask(4, 100, gen).to(device)
    ours, twin = logits.clone(), logits.clone()
    apply_token_bitmask_inplace(ours, bitmask, torch.tensor([3, 1], device=device))
    apply_token_bitmask_inplace_ref(twin, bitmask, [3, 1])
    assert torch.equal(ours, twin)


@pytest.mark.parametrize("vocab", [31, 33, 32001, 151936])
@pytest.mark.parametrize("dtype", DTYPES)
def test_twin_matches_xgrammar(vocab: int, dtype: torch.dtype, gen) -> None:
    xgr = pytest.importorskip("xgrammar")
    logits = random_logits(4, vocab, dtype, gen)
    bitmask = random_bitmask(4, vocab, gen)
    for indices in (None, [0, 3]):
        ours, theirs = logits.clone(), logits.clone()
        apply_token_bitmask_inplace_ref(ours, bitmask, indices)
        xgr.apply_token_bitmask_inplace(theirs, bitmask, indices=indices)
        assert torch.equal(ours, theirs)


@pytest.mark.filterwarnings("ignore:The bitmask covers only")
def test_xgrammar_leaves_padding_we_ban_it(gen) -> None:
    xgr = pytest.importorskip("xgrammar")
    logits = random_logits(2, 128, torch.float32, gen)
    bitmask = random_bitmask(2, 96, gen)
    ours, theirs = logits.clone(), logits.clone()
    apply_token_bitmask_inplace_ref(ours, bitmask)
    xgr.apply_token_bitmask_inplace(theirs, bitmask)
    assert torch.equal(ours[:, :96], theirs[:, :96])
    assert torch.isneginf(ours[:, 96:]).all() and torch.equal(theirs[:, 96:], logits[:, 96:])


@pytest.mark.parametrize(
    ("logits", "bitmask", "indices", "match"),
    [
        (torch.zeros(2, 64, dtype=torch.int32), torch.zeros(2, 2, dtype=torch.int32), None,
         "logits dtype"),
        (torch.zeros(2, 64), torch.zeros(2, 2, dtype=torch.int64), None, "bitmask dtype"),
        (torch.zeros(2, 64), torch.zeros(3, 2, dtype=torch.int32), None, "bitmask rows 3"),
        (torch.zeros(2, 2, 64), torch.zeros(2, 2, dtype=torch.int32), None, r"\(2, 2, 64\)"),
        (torch.zeros(64, 2).t(), torch.zeros(2, 2, dtype=torch.int32), None, "contiguous"),
        (torch.zeros(2, 64), torch.zeros(2, 2, dtype=torch.int32), [0, 5], r"indices \[5\]"),
        (torch.zeros(2, 64), torch.zeros(2, 2, dtype=torch.int32), [0.5], "ints"),
        ("logits", torch.zeros(2, 2, dtype=torch.int32), None, "tensors"),
    ],
)
def test_bad_arguments_raise_value_error(logits, bitmask, indices, match) -> None:
    with pytest.raises(ValueError, match=match):
        apply_token_bitmask_inplace(logits, bitmask, indices)


@pytest.mark.parametrize("dtype", DTYPES)
def test_twin_keeps_allowed_bits_and_writes_exact_minus_inf(dtype: torch.dtype) -> None:
    """The CPU twin works on bit patterns: -0.0, NaN and +-inf survive when allowed, and a
    banned column becomes exactly -inf whatever it held (the Triton kernel's result)."""
    special = torch.tensor([-0.0, float("nan"), float("inf"), float("-inf"), 0.0, -1.5] * 8)
    logits = special.to(dtype).view(1, -1).repeat(2, 1)  # (2, 48): row 0 all allowed, row 1 banned
    bitmask = torch.tensor([[-1, -1], [0, 0]], dtype=torch.int32)
    twin = logits.clone()
    apply_token_bitmask_inplace_ref(twin, bitmask)
    int_dtype = torch.int32 if dtype == torch.float32 else torch.int16
    assert torch.equal(twin[0].view(int_dtype), logits[0].view(int_dtype))
    minus_inf = torch.full((48,), float("-inf"), dtype=dtype)
    assert torch.equal(twin[1].view(int_dtype), minus_inf.view(int_dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("which", ["all", "partial"])
@pytest.mark.parametrize("shape", ["sparse", "mixed"])
def test_sparse_rows_route_matches_the_plain_rule(dtype: torch.dtype, which: str, shape: str,
                                                  gen, monkeypatch) -> None:
    """Wide rows that mostly ban everything are filled and their live words written back; the
    result is bit for bit `where(allowed, logits, -inf)`, with a cover that cuts a word."""
    import thinkgate.kernels.bitmask as bm

    calls = []
    real = bm._mask_sparse
    monkeypatch.setattr(bm, "_mask_sparse", lambda *a: calls.append(a[3]) or real(*a))
    rows, vocab, cover = 4, bm.SPARSE_ROWS_FROM + 100, bm.SPARSE_ROWS_FROM + 77
    logits = random_logits(rows, vocab, dtype, gen, pad=5)  # strided rows
    logits[0, 10] = float("nan")  # allowed below: kept as it is
    allowed = torch.rand(rows, vocab, generator=gen) < 0.001  # sparse: scattered single tokens
    allowed[:, 10] = True
    allowed[:, cover - 3 : cover + 3] = True  # across the cut word and past the cover
    if shape == "mixed":
        allowed[1] = torch.rand(vocab, generator=gen) < 0.7  # a dense row takes the other pass
    bitmask = pack_bitmask_ref(allowed)
    indices = {"all": None, "partial": [3, 1, 0]}[which]
    ours = logits.clone()
    apply_token_bitmask_inplace_ref(ours, bitmask, indices, vocab_size=cover)
    keep = allowed & (torch.arange(vocab) < cover)
    expected = torch.where(keep, logits, torch.tensor(float("-inf"), dtype=dtype))
    picked = list(range(rows)) if indices is None else indices
    expected[[r for r in range(rows) if r not in picked]] = logits[
        [r for r in range(rows) if r not in picked]]
    int_dtype = torch.int32 if dtype == torch.float32 else torch.int16
    assert torch.equal(ours.view(int_dtype), expected.view(int_dtype))
    assert len(calls) == 1  # the sparse route ran (on a subset when a dense row is mixed in)
    assert (calls[0] is None) == (shape == "sparse")  # every (indexed) row sparse: no subset
