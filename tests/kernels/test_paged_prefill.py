"""paged_prefill_attention: Triton == twin (tolerance) == dense causal SDPA; argument errors."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from thinkgate.kernels.paged_attention import default_scale, paged_decode_attention_ref
from thinkgate.kernels.paged_prefill import (
    paged_prefill_attention,
    paged_prefill_attention_ref,
    paged_prefill_attention_triton,
)

TOL = {torch.float32: 2e-5, torch.bfloat16: 3e-2, torch.float16: 3e-3}


def _paged(context: list[int], new: list[int], heads: int, kv_heads: int, dim: int,
           block_size: int, dtype: torch.dtype, gen: torch.Generator, device: str):
    """Caches with each row's blocks scattered over a shuffled pool (the last block is scratch,
    padding the tables), and queries (B, max(new), H, D) right-padded with random values."""
    need = [-(-n // block_size) for n in context]
    pool = sum(need) + 1
    k_cache = torch.randn(pool, block_size, kv_heads, dim, generator=gen).to(dtype)
    v_cache = torch.randn(pool, block_size, kv_heads, dim, generator=gen).to(dtype)
    order = torch.randperm(pool - 1, generator=gen).tolist()
    width, tables, start = max(need), [], 0
    for m in need:
        tables.append(order[start:start + m] + [pool - 1] * (width - m))
        start += m
    q = torch.randn(len(context), max(new), heads, dim, generator=gen).to(dtype)
    bt = torch.tensor(tables, dtype=torch.int32)
    ql = torch.tensor(new, dtype=torch.int32)
    cl = torch.tensor(context, dtype=torch.int32)
    return [t.to(device) for t in (q, k_cache, v_cache, bt, ql, cl)]


def _dense(q, k_cache, v_cache, bt, ql, cl) -> torch.Tensor:
    """Per row: gather the keys, SDPA with the mask key <= position (the engine's gather path)."""
    out = torch.zeros_like(q)
    kv_heads, d = k_cache.shape[2], k_cache.shape[3]
    for row in range(q.shape[0]):
        n, m = int(cl[row]), int(ql[row])
        keys = k_cache[bt[row].long()].reshape(-1, kv_heads, d)[:n].transpose(0, 1).float()
        values = v_cache[bt[row].long()].reshape(-1, kv_heads, d)[:n].transpose(0, 1).float()
        mask = torch.arange(n).view(1, -1) <= torch.arange(n - m, n).view(-1, 1)
        o = F.scaled_dot_product_attention(q[row, :m].float().transpose(0, 1), keys, values,
                                           attn_mask=mask, enable_gqa=True)
        out[row, :m] = o.transpose(0, 1).to(q.dtype)
    return out


# (context, new): fresh prefills, chunks that start mid-block, at a block boundary and past
# several blocks, a one-token chunk (a decode written as prefill), rows ragged in both
CASES = {
    "fresh": ([5, 16, 17, 40], [5, 16, 17, 40]),
    "chunked": ([33, 48, 70, 9], [3, 16, 40, 1]),
}


SHAPES = [(case, shape, dtype) for case in sorted(CASES) for shape in ((4, 4, 32), (6, 2, 48))
          for dtype in (torch.float32, torch.bfloat16)]
SHAPES.append(("chunked", (16, 8, 128), torch.bfloat16))  # Qwen3-0.6B (the interpreter is slow)


@pytest.mark.parametrize(("case", "shape", "dtype"), SHAPES)
def test_triton_matches_twin_and_dense(case, shape, dtype, gen, device) -> None:
    heads, kv_heads, dim = shape
    context, new = CASES[case]
    args = _paged(context, new, heads, kv_heads, dim, 16, dtype, gen, device)
    scale = default_scale(dim)
    ours = paged_prefill_attention_triton(*args, scale)
    twin = paged_prefill_attention_ref(*args, scale)
    tol = TOL[dtype]
    torch.testing.assert_close(ours.float(), twin.float(), rtol=tol, atol=tol)
    torch.testing.assert_close(twin.float(), _dense(*args).float(), rtol=tol, atol=tol)
    for row, m in enumerate(new):  # padding rows are zeros
        assert not ours[row, m:].any()


@pytest.mark.parametrize(("heads", "kv_heads", "dim"), [(32, 2, 64), (4, 2, 160)])
def test_fp16_a_large_group_and_a_wide_head(heads, kv_heads, dim, gen, device) -> None:
    # G = 16 (one program holds 2 tokens x 16 heads); head_dim > 128 (16-row tiles)
    args = _paged([50, 20], [30, 20], heads, kv_heads, dim, 16, torch.float16, gen, device)
    torch.testing.assert_close(paged_prefill_attention_triton(*args, 0.125).float(),
                               paged_prefill_attention_ref(*args, 0.125).float(),
                               rtol=TOL[torch.float16], atol=TOL[torch.float16])


def test_block_sizes_and_entries_past_the_last_block_are_not_read(gen, device) -> None:
    for block_size in (16, 32, 64) if device == "cuda" else (1, 8, 32, 64):
        q, k, v, bt, ql, cl = _paged([5, 9, 32, 65], [5, 2, 20, 33], 4, 2, 16, block_size,
                                     torch.float32, gen, device)
        want = paged_prefill_attention_ref(q, k, v, bt, ql, cl, 0.25)
        junk = bt.clone()
        for row, n in enumerate(cl.tolist()):
            junk[row, -(-n // block_size):] = 10**6  # out of range if it were read
        ours = paged_prefill_attention_triton(q, k, v, junk, ql, cl, 0.25)
        torch.testing.assert_close(ours, want, rtol=2e-5, atol=2e-5)


def test_chunks_compose_into_the_whole_prefill(gen, device) -> None:
    """A sequence prefilled whole, in chunks, or preempted and recomputed into other blocks
    gives the same outputs for the same tokens; its last chunk's last row is the decode step."""
    q, k, v, bt, ql, cl = _paged([45], [45], 8, 2, 32, 16, torch.float32, gen, device)
    whole = paged_prefill_attention_triton(q, k, v, bt, ql, cl, 0.2)
    pieces, done = [], 0
    for size in (7, 16, 1, 21):  # chunk boundaries inside and on blocks
        done += size
        lens = (torch.tensor([size], dtype=torch.int32, device=device),
                torch.tensor([done], dtype=torch.int32, device=device))
        pieces.append(paged_prefill_attention_triton(q[:, done - size:done], k, v, bt, *lens, 0.2))
    torch.testing.assert_close(torch.cat(pieces, dim=1), whole, rtol=2e-5, atol=2e-5)
    # preempted: its blocks freed and the sequence recomputed into a shuffled set of others
    moved = torch.randperm(k.shape[0] - 1, generator=gen)[:3].to(device)
    k2, v2 = torch.zeros_like(k), torch.zeros_like(v)
    k2[moved], v2[moved] = k[bt[0, :3].long()], v[bt[0, :3].long()]
    again = paged_prefill_attention_triton(q, k2, v2, moved.view(1, -1).int(), ql, cl, 0.2)
    torch.testing.assert_close(again, whole, rtol=2e-5, atol=2e-5)
    decode = paged_decode_attention_ref(q[:, -1], k, v, bt, cl, 0.2)
    torch.testing.assert_close(whole[:, -1], decode, rtol=2e-5, atol=2e-5)


def test_a_row_does_not_depend_on_its_batch(gen, device) -> None:
    q, k, v, bt, ql, cl = _paged([3, 40, 17], [3, 25, 2], 8, 2, 32, 16, torch.float32, gen,
                                 device)
    full = paged_prefill_attention_triton(q, k, v, bt, ql, cl, 0.2)
    one = paged_prefill_attention_triton(q[1:2], k, v, bt[1:2], ql[1:2], cl[1:2], 0.2)
    assert torch.equal(full[1:2], one)


def test_public_function_dispatches_and_checks(gen, device) -> None:
    q, k, v, bt, ql, cl = _paged([4, 20], [4, 3], 4, 2, 16, 16, torch.float32, gen, device)
    torch.testing.assert_close(paged_prefill_attention(q, k, v, bt, ql, cl),
                               paged_prefill_attention_ref(q, k, v, bt, ql, cl, 0.25))
    cpu = [t.cpu() for t in (q, k, v, bt)]
    with pytest.raises(ValueError, match="row 1: query_lens 5"):  # more new tokens than T
        paged_prefill_attention(*cpu, torch.tensor([4, 5]), torch.tensor([4, 20]))
    with pytest.raises(ValueError, match="row 0: query_lens 4 and context_lens 3"):
        paged_prefill_attention(*cpu, torch.tensor([4, 3]), torch.tensor([3, 20]))
    with pytest.raises(ValueError, match="context_lens 33"):  # past the block table
        paged_prefill_attention(*cpu, torch.tensor([4, 3]), torch.tensor([4, 33]))
    with pytest.raises(ValueError, match="query_lens must be int32/int64"):
        paged_prefill_attention(q, k, v, bt, ql.float(), cl)
    with pytest.raises(ValueError, match=r"need q \(B, T >= 1, H, D\)"):
        paged_prefill_attention(q[:, :, 0], k, v, bt, ql, cl)
    with pytest.raises(ValueError, match="kv_heads 2"):
        paged_prefill_attention(q[:, :, :3], k, v, bt, ql, cl)
