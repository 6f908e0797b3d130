"""fused_moe: a mixture-of-experts feed-forward computed grouped by expert.

Semantics, as a plain loop (x (N, H); experts and weights (N, K): each token's K experts and
their routing weights; w1 (E, 2I, H): each expert's gate rows then up rows; w2 (E, H, I))::

    for n in range(N):
        out[n] = 0
        for j in range(K):
            e = experts[n, j]
            gate, up = w1[e, :I] @ x[n], w1[e, I:] @ x[n]
            out[n] += weights[n, j] * (w2[e] @ (silu(gate) * up))

The N*K (token, slot) pairs are grouped by expert (`align_by_expert`: each expert's pairs in
token order, each expert's run padded to BLOCK_M; torch ops on the device, no host sync: the
grid is the bound ceil(P / BLOCK_M) + E blocks, and blocks past the last expert's run return at
once). Launch 1 (`_moe_up_kernel`), one program per (block, tile of I): the block's rows of x
times its expert's gate and up rows, `silu(gate) * up` written at each pair's own index. Launch 2
(`_moe_down_kernel`), one program per (block, tile of H): those rows times the expert's w2,
scaled by the pair's routing weight, written at the pair's index; `out` is the sum over each
token's K pairs in slot order. Every expert's weights are read once per block of its rows,
whatever the batch: one grouped GEMM per active expert, never a loop over tokens.

Dots take fp32 operands (TF32 for bf16/fp16 weights, IEEE for fp32), as the paged attention
kernels do (Triton 3.9's interpreter computes bf16 `tl.dot` wrongly). The twin (`fused_moe_ref`,
the spec and the CPU path) runs the same grouping with torch matmuls; the two accumulate in
different orders, so tests compare with a tolerance.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

# rows of (token, slot) pairs per block (tl.dot needs 16), output columns per tile, reduction
# step, warps (kernels/README.md has the registers these take)
BLOCK_M, BLOCK_N, BLOCK_K, NUM_WARPS = 16, 64, 32, 4


def fused_moe_ref(x: torch.Tensor, weights: torch.Tensor, experts: torch.Tensor,
                  w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    """Torch twin: (N, H). Pairs grouped by expert, one matmul pair per expert with rows, each
    pair's result scaled and written at its own index, then summed over the K slots."""
    n, k = experts.shape
    flat = experts.reshape(-1)
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=w1.shape[0]).tolist()
    grouped = x.index_select(0, order // k)
    mixed = torch.empty_like(grouped)
    start = 0
    for e, count in enumerate(counts):
        if count:
            gate, up = F.linear(grouped[start:start + count], w1[e]).chunk(2, dim=-1)
            mixed[start:start + count] = F.linear(F.silu(gate) * up, w2[e])
            start += count
    pairs = torch.empty_like(mixed)
    pairs[order] = mixed * weights.reshape(-1)[order].to(mixed.dtype).unsqueeze(1)
    return pairs.view(n, k, -1).sum(dim=1)


def align_by_expert(experts: torch.Tensor, num_experts: int, block_m: int = BLOCK_M
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """(sorted_pairs (num_blocks * block_m,) int32: pair indices n*K + j grouped by expert, each
    expert's run padded to a multiple of block_m with P (= N*K, no pair); block_expert
    (num_blocks,) int32: each block's expert, -1 past the last run). num_blocks is the bound
    ceil(P / block_m) + E, so no count leaves the device."""
    flat = experts.reshape(-1).long()
    p = flat.numel()
    counts = torch.bincount(flat, minlength=num_experts)
    padded = (counts + block_m - 1) // block_m * block_m
    ends = torch.cumsum(padded, 0)
    order = torch.argsort(flat, stable=True)
    by_expert = flat[order]
    first = torch.cumsum(counts, 0) - counts  # each expert's first place among sorted pairs
    rank = torch.arange(p, device=flat.device) - first[by_expert]
    num_blocks = triton.cdiv(p, block_m) + num_experts
    sorted_pairs = torch.full((num_blocks * block_m,), p, dtype=torch.int32, device=flat.device)
    sorted_pairs[(ends - padded)[by_expert] + rank] = order.to(torch.int32)
    starts = torch.arange(num_blocks, device=flat.device) * block_m
    block_expert = torch.searchsorted(ends, starts, right=True)
    block_expert = torch.where(block_expert < num_experts, block_expert, -1).to(torch.int32)
    return sorted_pairs, block_expert


@triton.jit
def _moe_up_kernel(x_ptr, w1_ptr, act_ptr, pairs_ptr, block_expert_ptr, num_pairs, hidden,
                   inter, stride_x, stride_we, stride_wn, stride_a,
                   TOP_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   BLOCK_K: tl.constexpr, PRECISION: tl.constexpr):
    block = tl.program_id(0)
    expert = tl.load(block_expert_ptr + block)
    if expert < 0:
        return
    pairs = tl.load(pairs_ptr + block * BLOCK_M + tl.arange(0, BLOCK_M))
    valid = pairs < num_pairs
    tokens = tl.where(valid, pairs // TOP_K, 0)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < inter
    w_base = w1_ptr + expert.to(tl.int64) * stride_we
    gate = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    up = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, hidden, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        k_ok = ks < hidden
        a = tl.load(x_ptr + tokens[:, None].to(tl.int64) * stride_x + ks[None, :],
                    mask=valid[:, None] & k_ok[None, :], other=0.0).to(tl.float32)
        w_mask = k_ok[:, None] & col_ok[None, :]
        wg = tl.load(w_base + cols[None, :] * stride_wn + ks[:, None], mask=w_mask,
                     other=0.0).to(tl.float32)
        wu = tl.load(w_base + (cols[None, :] + inter) * stride_wn + ks[:, None], mask=w_mask,
                     other=0.0).to(tl.float32)
        gate = tl.dot(a, wg, gate, input_precision=PRECISION)
        up = tl.dot(a, wu, up, input_precision=PRECISION)
    act = gate * tl.sigmoid(gate) * up
    tl.store(act_ptr + pairs[:, None].to(tl.int64) * stride_a + cols[None, :],
             act.to(act_ptr.dtype.element_ty), mask=valid[:, None] & col_ok[None, :])


@triton.jit
def _moe_down_kernel(act_ptr, w2_ptr, weights_ptr, out_ptr, pairs_ptr, block_expert_ptr,
                     num_pairs, hidden, inter, stride_a, stride_we, stride_wn, stride_o,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                     PRECISION: tl.constexpr):
    block = tl.program_id(0)
    expert = tl.load(block_expert_ptr + block)
    if expert < 0:
        return
    pairs = tl.load(pairs_ptr + block * BLOCK_M + tl.arange(0, BLOCK_M))
    valid = pairs < num_pairs
    rows = tl.where(valid, pairs, 0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < hidden
    w_base = w2_ptr + expert.to(tl.int64) * stride_we
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, inter, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        k_ok = ks < inter
        a = tl.load(act_ptr + rows[:, None] * stride_a + ks[None, :],
                    mask=valid[:, None] & k_ok[None, :], other=0.0).to(tl.float32)
        w = tl.load(w_base + cols[None, :] * stride_wn + ks[:, None],
                    mask=k_ok[:, None] & col_ok[None, :], other=0.0).to(tl.float32)
        acc = tl.dot(a, w, acc, input_precision=PRECISION)
    scale = tl.load(weights_ptr + rows, mask=valid, other=0.0).to(tl.float32)
    acc = acc * scale[:, None]
    tl.store(out_ptr + rows[:, None] * stride_o + cols[None, :],
             acc.to(out_ptr.dtype.element_ty), mask=valid[:, None] & col_ok[None, :])


def fused_moe_triton(x: torch.Tensor, weights: torch.Tensor, experts: torch.Tensor,
                     w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    """Launch both kernels; arguments already checked (`check_fused_moe`)."""
    n, k = experts.shape
    num_experts, hidden, inter = w1.shape[0], x.shape[1], w2.shape[2]
    p = n * k
    sorted_pairs, block_expert = align_by_expert(experts, num_experts)
    act = torch.empty(p, inter, dtype=x.dtype, device=x.device)
    pairs_out = torch.empty(p, hidden, dtype=x.dtype, device=x.device)
    precision = "ieee" if x.dtype == torch.float32 else "tf32"
    blocks = block_expert.shape[0]
    _moe_up_kernel[(blocks, triton.cdiv(inter, BLOCK_N))](
        x, w1, act, sorted_pairs, block_expert, p, hidden, inter,
        x.stride(0), w1.stride(0), w1.stride(1), act.stride(0),
        TOP_K=k, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, PRECISION=precision,
        num_warps=NUM_WARPS,
    )
    flat_weights = weights.reshape(-1).float().contiguous()
    _moe_down_kernel[(blocks, triton.cdiv(hidden, BLOCK_N))](
        act, w2, flat_weights, pairs_out, sorted_pairs, block_expert, p, hidden, inter,
        act.stride(0), w2.stride(0), w2.stride(1), pairs_out.stride(0),
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, PRECISION=precision,
        num_warps=NUM_WARPS,
    )
    return pairs_out.view(n, k, hidden).sum(dim=1)


def check_fused_moe(x: object, weights: object, experts: object, w1: object,
                    w2: object) -> None:
    """ValueError naming the first argument that does not fit the module doc's shapes."""
    for name, t in (("x", x), ("weights", weights), ("experts", experts), ("w1", w1),
                    ("w2", w2)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"fused_moe: {name} must be a tensor, got {type(t).__name__}")
    assert isinstance(x, torch.Tensor) and isinstance(w1, torch.Tensor)
    assert isinstance(w2, torch.Tensor) and isinstance(experts, torch.Tensor)
    assert isinstance(weights, torch.Tensor)
    if x.dim() != 2 or w1.dim() != 3 or w2.dim() != 3:
        raise ValueError(f"fused_moe: x must be (N, H), w1 (E, 2I, H), w2 (E, H, I); got "
                         f"{tuple(x.shape)}, {tuple(w1.shape)}, {tuple(w2.shape)}")
    e, two_i, h = w1.shape
    if h != x.shape[1] or two_i % 2 or tuple(w2.shape) != (e, h, two_i // 2):
        raise ValueError(f"fused_moe: w1 {tuple(w1.shape)} and w2 {tuple(w2.shape)} do not fit "
                         f"x {tuple(x.shape)}")
    if experts.dim() != 2 or experts.shape[0] != x.shape[0] or weights.shape != experts.shape:
        raise ValueError(f"fused_moe: experts {tuple(experts.shape)} and weights "
                         f"{tuple(weights.shape)} must both be (N, K) with N = {x.shape[0]}")
    if experts.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"fused_moe: experts must be int32 or int64, got {experts.dtype}")
    if experts.numel() and (int(experts.min()) < 0 or int(experts.max()) >= e):
        raise ValueError(f"fused_moe: expert ids must be in [0, {e}), got "
                         f"{int(experts.min())}..{int(experts.max())}")
    if not (x.is_contiguous() and w1.is_contiguous() and w2.is_contiguous()):
        raise ValueError("fused_moe: x, w1 and w2 must be contiguous")


def fused_moe(x: torch.Tensor, weights: torch.Tensor, experts: torch.Tensor, w1: torch.Tensor,
              w2: torch.Tensor, check: bool = True) -> torch.Tensor:
    """(N, H): the module doc's mix. CUDA tensors (and CPU ones under TRITON_INTERPRET=1) run the
    Triton kernels, CPU tensors the twin. `check=False` skips the argument checks (the engine's
    own calls: the range check reads the ids back)."""
    from thinkgate.kernels.backend import use_triton

    if check:
        check_fused_moe(x, weights, experts, w1, w2)
    if x.shape[0] == 0:
        return torch.zeros_like(x)
    run = fused_moe_triton if use_triton(x) else fused_moe_ref
    return run(x, weights, experts, w1, w2)
