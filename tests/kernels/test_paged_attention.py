"""paged_decode_attention: Triton == twin (tolerance) == dense attention; argument errors."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from thinkgate.kernels.paged_attention import (
    default_scale,
    paged_decode_attention,
    paged_decode_attention_ref,
    paged_decode_attention_triton,
)

TOL = {torch.float32: 2e-5, torch.bfloat16: 2e-2, torch.float16: 2e-3}


def _paged(lens: list[int], heads: int, kv_heads: int, dim: int, block_size: int,
           dtype: torch.dtype, gen: torch.Generator, device: str):
    """Random caches with each row's blocks scattered over a shuffled pool, tables padded with
    the last (scratch) block, and the same keys/values laid out densely per row."""
    need = [-(-n // block_size) for n in lens]
    pool = sum(need) + 1
    k_cache = torch.randn(pool, block_size, kv_heads, dim, generator=gen).to(dtype)
    v_cache = torch.randn(pool, block_size, kv_heads, dim, generator=gen).to(dtype)
    order = torch.randperm(pool - 1, generator=gen).tolist()
    width = max(need)
    tables, start = [], 0
    for m in need:
        tables.append(order[start:start + m] + [pool - 1] * (width - m))
        start += m
    q = torch.randn(len(lens), heads, dim, generator=gen).to(dtype)
    bt = torch.tensor(tables, dtype=torch.int32)
    cl = torch.tensor(lens, dtype=torch.int32)
    return [t.to(device) for t in (q, k_cache, v_cache, bt, cl)]


def _dense(q, k_cache, v_cache, bt, cl) -> torch.Tensor:
    """SDPA on each row's gathered keys (the engine's torch path, row by row)."""
    out = []
    kv_heads, d = k_cache.shape[2], k_cache.shape[3]
    for row in range(q.shape[0]):
        n = int(cl[row])
        keys = k_cache[bt[row].long()].reshape(-1, kv_heads, d)[:n].transpose(0, 1).float()
        values = v_cache[bt[row].long()].reshape(-1, kv_heads, d)[:n].transpose(0, 1).float()
        qr = q[row].float().view(kv_heads, -1, d)
        out.append(F.scaled_dot_product_attention(qr, keys, values).reshape(-1, d))
    return torch.stack(out).to(q.dtype)


@pytest.mark.parametrize(("heads", "kv_heads", "dim"), [(4, 4, 32), (8, 2, 64), (6, 2, 48),
                                                       (16, 8, 128)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_triton_matches_twin_on_ragged_rows(heads, kv_heads, dim, dtype, gen, device) -> None:
    # lengths at, just under and just over block boundaries, one token, several blocks
    lens = [1, 15, 16, 17, 33, 47]
    args = _paged(lens, heads, kv_heads, dim, 16, dtype, gen, device)
    scale = default_scale(dim)
    ours = paged_decode_attention_triton(*args, scale)
    twin = paged_decode_attention_ref(*args, scale)
    tol = TOL[dtype]
    torch.testing.assert_close(ours.float(), twin.float(), rtol=tol, atol=tol)
    torch.testing.assert_close(twin.float(), _dense(*args).float(), rtol=tol, atol=tol)


def test_block_sizes_and_entries_past_the_last_block_are_not_read(gen, device) -> None:
    # CUDA needs block_size >= 16 (tl.dot's smallest tile); the interpreter takes any
    for block_size in (16, 32, 64) if device == "cuda" else (1, 8, 32):
        q, k, v, bt, cl = _paged([5, 9, 32, 65], 4, 2, 16, block_size, torch.float32, gen, device)
        want = paged_decode_attention_ref(q, k, v, bt, cl, 0.25)
        junk = bt.clone()
        for row, n in enumerate(cl.tolist()):
            junk[row, -(-n // block_size):] = 10**6  # out of range if it were read
        ours = paged_decode_attention_triton(q, k, v, junk, cl, 0.25)
        torch.testing.assert_close(ours, want, rtol=2e-5, atol=2e-5)


def test_a_row_does_not_depend_on_its_batch(gen, device) -> None:
    q, k, v, bt, cl = _paged([3, 40, 17], 8, 2, 32, 16, torch.float32, gen, device)
    full = paged_decode_attention_triton(q, k, v, bt, cl, 0.2)
    one = paged_decode_attention_triton(q[1:2], k, v, bt[1:2], cl[1:2], 0.2)
    assert torch.equal(full[1:2], one)


def test_public_function_dispatches_and_checks(gen, device) -> None:
    q, k, v, bt, cl = _paged([4, 20], 4, 2, 16, 16, torch.float32, gen, device)
    torch.testing.assert_close(paged_decode_attention(q, k, v, bt, cl),
                               paged_decode_attention_ref(q, k, v, bt, cl, 0.25))
    with pytest.raises(ValueError, match="context_lens"):
        paged_decode_attention(q.cpu(), k.cpu(), v.cpu(), bt.cpu(), torch.tensor([0, 4]))
    with pytest.raises(ValueError, match="kv_heads 2"):
        paged_decode_attention(q[:, :3], k, v, bt, cl)
    with pytest.raises(ValueError, match="block_tables"):
        paged_decode_attention(q, k, v, bt.float(), cl)
    with pytest.raises(ValueError, match="context_lens"):
        paged_decode_attention(q.cpu(), k.cpu(), v.cpu(), bt.cpu(), torch.tensor([4, 33]))
