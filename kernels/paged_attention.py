"""paged_decode_attention: one query token per row, K/V read in place through the block table.

Semantics, as a plain loop (cache layout (num_blocks, block_size, kv_heads, D), the engine's
`KVCache`; G = H // kv_heads query heads share a K/V head)::

    for b in range(B):
        n = context_lens[b]                       # >= 1: the new token is already cached
        for h in range(H):
            g = h // G
            keys = [k_cache[block_tables[b, p // block_size], p % block_size, g] for p in range(n)]
            values = (the same positions of v_cache)
            s = [dot(q[b, h], key) * scale for key in keys]
            out[b, h] = sum(softmax(s)[p] * values[p] for p in range(n))

Block-table entries past a row's last block are never read. The kernel runs one program per
(row, K/V head): it streams the row's blocks once, with the G query heads of that K/V head
(padded to 16 rows for `tl.dot`) sharing every load, and keeps an online softmax in fp32 (exp2
with scale * log2(e)). Both dots run on fp32 operands: TF32 for bf16/fp16 caches (their values
are exact in TF32, so q.k is as exact as a half-precision MMA; the probabilities round to TF32),
IEEE fp32 for fp32 caches. It rounds differently from the twin (which gathers and
calls softmax), so tests compare with a tolerance. block_size and head_dim must be >= 16 on
CUDA (tl.dot's smallest tile); the interpreter takes any.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

_LOG2E = 1.4426950408889634


def paged_decode_attention_ref(
    q: torch.Tensor,  # (B, H, D)
    k_cache: torch.Tensor,  # (num_blocks, block_size, kv_heads, D)
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,  # (B, max_blocks) int32/int64
    context_lens: torch.Tensor,  # (B,) int, >= 1
    scale: float,
) -> torch.Tensor:
    """Torch twin (the spec): gather each row's keys, softmax in fp32; (B, H, D) in q's dtype."""
    b, h, d = q.shape
    block_size, kv_heads = k_cache.shape[1], k_cache.shape[2]
    out = torch.empty_like(q)
    for row in range(b):
        n = int(context_lens[row])
        blocks = block_tables[row, : triton.cdiv(n, block_size)].long()
        keys = k_cache[blocks].reshape(-1, kv_heads, d)[:n].float()  # (n, kv_heads, D)
        values = v_cache[blocks].reshape(-1, kv_heads, d)[:n].float()
        qr = q[row].float().view(kv_heads, h // kv_heads, d)  # (kv_heads, G, D)
        s = torch.einsum("kgd,nkd->kgn", qr, keys) * scale
        out[row] = torch.einsum("kgn,nkd->kgd", s.softmax(-1), values).reshape(h, d).to(q.dtype)
    return out


@triton.jit
def _paged_decode_kernel(
    q_ptr, k_ptr, v_ptr, block_tables_ptr, context_lens_ptr, out_ptr,
    q_row_stride, q_head_stride,
    cache_block_stride, cache_pos_stride, cache_head_stride,
    block_tables_row_stride, out_row_stride, out_head_stride,
    scale_log2,
    GROUP: tl.constexpr, GROUP_P: tl.constexpr, HEAD_DIM: tl.constexpr, HEAD_DIM_P: tl.constexpr,
    BLOCK_SIZE: tl.constexpr, PRECISION: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    kv_head = tl.program_id(1)
    g = tl.arange(0, GROUP_P)  # query heads of this K/V head
    d = tl.arange(0, HEAD_DIM_P)
    p = tl.arange(0, BLOCK_SIZE)
    g_ok = g < GROUP
    d_ok = d < HEAD_DIM
    heads = kv_head * GROUP + g
    q = tl.load(q_ptr + row * q_row_stride + heads[:, None] * q_head_stride + d[None, :],
                mask=g_ok[:, None] & d_ok[None, :], other=0.0).to(tl.float32)  # (GROUP_P >= 16, D)
    n = tl.load(context_lens_ptr + row)
    run_max = tl.full([GROUP_P], float("-inf"), tl.float32)
    run_sum = tl.zeros([GROUP_P], tl.float32)
    acc = tl.zeros([GROUP_P, HEAD_DIM_P], tl.float32)
    for i in range(0, tl.cdiv(n, BLOCK_SIZE)):
        block = tl.load(block_tables_ptr + row * block_tables_row_stride + i).to(tl.int64)
        p_ok = i * BLOCK_SIZE + p < n
        offs = (block * cache_block_stride + p[:, None] * cache_pos_stride
                + kv_head * cache_head_stride + d[None, :])  # (BLOCK_SIZE, D)
        kv_mask = p_ok[:, None] & d_ok[None, :]
        k = tl.load(k_ptr + offs, mask=kv_mask, other=0.0).to(tl.float32)
        v = tl.load(v_ptr + offs, mask=kv_mask, other=0.0).to(tl.float32)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale_log2  # (G, BLOCK_SIZE)
        s = tl.where(p_ok[None, :], s, float("-inf"))
        new_max = tl.maximum(run_max, tl.max(s, axis=1))
        alpha = tl.exp2(run_max - new_max)
        e = tl.exp2(s - new_max[:, None])
        run_sum = run_sum * alpha + tl.sum(e, axis=1)
        acc = acc * alpha[:, None] + tl.dot(e, v, input_precision=PRECISION)
        run_max = new_max
    out = acc / run_sum[:, None]
    tl.store(out_ptr + row * out_row_stride + heads[:, None] * out_head_stride + d[None, :],
             out.to(out_ptr.dtype.element_ty), mask=g_ok[:, None] & d_ok[None, :])


def paged_decode_attention_triton(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
    context_lens: torch.Tensor, scale: float,
) -> torch.Tensor:
    """Launch the kernel; arguments already checked (`check_paged_decode`)."""
    b, h, d = q.shape
    block_size, kv_heads = k_cache.shape[1], k_cache.shape[2]
    group = h // kv_heads
    out = torch.empty_like(q)
    if b == 0:
        return out
    _paged_decode_kernel[(b, kv_heads)](
        q, k_cache, v_cache, block_tables, context_lens, out,
        q.stride(0), q.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        block_tables.stride(0), out.stride(0), out.stride(1),
        scale * _LOG2E,
        GROUP=group, GROUP_P=max(16, triton.next_power_of_2(group)), HEAD_DIM=d,
        HEAD_DIM_P=max(16, triton.next_power_of_2(d)), BLOCK_SIZE=block_size,
        PRECISION="ieee" if q.dtype == torch.float32 else "tf32", num_warps=4,
    )
    return out


def check_paged_decode(
    q: object, k_cache: object, v_cache: object, block_tables: object, context_lens: object,
) -> None:
    """ValueError naming the bad shape, dtype, layout or device."""
    tensors = {"q": q, "k_cache": k_cache, "v_cache": v_cache, "block_tables": block_tables,
               "context_lens": context_lens}
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a tensor, got {type(t).__name__}")
    if q.dim() != 3 or k_cache.dim() != 4 or k_cache.shape != v_cache.shape:
        raise ValueError(f"need q (B, H, D) and equal caches (blocks, block_size, kv_heads, D), "
                         f"got q {tuple(q.shape)}, k {tuple(k_cache.shape)}, "
                         f"v {tuple(v_cache.shape)}")
    b, h, d = q.shape
    if k_cache.shape[3] != d or h % k_cache.shape[2]:
        raise ValueError(f"q heads {h} x dim {d} do not fit kv_heads {k_cache.shape[2]} x dim "
                         f"{k_cache.shape[3]}")
    if block_tables.dim() != 2 or block_tables.shape[0] != b or context_lens.shape != (b,):
        raise ValueError(f"need block_tables ({b}, max_blocks) and context_lens ({b},), got "
                         f"{tuple(block_tables.shape)} and {tuple(context_lens.shape)}")
    if block_tables.dtype not in (torch.int32, torch.int64) or context_lens.dtype not in (
            torch.int32, torch.int64):
        raise ValueError(f"block_tables and context_lens must be int32/int64, got "
                         f"{block_tables.dtype} and {context_lens.dtype}")
    if q.stride(2) != 1 or k_cache.stride(3) != 1 or v_cache.stride() != k_cache.stride():
        raise ValueError("q and the caches need contiguous head dims and equal cache strides")
    if len({t.device for t in tensors.values()}) != 1:
        raise ValueError(f"all tensors must share one device, got "
                         f"{ {n: str(t.device) for n, t in tensors.items()} }")


def default_scale(head_dim: int) -> float:
    return 1.0 / math.sqrt(head_dim)


def paged_decode_attention(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
    context_lens: torch.Tensor, scale: float | None = None,
) -> torch.Tensor:
    """(B, H, D) attention of each row's one query over its cached keys (see the module doc).

    CUDA tensors (and CPU ones under TRITON_INTERPRET=1) run the Triton kernel, CPU tensors the
    twin. Context lengths are range-checked on CPU only (on a GPU that would sync)."""
    from thinkgate.kernels.backend import use_triton

    check_paged_decode(q, k_cache, v_cache, block_tables, context_lens)
    if context_lens.device.type == "cpu" and q.shape[0]:
        most = block_tables.shape[1] * k_cache.shape[1]
        bad = [n for n in context_lens.tolist() if not 1 <= n <= most]
        if bad:
            raise ValueError(f"context_lens {bad} outside [1, {most}] (block table width x "
                             f"block size)")
    if q.device.type == "cuda" and (k_cache.shape[1] < 16 or q.shape[2] < 16):
        raise ValueError(f"on CUDA block_size and head_dim must be >= 16, got "
                         f"{k_cache.shape[1]} and {q.shape[2]}")
    scale = default_scale(q.shape[2]) if scale is None else scale
    run = paged_decode_attention_triton if use_triton(q) else paged_decode_attention_ref
    return run(q, k_cache, v_cache, block_tables, context_lens, scale)
