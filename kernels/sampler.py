"""`sample`: the public fused constrained sampler and its per-row inputs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch
from thinkgate.kernels.backend import use_triton
from thinkgate.kernels.bitmask import FLOAT_DTYPES
from thinkgate.kernels.cpu.sample import sample_cpu
from thinkgate.kernels.filters import logit_floor
from thinkgate.kernels.reasoning import ReasoningState, check_slots
from thinkgate.kernels.sampling import allowed_mask_ref, sample_ref, sample_triton


@dataclass(frozen=True)
class SamplingTensors:
    """Per-row sampling inputs on the logits' device; randomness is (seed, step) per row."""

    temperature: torch.Tensor  # (B,) fp32; <= 0 means greedy
    seeds: torch.Tensor  # (B,) int64, per request
    steps: torch.Tensor  # (B,) int64, per-request counter (e.g. the output position)
    top_k: torch.Tensor | None = None  # (B,) int32; <= 0 = off
    top_p: torch.Tensor | None = None  # (B,) fp32; >= 1 = off
    min_p: torch.Tensor | None = None  # (B,) fp32; <= 0 = off

    @classmethod
    def from_lists(
        cls,
        temperature: Sequence[float],
        seeds: Sequence[int] | None = None,
        steps: Sequence[int] | None = None,
        top_k: Sequence[int] | None = None,
        top_p: Sequence[float] | None = None,
        min_p: Sequence[float] | None = None,
        device: torch.device | str = "cpu",
    ) -> SamplingTensors:
        """Build from host lists (seeds/steps default to 0: pass real seeds for sampled rows)."""
        n = len(temperature)
        for name, seq in (("seeds", seeds), ("steps", steps), ("top_k", top_k),
                          ("top_p", top_p), ("min_p", min_p)):
            if seq is not None and len(seq) != n:
                raise ValueError(f"{name} has {len(seq)} entries, temperature has {n}")
        for name, seq, lo, hi in (("top_p", top_p, 0.0, 1.0), ("min_p", min_p, 0.0, 1.0)):
            bad = [v for v in (seq or []) if not lo <= v <= hi or (name == "top_p" and v == 0)]
            if bad:
                raise ValueError(f"{name} values {bad} outside the valid range")

        def tensor(values: Sequence[float] | None, dtype: torch.dtype) -> torch.Tensor | None:
            return None if values is None else torch.tensor(list(values), dtype=dtype).to(device)

        return cls(
            temperature=torch.tensor([float(t) for t in temperature]).to(device),
            seeds=tensor(seeds or [0] * n, torch.int64),
            steps=tensor(steps or [0] * n, torch.int64),
            top_k=tensor(top_k, torch.int32),
            top_p=tensor(top_p, torch.float32),
            min_p=tensor(min_p, torch.float32),
        )


class Sampled(NamedTuple):
    token_ids: torch.Tensor  # (B,) int64; -1 where no token can be sampled
    logprobs: torch.Tensor | None  # (B,) fp32 when asked


def sample(
    logits: torch.Tensor,
    sampling: SamplingTensors,
    *,
    bitmask: torch.Tensor | None = None,
    grammar_rows: torch.Tensor | None = None,
    reasoning: ReasoningState | None = None,
    slots: torch.Tensor | None = None,
    vocab_size: int | None = None,
    return_logprobs: bool = False,
) -> Sampled:
    """Sample one token per row of `logits` (B, V) under the gated grammar; see `sampling.py`.

    `bitmask` (B, W) int32 applies to rows where `grammar_rows` (B,) bool is set (all rows if
    None) and, with `reasoning`, only once the row answers (or always if the slot asks for the
    grammar inside reasoning). `slots` (B,) maps batch rows to reasoning-state slots. Columns
    at or past `vocab_size` (or the bitmask's coverage) are banned on grammar rows.

    CUDA tensors (and CPU ones under TRITON_INTERPRET=1) run the fused Triton kernel; CPU
    tensors run `sample_cpu`, which draws the same distribution from other random numbers."""
    _check(logits, sampling, bitmask, grammar_rows, reasoning, slots)
    if logits.device.type == "cpu" and not return_logprobs and bitmask is None and reasoning is None:
        ids = _greedy_argmax(logits, sampling)
        if ids is not None:
            return Sampled(ids, None)
    if logits.device.type == "cpu" and not use_triton(logits):
        ids, lp = sample_cpu(logits, sampling.temperature, sampling.seeds, sampling.steps,
                             bitmask, grammar_rows, reasoning, slots, sampling.top_k,
                             sampling.top_p, sampling.min_p, vocab_size, return_logprobs)
        return Sampled(ids, lp)
    floor = None
    if any(f is not None for f in (sampling.top_k, sampling.top_p, sampling.min_p)):
        allowed = allowed_mask_ref(logits.shape[0], logits.shape[1], bitmask, grammar_rows,
                                   reasoning, slots, vocab_size)
        floor = logit_floor(logits, allowed, sampling.temperature, sampling.top_k,
                            sampling.top_p, sampling.min_p)
    run = sample_triton if use_triton(logits) else sample_ref
    ids, lp = run(logits, sampling.temperature, sampling.seeds, sampling.steps, bitmask,
                  grammar_rows, reasoning, slots, floor, vocab_size, return_logprobs)
    return Sampled(ids, lp)


def _greedy_argmax(logits: torch.Tensor, sampling: SamplingTensors) -> torch.Tensor | None:
    """The CPU fast path: every row greedy and unfiltered, so the id is the first maximal logit
    (the kernel's tie-break). None when a row needs the full path: a NaN wins torch's argmax but
    is never allowed by the kernel, and a row of -inf samples nothing (-1)."""
    if any(f is not None for f in (sampling.top_k, sampling.top_p, sampling.min_p)):
        return None
    if logits.shape[1] == 0 or bool((sampling.temperature > 0).any()):
        return None
    if logits.dtype == torch.float32:
        # numpy's argmax (the first maximal column) is 3-6x faster than torch's max(dim=1)
        # here: 32 x 8,064 123 -> 20 us, 32 x 151,936 2.6 -> 1.0 ms (one thread)
        rows = logits.detach().numpy()
        at = rows.argmax(axis=1)
        best_np = rows[np.arange(rows.shape[0]), at]
        if bool(np.isnan(best_np).any() or (best_np == -np.inf).any()):
            return None
        return torch.from_numpy(at.astype(np.int64, copy=False))
    best, ids = logits.max(dim=1)  # the first maximal column, ~3x faster than argmax on CPU
    if bool((torch.isnan(best) | (best == float("-inf"))).any()):
        return None
    return ids


def _check(
    logits: torch.Tensor,
    sampling: SamplingTensors,
    bitmask: torch.Tensor | None,
    grammar_rows: torch.Tensor | None,
    reasoning: ReasoningState | None,
    slots: torch.Tensor | None,
) -> None:
    if not isinstance(logits, torch.Tensor) or logits.dim() != 2:
        raise ValueError(f"logits must be a (B, V) tensor, got {getattr(logits, 'shape', logits)}")
    if logits.dtype not in FLOAT_DTYPES:
        raise ValueError(f"logits dtype must be float32, float16 or bfloat16, got {logits.dtype}")
    if logits.shape[1] > 1 and logits.stride(1) != 1:
        raise ValueError(f"logits columns must be contiguous, got strides {logits.stride()}")
    num_rows, device = logits.shape[0], logits.device
    expected = {"temperature": (torch.float32,), "seeds": (torch.int64,), "steps": (torch.int64,),
                "top_k": (torch.int32, torch.int64), "top_p": (torch.float32,),
                "min_p": (torch.float32,)}
    for name, dtypes in expected.items():
        t = getattr(sampling, name)
        if t is None:
            continue
        if t.shape != (num_rows,) or t.dtype not in dtypes or t.device != device:
            raise ValueError(f"sampling.{name} must be ({num_rows},) {dtypes[0]} on {device}, "
                             f"got {tuple(t.shape)} {t.dtype} on {t.device}")
    if bitmask is not None:
        if bitmask.dtype != torch.int32 or bitmask.dim() != 2 or bitmask.shape[0] != num_rows:
            raise ValueError(f"bitmask must be ({num_rows}, W) int32, got "
                             f"{tuple(bitmask.shape)} {bitmask.dtype}")
        if bitmask.device != device or (bitmask.shape[1] > 1 and bitmask.stride(1) != 1):
            raise ValueError(f"bitmask must be column-contiguous on {device}, got "
                             f"{bitmask.device} strides {bitmask.stride()}")
    if grammar_rows is not None and (grammar_rows.shape != (num_rows,)
                                     or grammar_rows.dtype != torch.bool
                                     or grammar_rows.device != device):
        raise ValueError(f"grammar_rows must be ({num_rows},) bool on {device}, got "
                         f"{tuple(grammar_rows.shape)} {grammar_rows.dtype}")
    if reasoning is not None:
        if reasoning.device != device:
            raise ValueError(f"reasoning state is on {reasoning.device}, logits on {device}")
        check_slots(reasoning, num_rows, slots)
    elif slots is not None:
        raise ValueError("slots given without a reasoning state")
