"""paged_prefill_attention: ragged query rows attend causally to their paged context, in place.

Semantics, as a plain loop (cache layout (num_blocks, block_size, kv_heads, D) as in
paged_attention.py; a row's new tokens are already written to the cache; G = H // kv_heads)::

    for b in range(B):
        n, m = context_lens[b], query_lens[b]     # 1 <= m <= n: cached before = n - m
        for i in range(T):
            for h in range(H):
                if i >= m:
                    out[b, i, h] = 0                   # padding past the row's new tokens
                    continue
                pos = n - m + i                        # the query's position in the sequence
                keys = [cache of position p for p in range(pos + 1)]   # causal, context included
                out[b, i, h] = softmax(q[b, i, h] . keys * scale) @ values

A fresh prefill has n == m; chunked prefill, a prefix-cache hit and a preempted sequence that
is recomputed all have n > m (the new tokens start anywhere). The kernel runs one program per
(row, tile of BLOCK_Q query tokens, K/V head): its BLOCK_Q x G query rows (G padded to a power
of two) share every K/V load, keys stream in tiles of BLOCK_N positions, each looked up in the
block table (so any block size works, and a tile may span blocks), and the online softmax runs
in fp32 with exp2. Tiles past the tile's last query position are skipped. As in the decode
kernel, both dots take fp32 operands: TF32 for bf16/fp16 caches (their values are exact in
TF32; the probabilities round to TF32), IEEE fp32 for fp32 caches. Half-precision MMAs would
run twice as fast on Hopper, but Triton 3.9's interpreter computes bf16 `tl.dot` wrongly
(errors of 1e10 on a 16 x 16 product), so they could not be tested here. Tests compare with a
tolerance.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

_LOG2E = 1.4426950408889634
# query rows (tokens x heads of one K/V head) per program, key positions per tile, warps: on
# sm_90 at head_dim 128, 64 rows took 206 registers with 4 warps and 167 with 8; 32 rows with
# 8 warps take 100 (80 in fp32; past head_dim 128, 16-row tiles: 90), no spills (README.md)
BLOCK_M, BLOCK_N, NUM_WARPS = 32, 32, 8


def paged_prefill_attention_ref(
    q: torch.Tensor,  # (B, T, H, D)
    k_cache: torch.Tensor,  # (num_blocks, block_size, kv_heads, D)
    v_cache: torch.Tensor,
    block_tables: torch.Tensor,  # (B, max_blocks)
    query_lens: torch.Tensor,  # (B,) new tokens per row, 1 <= query_lens <= context_lens
    context_lens: torch.Tensor,  # (B,) tokens cached per row, new ones included
    scale: float,
) -> torch.Tensor:
    """Torch twin (the spec): gather, mask `key <= position`, softmax in fp32; (B, T, H, D)."""
    b, t, h, d = q.shape
    block_size, kv_heads = k_cache.shape[1], k_cache.shape[2]
    out = torch.zeros_like(q)
    for row in range(b):
        n, m = int(context_lens[row]), int(query_lens[row])
        blocks = block_tables[row, : triton.cdiv(n, block_size)].long()
        keys = k_cache[blocks].reshape(-1, kv_heads, d)[:n].float()  # (n, kv_heads, D)
        values = v_cache[blocks].reshape(-1, kv_heads, d)[:n].float()
        qr = q[row, :m].float().view(m, kv_heads, h // kv_heads, d)  # (m, kv_heads, G, D)
        s = torch.einsum("mkgd,nkd->kgmn", qr, keys) * scale
        positions = torch.arange(n - m, n).view(-1, 1)
        s = s.masked_fill(torch.arange(n).view(1, -1) > positions, float("-inf"))
        o = torch.einsum("kgmn,nkd->mkgd", s.softmax(-1), values)
        out[row, :m] = o.reshape(m, h, d).to(q.dtype)
    return out


@triton.jit
def _paged_prefill_kernel(
    q_ptr, k_ptr, v_ptr, block_tables_ptr, query_lens_ptr, context_lens_ptr, out_ptr,
    q_row_stride, q_token_stride, q_head_stride,
    cache_block_stride, cache_pos_stride, cache_head_stride,
    block_tables_row_stride, out_row_stride, out_token_stride, out_head_stride,
    scale_log2, num_tokens,
    GROUP: tl.constexpr, GROUP_P: tl.constexpr, BLOCK_Q: tl.constexpr,
    HEAD_DIM: tl.constexpr, HEAD_DIM_P: tl.constexpr,
    BLOCK_SIZE: tl.constexpr, BLOCK_N: tl.constexpr, PRECISION: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    q_tile = tl.program_id(1)
    kv_head = tl.program_id(2)
    r = tl.arange(0, BLOCK_Q * GROUP_P)  # query rows: token-major, then the group's heads
    token = q_tile * BLOCK_Q + r // GROUP_P
    g = r % GROUP_P
    d = tl.arange(0, HEAD_DIM_P)
    d_ok = d < HEAD_DIM
    m = tl.load(query_lens_ptr + row)
    n = tl.load(context_lens_ptr + row)
    start = n - m  # position of the row's first new token
    q_ok = (token < m) & (g < GROUP)
    heads = kv_head * GROUP + g
    q = tl.load(q_ptr + row * q_row_stride + token[:, None] * q_token_stride
                + heads[:, None] * q_head_stride + d[None, :],
                mask=q_ok[:, None] & d_ok[None, :], other=0.0).to(tl.float32)
    position = start + token  # (BLOCK_M,)
    # keys this tile needs: up to its last real query's position (none for an all-padding tile)
    kv_end = tl.minimum(n, start + (q_tile + 1) * BLOCK_Q)
    kv_end = tl.where(q_tile * BLOCK_Q < m, kv_end, 0)
    run_max = tl.full([BLOCK_Q * GROUP_P], float("-inf"), tl.float32)
    run_sum = tl.zeros([BLOCK_Q * GROUP_P], tl.float32)
    acc = tl.zeros([BLOCK_Q * GROUP_P, HEAD_DIM_P], tl.float32)
    p = tl.arange(0, BLOCK_N)
    for j in range(0, tl.cdiv(kv_end, BLOCK_N)):
        key_pos = j * BLOCK_N + p
        p_ok = key_pos < kv_end
        block = tl.load(block_tables_ptr + row * block_tables_row_stride + key_pos // BLOCK_SIZE,
                        mask=p_ok, other=0).to(tl.int64)
        offs = (block[:, None] * cache_block_stride + (key_pos % BLOCK_SIZE)[:, None]
                * cache_pos_stride + kv_head * cache_head_stride + d[None, :])  # (BLOCK_N, D)
        kv_mask = p_ok[:, None] & d_ok[None, :]
        k = tl.load(k_ptr + offs, mask=kv_mask, other=0.0).to(tl.float32)
        v = tl.load(v_ptr + offs, mask=kv_mask, other=0.0).to(tl.float32)
        s = tl.dot(q, tl.trans(k), input_precision=PRECISION) * scale_log2  # (BLOCK_M, BLOCK_N)
        allowed = p_ok[None, :] & (key_pos[None, :] <= position[:, None])
        s = tl.where(allowed, s, float("-inf"))
        new_max = tl.maximum(run_max, tl.max(s, axis=1))
        safe_max = tl.where(new_max == float("-inf"), 0.0, new_max)  # rows with no key yet
        alpha = tl.exp2(run_max - safe_max)
        e = tl.exp2(s - safe_max[:, None])
        run_sum = run_sum * alpha + tl.sum(e, axis=1)
        acc = acc * alpha[:, None] + tl.dot(e, v, input_precision=PRECISION)
        run_max = new_max
    out = acc / tl.where(run_sum > 0, run_sum, 1.0)[:, None]
    out = tl.where(q_ok[:, None], out, 0.0)
    tl.store(out_ptr + row * out_row_stride + token[:, None] * out_token_stride
             + heads[:, None] * out_head_stride + d[None, :], out.to(out_ptr.dtype.element_ty),
             mask=((g < GROUP) & (token < num_tokens))[:, None] & d_ok[None, :])


def prefill_tiles(heads: int, kv_heads: int, head_dim: int) -> tuple[int, int, int]:
    """(GROUP_P, BLOCK_Q, BLOCK_N): the padded group, query tokens per program, keys per tile.
    Past head_dim 128 the tile has 16 query rows (at head_dim 256, 32 rows spilled 4 bytes on
    sm_100, and 16 keys per tile instead of 32 spilled 12)."""
    group_p = triton.next_power_of_2(heads // kv_heads)
    rows = BLOCK_M if head_dim <= 128 else 16
    return group_p, max(1, rows // group_p), BLOCK_N


def paged_prefill_attention_triton(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
    query_lens: torch.Tensor, context_lens: torch.Tensor, scale: float,
) -> torch.Tensor:
    """Launch the kernel; arguments already checked (`check_paged_prefill`)."""
    b, t, h, d = q.shape
    block_size, kv_heads = k_cache.shape[1], k_cache.shape[2]
    group_p, block_q, block_n = prefill_tiles(h, kv_heads, d)
    out = torch.empty(b, t, h, d, dtype=q.dtype, device=q.device)
    if b == 0:
        return out
    _paged_prefill_kernel[(b, triton.cdiv(t, block_q), kv_heads)](
        q, k_cache, v_cache, block_tables, query_lens, context_lens, out,
        q.stride(0), q.stride(1), q.stride(2),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        block_tables.stride(0), out.stride(0), out.stride(1), out.stride(2),
        scale * _LOG2E, t,
        GROUP=h // kv_heads, GROUP_P=group_p, BLOCK_Q=block_q, HEAD_DIM=d,
        HEAD_DIM_P=max(16, triton.next_power_of_2(d)), BLOCK_SIZE=block_size, BLOCK_N=block_n,
        PRECISION="ieee" if q.dtype == torch.float32 else "tf32", num_warps=NUM_WARPS,
    )
    return out


def check_paged_prefill(
    q: object, k_cache: object, v_cache: object, block_tables: object, query_lens: object,
    context_lens: object,
) -> None:
    """ValueError naming the bad shape, dtype, layout, device or length."""
    from thinkgate.kernels.paged_attention import check_paged_decode

    for name, t in (("q", q), ("query_lens", query_lens)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a tensor, got {type(t).__name__}")
    if q.dim() != 4 or q.shape[1] < 1:
        raise ValueError(f"need q (B, T >= 1, H, D), got {tuple(q.shape)}")
    check_paged_decode(q[:, 0], k_cache, v_cache, block_tables, context_lens)
    if query_lens.shape != context_lens.shape or query_lens.dtype not in (torch.int32,
                                                                           torch.int64):
        raise ValueError(f"query_lens must be int32/int64 of shape {tuple(context_lens.shape)}, "
                         f"got {query_lens.dtype} {tuple(query_lens.shape)}")
    if query_lens.device != q.device:
        raise ValueError(f"query_lens is on {query_lens.device}, q on {q.device}")
    if q.device.type != "cpu" or not q.shape[0]:
        return  # on a GPU the range checks would sync
    most = block_tables.shape[1] * k_cache.shape[1]
    for row, (m, n) in enumerate(zip(query_lens.tolist(), context_lens.tolist())):
        if not (1 <= m <= min(n, q.shape[1]) and n <= most):
            raise ValueError(f"row {row}: query_lens {m} and context_lens {n} need 1 <= "
                             f"query_len <= min(context_len, T={q.shape[1]}) and context_len <= "
                             f"{most} (block table width x block size)")


def paged_prefill_attention(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, block_tables: torch.Tensor,
    query_lens: torch.Tensor, context_lens: torch.Tensor, scale: float | None = None,
) -> torch.Tensor:
    """(B, T, H, D): each row's new queries over its cached keys, causally (see the module doc).

    CUDA tensors (and CPU ones under TRITON_INTERPRET=1) run the Triton kernel, CPU tensors the
    twin."""
    from thinkgate.kernels.backend import use_triton
    from thinkgate.kernels.paged_attention import default_scale

    check_paged_prefill(q, k_cache, v_cache, block_tables, query_lens, context_lens)
    scale = default_scale(q.shape[3]) if scale is None else scale
    run = paged_prefill_attention_triton if use_triton(q) else paged_prefill_attention_ref
    return run(q, k_cache, v_cache, block_tables, query_lens, context_lens, scale)
