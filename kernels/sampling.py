"""Fused masked sampling: gate, grammar bitmask, forced tokens, temperature, greedy/Gumbel-max.

Semantics per batch row (reads each logit at most once, writes only the id and its logprob)::

    slot = slots[row] if slots is not None else row
    if reasoning and thinking[slot] and start_id[slot] < 0 and 0 <= budget[slot] <= num_reasoning_tokens[slot] - progress[slot]:
        return end_ids[slot, progress[slot]], logprob 0.0             # forced marker token
    use_grammar = bitmask is not None and grammar_rows[row]
                  and (not thinking[slot] or grammar_in_reasoning[slot])
    allowed[c] = (not use_grammar or (bit c of bitmask[row] and c < cover))
                 and logits[row, c] >= floor[row] and logits[row, c] is not NaN
    key[c] = logits[row, c]                                   if temperature[row] <= 0 (greedy)
           = logits[row, c] * (log2(e) / T) + gumbel2(seed, step, c)  otherwise
    id = first c maximising key[c] over allowed c; -1 if every allowed key is -inf

``floor`` (-inf unless top-k/top-p/min-p ask) comes from `filters.logit_floor`. The logprob is
``log softmax`` over the allowed columns of ``logits / T`` (T = 1 for greedy rows). Mask words
that ban all 32 columns are skipped without reading their logits. Small batches split each row
over several programs; the last one to finish (an atomic counter per row, reset by that program)
reduces the partial results in a fixed order, so results do not depend on timing.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from thinkgate.kernels.bitmask import apply_token_bitmask_inplace_ref, unpack_bitmask_ref
from thinkgate.kernels.noise import LOG2E, _gumbel2, _philox, gumbel_noise_ref
from thinkgate.kernels.reasoning import ReasoningState, reasoning_gate_ref

_LN2 = 0.6931471805599453


def temperature_scale(temperature: torch.Tensor) -> torch.Tensor:
    """(B,) fp32 log2(e)/T for sampling rows, 0 for greedy rows (T <= 0); shared by both paths."""
    t = temperature.to(torch.float32)
    return torch.where(t > 0, LOG2E / torch.where(t > 0, t, 1.0), 0.0)


def sample_ref(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    seeds: torch.Tensor,
    steps: torch.Tensor,
    bitmask: torch.Tensor | None = None,
    grammar_rows: torch.Tensor | None = None,
    reasoning: ReasoningState | None = None,
    slots: torch.Tensor | None = None,
    floor: torch.Tensor | None = None,
    cover: int | None = None,
    logprobs: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Torch twin of the fused kernel (the spec and the CPU path); arguments already checked."""
    num_rows, num_cols = logits.shape
    gate = reasoning_gate_ref(reasoning, slots) if reasoning is not None else None
    scale = temperature_scale(temperature)
    ids = None
    if floor is None and not logprobs and not bool((scale > 0).any()):
        ids = _greedy_masked(logits, bitmask, grammar_rows, gate, cover)
    if ids is not None:
        return (ids if gate is None else torch.where(gate[1], gate[2], ids)), None
    x = logits.float()
    allowed = allowed_mask_ref(num_rows, num_cols, bitmask, grammar_rows, reasoning, slots, cover,
                               gate=gate)
    allowed &= ~torch.isnan(x)
    if floor is not None:
        allowed &= x >= floor[:, None]
    key = x.clone()
    rows = (scale > 0).nonzero()[:, 0]  # greedy rows need no noise
    if rows.numel():
        noise = gumbel_noise_ref(seeds[rows], steps[rows], num_cols)
        key[rows] = x[rows] * scale[rows, None] + noise
    key = torch.where(allowed, key, float("-inf"))
    best = key.argmax(dim=1)
    ids = torch.where(key.gather(1, best[:, None])[:, 0] > float("-inf"), best, -1)
    lp = None
    if logprobs:
        y = torch.where(allowed, x * torch.where(scale > 0, scale, LOG2E)[:, None], float("-inf"))
        lse = torch.logsumexp(y * _LN2, dim=1)
        chosen = y.gather(1, ids.clamp(min=0)[:, None])[:, 0] * _LN2
        lp = torch.where(ids >= 0, chosen - lse, float("-inf"))
    if gate is not None:
        _, forced, forced_id = gate
        ids = torch.where(forced, forced_id, ids)
        if lp is not None:
            lp = torch.where(forced, 0.0, lp)
    return ids, lp


def allowed_mask_ref(
    num_rows: int,
    num_cols: int,
    bitmask: torch.Tensor | None,
    grammar_rows: torch.Tensor | None,
    reasoning: ReasoningState | None,
    slots: torch.Tensor | None,
    cover: int | None = None,
    gate: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """(B, V) bool: the columns the gated grammar allows (all of them where it does not apply).
    `gate` is `reasoning_gate_ref(reasoning, slots)` when the caller already has it."""
    if bitmask is None:
        device = reasoning.device if reasoning is not None else None
        return torch.ones(num_rows, num_cols, dtype=torch.bool, device=device)
    device = bitmask.device
    limit = 32 * bitmask.shape[1] if cover is None else min(cover, 32 * bitmask.shape[1])
    use = torch.ones(num_rows, dtype=torch.bool, device=device)
    if grammar_rows is not None:
        use &= grammar_rows.bool()
    if reasoning is not None:
        use &= (gate if gate is not None else reasoning_gate_ref(reasoning, slots))[0]
    return unpack_bitmask_ref(bitmask, num_cols, limit) | ~use[:, None]


def _greedy_masked(
    logits: torch.Tensor,
    bitmask: torch.Tensor | None,
    grammar_rows: torch.Tensor | None,
    gate: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None,
    cover: int | None,
) -> torch.Tensor | None:
    """All rows greedy, no filters, no logprobs: mask a copy with the bitwise CPU twin of
    `apply_token_bitmask_inplace` (same allowed set as `allowed_mask_ref`) and take the first
    maximum. None when a row's maximum is NaN (the kernel bans NaN) or -inf (nothing allowed):
    the full path answers those rows."""
    x = logits.float().clone()
    if bitmask is not None:
        use = torch.ones(x.shape[0], dtype=torch.bool, device=x.device)
        if grammar_rows is not None:
            use &= grammar_rows.bool()
        if gate is not None:
            use &= gate[0]
        limit = 32 * bitmask.shape[1] if cover is None else min(cover, 32 * bitmask.shape[1])
        apply_token_bitmask_inplace_ref(x, bitmask, use.nonzero()[:, 0], vocab_size=limit)
    if x.shape[1] == 0:
        return None
    ids = x.argmax(dim=1)
    best = x.gather(1, ids[:, None])[:, 0]
    if bool((torch.isnan(best) | (best == float("-inf"))).any()):
        return None
    return ids


@triton.jit
def _sample_kernel(
    logits_ptr, logits_row_stride, num_cols,
    bitmask_ptr, bitmask_row_stride, num_words, cover, grammar_rows_ptr,
    slots_ptr, thinking_ptr, progress_ptr, count_ptr, budget_ptr, in_reasoning_ptr,
    end_ids_ptr, end_len_ptr, start_ptr,
    scale_ptr, seed_ptr, step_ptr, floor_ptr,
    out_ids_ptr, out_logprobs_ptr, ws_f_ptr, ws_i_ptr, counter_ptr,
    chunk,
    HAS_MASK: tl.constexpr, HAS_GRAMMAR_ROWS: tl.constexpr, HAS_REASONING: tl.constexpr,
    HAS_SLOTS: tl.constexpr, HAS_FLOOR: tl.constexpr, LOGPROBS: tl.constexpr,
    MAX_END_LEN: tl.constexpr, SPLITS: tl.constexpr, TILE: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    split = tl.program_id(1)
    scale = tl.load(scale_ptr + row)
    use_mask = tl.full([], HAS_MASK, tl.int1)
    if HAS_GRAMMAR_ROWS:
        use_mask = use_mask & (tl.load(grammar_rows_ptr + row) != 0)
    forced = tl.full([], False, tl.int1)
    forced_id = tl.full([], -1, tl.int64)
    if HAS_REASONING:
        slot = tl.load(slots_ptr + row).to(tl.int64) if HAS_SLOTS else row
        thinking = (tl.load(thinking_ptr + slot) != 0) & (tl.load(end_len_ptr + slot) > 0)
        budget = tl.load(budget_ptr + slot)
        progress = tl.load(progress_ptr + slot)
        spent = tl.load(count_ptr + slot) - progress
        forced = thinking & (tl.load(start_ptr + slot) < 0) & (budget >= 0) & (spent >= budget)
        forced_id = tl.load(end_ids_ptr + slot * MAX_END_LEN + progress, mask=forced,
                            other=-1).to(tl.int64)
        use_mask = use_mask & ((~thinking) | (tl.load(in_reasoning_ptr + slot) != 0))
    floor = tl.load(floor_ptr + row) if HAS_FLOOR else float("-inf")
    seed = tl.load(seed_ptr + row)
    step = tl.load(step_ptr + row)
    seed_lo = seed.to(tl.uint32)
    seed_hi = (seed >> 32).to(tl.uint32)
    step_lo = step.to(tl.uint32)
    step_hi = (step >> 32).to(tl.uint32)
    lp_scale = tl.where(scale > 0, scale, 1.4426950408889634)

    r = tl.arange(0, TILE // 4)  # groups of 4 columns share one Philox call and one mask word
    j = tl.arange(0, 4)
    best_key = tl.full([], float("-inf"), tl.float32)
    best_idx = tl.full([], -1, tl.int32)
    best_y = tl.full([], float("-inf"), tl.float32)
    run_max = tl.full([], float("-inf"), tl.float32)
    run_sum = tl.full([], 0.0, tl.float32)
    start = split * chunk
    end = tl.minimum(start + chunk, num_cols)
    end = tl.where(forced, start, end)
    for t in range(start, end, TILE):
        col = t + r[:, None] * 4 + j[None, :]  # (TILE // 4, 4)
        in_row = col < num_cols
        w = t // 32 + r // 8
        words = tl.load(bitmask_ptr + row * bitmask_row_stride + w,
                        mask=use_mask & (w < num_words), other=0)
        bits = ((words[:, None] >> (((r % 8) * 4)[:, None] + j[None, :])) & 1) != 0
        allowed = in_row & ((~use_mask) | (bits & (col < cover)))
        some = (~use_mask) | (words != 0)[:, None]
        if t + TILE <= num_cols:  # no bounds mask: 128-bit loads when rows are 16-aligned
            x = tl.load(logits_ptr + row * logits_row_stride + col, mask=some,
                        other=float("-inf")).to(tl.float32)
        else:
            x = tl.load(logits_ptr + row * logits_row_stride + col, mask=in_row & some,
                        other=float("-inf")).to(tl.float32)
        allowed = allowed & (x == x) & (x >= floor)
        if scale > 0:
            c0 = (t // 4 + r).to(tl.uint32)
            r0, r1, r2, r3 = _philox(seed_lo, seed_hi, c0, step_lo, step_hi, c0 * 0)
            bits4 = tl.where(j[None, :] == 0, r0[:, None],
                             tl.where(j[None, :] == 1, r1[:, None],
                                      tl.where(j[None, :] == 2, r2[:, None], r3[:, None])))
            key = x * scale + _gumbel2(bits4)
        else:
            key = x
        key = tl.where(allowed, key, float("-inf"))
        tile_max = tl.max(tl.max(key, axis=1), axis=0)
        if tile_max > best_key:
            best_key = tile_max
            best_idx = tl.min(tl.min(tl.where(key == tile_max, col, 2147483647), axis=1), axis=0)
            if LOGPROBS:
                best_y = tl.sum(tl.sum(tl.where(col == best_idx, x * lp_scale, 0.0), axis=1),
                                axis=0)
        if LOGPROBS:
            y = tl.where(allowed, x * lp_scale, float("-inf"))
            new_max = tl.maximum(run_max, tl.max(tl.max(y, axis=1), axis=0))
            if new_max > float("-inf"):
                p = tl.where(allowed, tl.exp2(y - new_max), 0.0)
                run_sum = run_sum * tl.exp2(run_max - new_max) + tl.sum(tl.sum(p, axis=1), axis=0)
                run_max = new_max

    if SPLITS == 1:
        out_id = tl.where(forced, forced_id, best_idx.to(tl.int64))
        tl.store(out_ids_ptr + row, out_id)
        if LOGPROBS:
            lp = tl.where(best_idx >= 0, (best_y - run_max - tl.log2(run_sum)) * 0.6931471805599453,
                          float("-inf"))
            tl.store(out_logprobs_ptr + row, tl.where(forced, 0.0, lp))
    else:
        part = row * SPLITS + split
        tl.store(ws_f_ptr + part * 4 + 0, best_key)
        tl.store(ws_f_ptr + part * 4 + 1, best_y)
        tl.store(ws_f_ptr + part * 4 + 2, run_max)
        tl.store(ws_f_ptr + part * 4 + 3, run_sum)
        tl.store(ws_i_ptr + part, best_idx)
        tl.debug_barrier()
        arrived = tl.atomic_add(counter_ptr + row, 1, sem="acq_rel")
        if arrived == SPLITS - 1:
            s = row * SPLITS + tl.arange(0, SPLITS)
            keys = tl.load(ws_f_ptr + s * 4 + 0, volatile=True)
            idxs = tl.load(ws_i_ptr + s, volatile=True)
            top = tl.max(keys, axis=0)
            best = tl.min(tl.where((keys == top) & (idxs >= 0), idxs, 2147483647), axis=0)
            best = tl.where(top > float("-inf"), best, -1)
            tl.store(out_ids_ptr + row, tl.where(forced, forced_id, best.to(tl.int64)))
            if LOGPROBS:
                ys = tl.load(ws_f_ptr + s * 4 + 1, volatile=True)
                maxes = tl.load(ws_f_ptr + s * 4 + 2, volatile=True)
                sums = tl.load(ws_f_ptr + s * 4 + 3, volatile=True)
                m = tl.max(maxes, axis=0)
                total = tl.sum(tl.where(maxes > float("-inf"), sums * tl.exp2(maxes - m), 0.0),
                               axis=0)
                y_best = tl.sum(tl.where(idxs == best, ys, 0.0), axis=0)
                lp = tl.where(best >= 0, (y_best - m - tl.log2(total)) * 0.6931471805599453,
                              float("-inf"))
                tl.store(out_logprobs_ptr + row, tl.where(forced, 0.0, lp))
            tl.atomic_xchg(counter_ptr + row, 0)


_WORKSPACES: dict[torch.device, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}


def _workspace(
    device: torch.device, num_parts: int, num_rows: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-device split partials and per-row counters (zero between calls; grown, never shrunk).

    Calls on one device must not overlap on different streams."""
    ws = _WORKSPACES.get(device)
    if ws is None or ws[1].numel() < num_parts or ws[2].numel() < num_rows:
        parts = triton.next_power_of_2(max(num_parts, 1024))
        rows = triton.next_power_of_2(max(num_rows, 256))
        ws = (
            torch.empty(parts * 4, dtype=torch.float32, device=device),
            torch.empty(parts, dtype=torch.int32, device=device),
            torch.zeros(rows, dtype=torch.int32, device=device),
        )
        _WORKSPACES[device] = ws
    return ws


CUDA_TILE = 2048  # columns per loop iteration on CUDA (8192 under the interpreter)
MAX_SPLITS = 256
# A register target for ptxas: without one, Triton's ptxas flags (--regAllocOptLevel=2) spill a
# few values that live across the column loop on sm_90, at as few as 48 registers.
MAX_REGISTERS = 128


def default_num_splits(num_rows: int, num_cols: int, device: torch.device, tile: int) -> int:
    """Programs per row: enough for ~4 waves of programs on a GPU, 1 elsewhere (a power of 2)."""
    if device.type != "cuda" or num_rows == 0:
        return 1
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    return num_splits_for(num_rows, num_cols, sms, tile)


def num_splits_for(num_rows: int, num_cols: int, num_sms: int, tile: int) -> int:
    """`default_num_splits` on a GPU with `num_sms` multiprocessors (a power of 2)."""
    want = triton.next_power_of_2(triton.cdiv(4 * num_sms, max(num_rows, 1)))
    most = max(1, triton.next_power_of_2(triton.cdiv(num_cols, tile) + 1) // 2)
    return max(1, min(want, most, MAX_SPLITS))


def sample_triton(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    seeds: torch.Tensor,
    steps: torch.Tensor,
    bitmask: torch.Tensor | None = None,
    grammar_rows: torch.Tensor | None = None,
    reasoning: ReasoningState | None = None,
    slots: torch.Tensor | None = None,
    floor: torch.Tensor | None = None,
    cover: int | None = None,
    logprobs: bool = False,
    num_splits: int | None = None,
    tile: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Launch the fused kernel (arguments already checked); same results as `sample_ref`."""
    num_rows, num_cols = logits.shape
    device = logits.device
    ids = torch.empty(num_rows, dtype=torch.int64, device=device)
    lp = torch.empty(num_rows, dtype=torch.float32, device=device) if logprobs else None
    if num_rows == 0:
        return ids, lp
    tile = tile or (CUDA_TILE if device.type == "cuda" else 8192)
    splits = num_splits or default_num_splits(num_rows, num_cols, device, tile)
    if splits & (splits - 1):
        raise ValueError(f"num_splits must be a power of 2, got {splits}")
    chunk = triton.cdiv(triton.cdiv(max(num_cols, 1), splits), tile) * tile
    ws_f, ws_i, counter = _workspace(device, num_rows * splits, num_rows)
    scale = temperature_scale(temperature)
    st = reasoning
    di, df = ws_i, ws_f  # stand-ins for absent int / float tensors (never read)
    single = num_rows == 1  # row 0 only: a stride of 0 lets Triton assume aligned rows
    _sample_kernel[(num_rows, splits)](
        logits, 0 if single else logits.stride(0), num_cols,
        bitmask if bitmask is not None else di,
        bitmask.stride(0) if bitmask is not None and not single else 0,
        bitmask.shape[1] if bitmask is not None else 0,
        min(cover if cover is not None else 2**31 - 1,
            32 * bitmask.shape[1] if bitmask is not None else 0),
        grammar_rows if grammar_rows is not None else di,
        slots if slots is not None else di,
        st.thinking if st else di, st.progress if st else di,
        st.num_reasoning_tokens if st else di, st.budget if st else di,
        st.grammar_in_reasoning if st else di, st.end_ids if st else di,
        st.end_len if st else di, st.start_id if st else di,
        scale, seeds, steps, floor if floor is not None else df,
        ids, lp if lp is not None else df, ws_f, ws_i, counter,
        chunk,
        HAS_MASK=bitmask is not None, HAS_GRAMMAR_ROWS=grammar_rows is not None,
        HAS_REASONING=st is not None, HAS_SLOTS=slots is not None, HAS_FLOOR=floor is not None,
        LOGPROBS=logprobs, MAX_END_LEN=st.max_end_len if st else 1, SPLITS=splits, TILE=tile,
        num_warps=8, enable_fp_fusion=False, maxnreg=MAX_REGISTERS,
    )
    return ids, lp
