"""The CUDA specializations each launcher can request: the matrix `compile_cuda` compiles.

Every case calls the real launcher (the ``*_triton`` function the dispatcher calls on CUDA) on
CPU tensors, so the constexprs, dtypes, alignments and options are the launcher's own. What a
CUDA launch specializes on, and what the matrix covers:

- bitmask: logits dtype (3) x ``indices`` or not x row stride a multiple of 16 elements or not
  (V = 128,256 vs 151,669) x V a multiple of 16 or not (151,669 in rows padded to 151,680):
  all of them; plus one row (the launcher passes stride 0 there).
- reasoning: ``slots`` or not x longest marker (1 token, 4 tokens) x batch of 1 row (Triton makes
  an int argument equal to 1 a constant) or more: 8.
- spec_accept: draft width (the MAX_LEN constexpr: 1, 4, 8) x one row or more: 6.
- sampler: 6 flags (mask, grammar rows, reasoning, slots, floor, logprobs), 3 dtypes and
  SPLITS in {1, 2, ..., 128} (`num_splits_for` at V <= 262,144 on 108-148 SMs) multiply to
  thousands, so the matrix takes the flag sets the engine and the public API use (below) in
  fp32 at SPLITS 1 and the largest, the lightest and heaviest flag sets in fp16 and bf16, every
  SPLITS value once for the engine's constrained-reasoning set, and the heaviest set at an
  unaligned row stride. SPLITS > 1 values differ only in the length of the final reduction.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import triton

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
VOCAB_ALIGNED, VOCAB_UNALIGNED = 128_256, 151_669  # rows of 128,256: 16-element aligned strides
SMS = (108, 132, 148)  # A100, H100/H200, B200
LARGEST_VOCAB = 262_144
SAMPLER_FLAGS = {  # name -> (mask, grammar_rows, reasoning, slots, floor, logprobs)
    "plain": (False, False, False, False, False, False),
    "floor": (False, False, False, False, True, False),
    "mask": (True, False, False, False, False, False),
    "mask+rows": (True, True, False, False, False, False),
    "mask+rows+reasoning": (True, True, True, True, False, False),
    "mask+rows+reasoning+floor": (True, True, True, True, True, False),
    "reasoning-no-slots": (False, False, True, False, False, False),
    "plain+logprobs": (False, False, False, False, False, True),
    "all+logprobs": (True, True, True, True, True, True),
}

Record = Callable[[object, str, str, list, Callable[[], None]], None]


def dispatcher_splits() -> list[int]:
    """Every SPLITS value `sample_triton` picks on CUDA for V <= 262,144 on the SMS GPUs."""
    from thinkgate.kernels.sampling import CUDA_TILE, num_splits_for

    vocabs = (32_000, VOCAB_ALIGNED, VOCAB_UNALIGNED, 151_936, LARGEST_VOCAB)
    return sorted({num_splits_for(b, v, sms, CUDA_TILE)
                   for b in range(1, 1025) for v in vocabs for sms in SMS})


def all_launches(record: Record) -> list:
    out: list = []
    _bitmask(record, out)
    _reasoning(record, out)
    _sampler(record, out)
    _spec_accept(record, out)
    _paged_attention(record, out)
    _paged_prefill(record, out)
    _moe(record, out)
    _int4_matmul(record, out)
    return out


PAGED_SHAPES = {  # model -> (heads, kv_heads, head_dim) of the paged decode kernel's cases
    "SmolLM2-135M": (9, 3, 64),
    "Qwen3-0.6B": (16, 8, 128),
    "Llama-3-8B": (32, 8, 128),
    "Qwen3-32B": (64, 8, 128),
    "Gemma-3": (8, 4, 256),
}


def _paged_attention(record: Record, out: list) -> None:
    from thinkgate.kernels import paged_attention

    cases = [(m, "bf16") for m in PAGED_SHAPES] + [("Qwen3-0.6B", "fp32"), ("Qwen3-0.6B", "fp16")]
    for model, dtype in cases:
        heads, kv_heads, dim = PAGED_SHAPES[model]
        q = torch.zeros(2, heads, dim, dtype=DTYPES[dtype])
        cache = torch.zeros(5, 16, kv_heads, dim, dtype=DTYPES[dtype])
        tables = torch.zeros(2, 2, dtype=torch.int32)
        lens = torch.full((2,), 17, dtype=torch.int32)
        record(paged_attention, "_paged_decode_kernel", f"{dtype} {model} block=16", out,
               lambda q=q, c=cache, t=tables, n=lens:
               paged_attention.paged_decode_attention_triton(q, c, c, t, n, 0.1))


def _paged_prefill(record: Record, out: list) -> None:
    from thinkgate.kernels import paged_prefill

    cases = [(m, "bf16", 16) for m in PAGED_SHAPES]
    cases += [("Qwen3-0.6B", "fp32", 16), ("Qwen3-0.6B", "fp16", 16), ("Qwen3-0.6B", "bf16", 32)]
    for model, dtype, block_size in cases:
        heads, kv_heads, dim = PAGED_SHAPES[model]
        q = torch.zeros(2, 40, heads, dim, dtype=DTYPES[dtype])
        cache = torch.zeros(9, block_size, kv_heads, dim, dtype=DTYPES[dtype])
        tables = torch.zeros(2, 4, dtype=torch.int32)
        lens = torch.tensor([40, 30], dtype=torch.int32)
        record(paged_prefill, "_paged_prefill_kernel", f"{dtype} {model} block={block_size}",
               out, lambda q=q, c=cache, t=tables, n=lens:
               paged_prefill.paged_prefill_attention_triton(q, c, c, t, n, n + 10, 0.1))


# model -> (hidden, expert intermediate, experts, top k) of the MoE kernels' cases; what a launch
# specializes on is each size's divisibility by 16 (and the dtype), so small stand-ins with the
# same divisibility compile the same code: aligned sizes as every real model has, and one odd set
MOE_SHAPES = {"aligned (Qwen3-MoE, Mixtral)": (128, 96, 4, 2), "unaligned": (100, 40, 3, 3)}


def _moe(record: Record, out: list) -> None:
    from thinkgate.kernels import moe

    cases = [(m, "bf16") for m in MOE_SHAPES] + [(m, d) for m in list(MOE_SHAPES)[:1]
                                                 for d in ("fp32", "fp16")]
    for model, dtype in cases:
        hidden, inter, experts, top_k = MOE_SHAPES[model]
        x = torch.zeros(5, hidden, dtype=DTYPES[dtype])
        w1 = torch.zeros(experts, 2 * inter, hidden, dtype=DTYPES[dtype])
        w2 = torch.zeros(experts, hidden, inter, dtype=DTYPES[dtype])
        ids = torch.arange(5 * top_k).view(5, top_k) % experts
        weights = torch.ones(5, top_k)

        def both(x=x, w1=w1, w2=w2, ids=ids, weights=weights, case=f"{dtype} {model}") -> None:
            record(moe, "_moe_down_kernel", case, out,
                   lambda: moe.fused_moe_triton(x, weights, ids, w1, w2))

        record(moe, "_moe_up_kernel", f"{dtype} {model}", out, both)


# model -> (in, out) of one projection of the int4 matmul's cases: the launch specializes on the
# sizes' divisibility by 16 (GGUF rows are whole groups of 32 in, any count out; real models'
# sizes all divide by 16, as SmolLM2's 576), the dtype, the repeat (Q4: 1, Q8_0: 2) and one row
# of x (decode at batch 1, a constant to Triton) against several
INT4_SHAPES = {"SmolLM2-135M q_proj": (576, 576), "unaligned out": (64, 100)}


def _int4_matmul(record: Record, out: list) -> None:
    from thinkgate.kernels import int4_matmul

    cases = [(m, "bf16", 1, 5) for m in INT4_SHAPES] + [(list(INT4_SHAPES)[0], "bf16", 1, 1)]
    cases += [(m, "bf16", 2, 5) for m in list(INT4_SHAPES)[:1]]
    cases += [(m, d, 1, 5) for m in list(INT4_SHAPES)[:1] for d in ("fp32", "fp16")]
    for model, dtype, repeat, rows in cases:
        k, n = INT4_SHAPES[model]
        x = torch.zeros(rows, k, dtype=DTYPES[dtype])
        packed = torch.zeros(n, repeat * k // 2, dtype=torch.uint8)
        sz = torch.zeros(n, repeat * k // int4_matmul.GROUP, 2, dtype=DTYPES[dtype])
        case = f"{dtype} {model} repeat={repeat}" + (" B=1" if rows == 1 else "")
        record(int4_matmul, "_int4_matmul_kernel", case, out,
               lambda x=x, p=packed, s=sz, r=repeat: int4_matmul.int4_matmul_triton(x, p, s, r))


def _bitmask(record: Record, out: list) -> None:
    from thinkgate.kernels import bitmask

    for name, dtype in DTYPES.items():
        for vocab, rows, width in ((VOCAB_ALIGNED, 2, VOCAB_ALIGNED),
                                   (VOCAB_UNALIGNED, 2, VOCAB_UNALIGNED),
                                   (VOCAB_UNALIGNED, 2, VOCAB_UNALIGNED + 11),  # padded rows
                                   (VOCAB_UNALIGNED, 1, VOCAB_UNALIGNED)):
            for indices in (None, torch.tensor([rows - 1], dtype=torch.int32)):
                logits = torch.zeros(rows, width, dtype=dtype)[:, :vocab]
                mask = torch.zeros(rows, triton.cdiv(vocab, 32), dtype=torch.int32)
                case = (f"{name} V={vocab}" + (f" stride={width}" if width != vocab else "")
                        + (" B=1" if rows == 1 else "") + (" indices" if indices is not None else ""))
                record(bitmask, "_apply_token_bitmask_kernel", case, out,
                       lambda lg=logits, m=mask, i=indices:
                       bitmask.apply_token_bitmask_inplace_triton(lg, m, i))


def _reasoning(record: Record, out: list) -> None:
    from thinkgate.kernels import reasoning

    for marker in ([7], [7, 8, 7, 9]):
        for rows in (1, 64):
            for with_slots in (False, True):
                state = reasoning.ReasoningState.create([marker] * rows)
                ids = torch.zeros(rows, dtype=torch.int64)
                slots = torch.arange(rows, dtype=torch.int32) if with_slots else None
                case = f"marker={len(marker)} B={rows}" + (" slots" if with_slots else "")
                record(reasoning, "_update_reasoning_kernel", case, out,
                       lambda s=state, i=ids, sl=slots:
                       reasoning.update_reasoning_state_triton(s, i, sl))


def _spec_accept(record: Record, out: list) -> None:
    from thinkgate.kernels import spec_accept

    # the constexpr is the draft width (num_speculative_tokens); one row is Triton's constant
    for width in (1, 4, 8):
        for rows in (1, 16):
            sampled = torch.zeros(rows * (width + 1), dtype=torch.int64)
            starts = torch.arange(rows, dtype=torch.int64) * (width + 1)
            lens = torch.full((rows,), width, dtype=torch.int64)
            record(spec_accept, "_accept_drafts_kernel", f"K={width} B={rows}", out,
                   lambda s=sampled, st=starts, ln=lens, w=width:
                   spec_accept.accept_drafts_triton(s, s.clone(), st, ln, w))


def _sampler(record: Record, out: list) -> None:
    splits = dispatcher_splits()
    most = splits[-1]
    cases = [(f, "fp32", VOCAB_ALIGNED, s) for f in SAMPLER_FLAGS for s in sorted({1, most})]
    cases += [(f, d, VOCAB_ALIGNED, s) for f in ("plain", "all+logprobs") for d in ("fp16", "bf16")
              for s in (1, most)]
    cases += [("mask+rows+reasoning", "fp32", VOCAB_ALIGNED, s) for s in splits
              if s not in (1, most)]
    cases += [("all+logprobs", "fp32", VOCAB_UNALIGNED, s) for s in (1, most)]
    for flags, dtype, vocab, num_splits in cases:
        case = f"{dtype} {flags} splits={num_splits}" + (
            f" V={vocab}" if vocab != VOCAB_ALIGNED else "")
        _record_sample(record, out, case, SAMPLER_FLAGS[flags], DTYPES[dtype], vocab, num_splits)
    for dtype in ("fp32", "bf16"):  # V = 151,669 in padded rows, and in one row (stride 0)
        for rows, width, label in ((2, VOCAB_UNALIGNED + 11, "stride=151680"), (1, None, "B=1")):
            case = f"{dtype} mask+rows+reasoning splits=1 V={VOCAB_UNALIGNED} {label}"
            _record_sample(record, out, case, SAMPLER_FLAGS["mask+rows+reasoning"],
                           DTYPES[dtype], VOCAB_UNALIGNED, 1, rows, width)


def _record_sample(record: Record, out: list, case: str, flags: tuple[bool, ...],
                   dtype: torch.dtype, vocab: int, num_splits: int, rows: int = 2,
                   width: int | None = None) -> None:
    from thinkgate.kernels import sampling
    from thinkgate.kernels.reasoning import ReasoningState

    has_mask, has_rows, has_reasoning, has_slots, has_floor, logprobs = flags
    logits = torch.zeros(rows, width or vocab, dtype=dtype)[:, :vocab]
    kwargs = {
        "bitmask": torch.zeros(rows, triton.cdiv(vocab, 32), dtype=torch.int32)
        if has_mask else None,
        "grammar_rows": torch.ones(rows, dtype=torch.bool) if has_rows else None,
        "reasoning": ReasoningState.create([[7]] * rows) if has_reasoning else None,
        "slots": torch.arange(rows, dtype=torch.int32) if has_slots else None,
        "floor": torch.zeros(rows) if has_floor else None,
        "cover": vocab if has_mask else None,
        "logprobs": logprobs,
        "num_splits": num_splits,
        "tile": sampling.CUDA_TILE,
    }
    temperature = torch.ones(rows)
    seeds = steps = torch.zeros(rows, dtype=torch.int64)
    record(sampling, "_sample_kernel", case, out,
           lambda: sampling.sample_triton(logits, temperature, seeds, steps, **kwargs))
