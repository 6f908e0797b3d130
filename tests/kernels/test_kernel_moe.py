"""fused_moe: Triton == twin (tolerance) == the module doc's per-token loop; the grouping;
argument errors."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from thinkgate.kernels.moe import (
    BLOCK_M,
    align_by_expert,
    fused_moe,
    fused_moe_ref,
    fused_moe_triton,
)

TOL = {torch.float32: 1e-4, torch.bfloat16: 5e-2, torch.float16: 1e-2}


def _inputs(n: int, k: int, e: int, h: int, i: int, dtype: torch.dtype, gen: torch.Generator,
            device: str, only: list[int] | None = None):
    x = torch.randn(n, h, generator=gen).to(dtype)
    w1 = (torch.randn(e, 2 * i, h, generator=gen) / h ** 0.5).to(dtype)
    w2 = (torch.randn(e, h, i, generator=gen) / i ** 0.5).to(dtype)
    choices = only if only is not None else list(range(e))
    experts = torch.stack([torch.tensor(choices)[torch.randperm(len(choices), generator=gen)[:k]]
                           for _ in range(n)]) if n else torch.zeros(0, k, dtype=torch.long)
    weights = torch.softmax(torch.randn(n, k, generator=gen), -1)
    return [t.to(device) for t in (x, weights, experts, w1, w2)]


def _loop(x, weights, experts, w1, w2) -> torch.Tensor:
    """The module doc's loop in float64."""
    inter = w2.shape[2]
    out = torch.zeros(x.shape, dtype=torch.float64)
    for n in range(x.shape[0]):
        for j in range(experts.shape[1]):
            e = int(experts[n, j])
            h = w1[e].double() @ x[n].double()
            out[n] += float(weights[n, j]) * (w2[e].double() @ (F.silu(h[:inter]) * h[inter:]))
    return out


@pytest.mark.parametrize("n,k,e,h,i", [(1, 2, 8, 64, 48), (5, 2, 8, 64, 48), (37, 3, 6, 96, 80),
                                       (16, 1, 4, 32, 64)])
def test_triton_matches_the_twin_and_the_loop(n, k, e, h, i, gen, device) -> None:
    args = _inputs(n, k, e, h, i, torch.float32, gen, device)
    got = fused_moe_triton(*args)
    twin = fused_moe_ref(*[a.cpu() for a in args])
    want = _loop(*[a.cpu() for a in args])
    assert torch.allclose(got.cpu().double(), want, atol=TOL[torch.float32])
    assert torch.allclose(twin.double(), want, atol=TOL[torch.float32])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_weights(dtype, gen, device) -> None:
    args = _inputs(9, 2, 8, 64, 48, dtype, gen, device)
    got = fused_moe(*args)
    assert got.dtype == dtype
    assert torch.allclose(got.cpu().double(), _loop(*[a.cpu() for a in args]), atol=TOL[dtype])


def test_experts_with_no_rows_and_an_empty_batch(gen, device) -> None:
    """Only experts 2 and 5 of 8 get tokens; the other blocks of the grid return at once."""
    args = _inputs(20, 2, 8, 32, 32, torch.float32, gen, device, only=[2, 5])
    assert torch.allclose(fused_moe(*args).cpu().double(), _loop(*[a.cpu() for a in args]),
                          atol=1e-4)
    empty = _inputs(0, 2, 8, 32, 32, torch.float32, gen, device)
    assert fused_moe(*empty).shape == (0, 32)


def test_align_by_expert_groups_pairs_in_token_order_padded_per_expert() -> None:
    experts = torch.tensor([[3, 0], [0, 3], [3, 1]])  # pairs 0..5: experts 3,0,0,3,3,1
    pairs, block_expert = align_by_expert(experts, 4, block_m=4)
    p = experts.numel()
    blocks = pairs.view(-1, 4).tolist()
    assert block_expert.tolist() == [0, 1, 3, -1, -1, -1]  # ceil(6 / 4) + 4 blocks
    assert blocks[:3] == [[1, 2, p, p], [5, p, p, p], [0, 3, 4, p]]
    assert all(v == p for row in blocks[3:] for v in row)
    assert BLOCK_M >= 16  # tl.dot's smallest tile


def test_bad_arguments_are_named() -> None:
    x, w1, w2 = torch.zeros(2, 8), torch.zeros(4, 6, 8), torch.zeros(4, 8, 3)
    experts, weights = torch.zeros(2, 2, dtype=torch.long), torch.zeros(2, 2)
    with pytest.raises(ValueError, match="w1"):
        fused_moe(x, weights, experts, torch.zeros(4, 6, 7), w2)
    with pytest.raises(ValueError, match="expert ids must be in \\[0, 4\\), got 0..4"):
        fused_moe(x, weights, torch.tensor([[0, 4], [1, 2]]), w1, w2)
    with pytest.raises(ValueError, match="experts \\(2, 3\\)"):
        fused_moe(x, weights, torch.zeros(2, 3, dtype=torch.long), w1, w2)
    with pytest.raises(ValueError, match="int32 or int64"):
        fused_moe(x, weights, experts.float(), w1, w2)
