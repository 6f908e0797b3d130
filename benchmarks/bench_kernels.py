"""Kernel benchmark: our bitmask and fused sampler vs xgrammar's kernels (+ torch sampling).

    python -m thinkgate.benchmarks.bench_kernels [--quick] [--json out.json]
    python -m thinkgate.benchmarks.bench_kernels --static   # no GPU needed

On CUDA: medians from `triton.testing.do_bench` (L2 flushed) over B x V x dtype x mask, for
ours vs xgrammar's Triton and CUDA `apply_token_bitmask_inplace`, and fused mask+sample vs
xgrammar's Triton mask followed by torch sampling (softmax / exponential race, as vLLM does).
GB/s counts the bytes our design must move (a mixed 32-column word is read and written, an
all-banned word only written, an all-allowed word not touched; the fused sampler reads every
word that allows something), and % is of a measured device copy. On CPU the same table on
smaller shapes compares our CPU path (the torch twins) with xgrammar's CPU kernel.

`--static` needs no GPU: every kernel compiled ahead of time for sm_80/90/100
(`kernels/compile_cuda.py`): registers, shared/local memory, global load/store instructions and
widths in the PTX, then bytes each call must move (the GB/s model above) at V = 128,256 and
151,669, B = 1 and 64, and that traffic's time at H200's 4.8 TB/s next to published anchors.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable

import torch
from thinkgate.kernels import SamplingTensors, apply_token_bitmask_inplace, sample

MASKS = ("1 banned", "50% random", "99% banned", "json trace")


def _time_us(fn: Callable[[], object], cuda: bool) -> float:
    if cuda:
        import triton.testing

        return triton.testing.do_bench(fn, warmup=10, rep=40, return_mode="median") * 1e3
    fn()
    runs = []
    for _ in range(5):
        t0 = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs) * 1e6


def _copy_bandwidth(device: torch.device) -> float:
    """Bytes/s of a large device-to-device copy (read + write)."""
    if device.type != "cuda":
        return float("nan")
    src = torch.empty(256 * 2**20, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    return 2 * src.numel() / (_time_us(lambda: dst.copy_(src), True) * 1e-6)


def json_trace_words(vocab: int) -> torch.Tensor | None:
    """Mask rows recorded while xgrammar walks a JSON-schema instance with the demo tokenizer,
    with each row's word pattern repeated to `vocab` columns; None if unavailable."""
    try:
        import xgrammar as xgr
        from thinkgate.engine.demo import demo_model_path
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(demo_model_path())
    except Exception as err:  # no demo model built yet, or no xgrammar
        print(f"(json trace unavailable: {err})")
        return None
    info = xgr.TokenizerInfo.from_huggingface(tok, vocab_size=len(tok))
    schema = {"type": "object", "properties": {
        "name": {"type": "string"}, "age": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "city": {"enum": ["Paris", "Lima", "Oslo"]}},
        "required": ["name", "age", "tags", "city"]}
    compiled = xgr.GrammarCompiler(info).compile_json_schema(json.dumps(schema),
                                                             any_whitespace=False)
    matcher = xgr.GrammarMatcher(compiled)
    text = json.dumps({"name": "Ada Lovelace", "age": 36, "tags": ["math", "poetry"],
                       "city": "Oslo"}, separators=(",", ":"))
    rows = []
    for token in tok.encode(text, add_special_tokens=False):
        mask = xgr.allocate_token_bitmask(1, info.vocab_size)
        matcher.fill_next_token_bitmask(mask)
        rows.append(mask[0])
        if not matcher.accept_token(token):
            break
    words = torch.stack(rows)
    need = (vocab + 31) // 32
    return words.repeat(1, (need + words.shape[1] - 1) // words.shape[1])[:, :need]


def make_bitmask(kind: str, rows: int, vocab: int, trace: torch.Tensor | None,
                 gen: torch.Generator) -> torch.Tensor | None:
    words = (vocab + 31) // 32
    if kind == "1 banned":
        bm = torch.full((rows, words), -1, dtype=torch.int32)
        bm[:, 0] = -2  # token 0 banned
        return bm
    if kind == "json trace":
        return None if trace is None else trace[torch.arange(rows) % trace.shape[0]].contiguous()
    keep = 0.5 if kind == "50% random" else 0.01
    bits = (torch.rand(rows, words * 32, generator=gen) < keep).view(rows, words, 32)
    packed = (bits.long() << torch.arange(32)).sum(-1)
    return torch.where(packed >= 2**31, packed - 2**32, packed).to(torch.int32)


def traffic(bitmask: torch.Tensor, vocab: int, size: int) -> tuple[float, float]:
    """Bytes our in-place kernel and our fused sampler must move for this mask."""
    words = bitmask[:, : (vocab + 31) // 32]
    allowed = torch.stack([(words >> b) & 1 for b in range(32)], -1).sum(-1)
    mixed = ((allowed > 0) & (allowed < 32)).sum().item()
    banned = (allowed == 0).sum().item()
    some = (allowed > 0).sum().item()
    mask_bytes = bitmask.numel() * 4
    return (mask_bytes + 32 * size * (2 * mixed + banned),
            mask_bytes + 32 * size * some + 8 * bitmask.shape[0])


def _xgr_backends(cuda: bool) -> dict[str, Callable[..., None]]:
    try:
        import xgrammar as xgr
    except ImportError:
        return {}
    names = ("triton", "cuda") if cuda else ("cpu",)
    return {n: (lambda lg, bm, _n=n: xgr.apply_token_bitmask_inplace(lg, bm, backend=_n))
            for n in names}


def _torch_sample(logits: torch.Tensor, temperature: torch.Tensor) -> torch.Tensor:
    probs = torch.softmax(logits.float() / temperature[:, None], dim=-1)
    return probs.div_(torch.empty_like(probs).exponential_()).argmax(dim=-1)


def bench_case(b: int, v: int, dtype: torch.dtype, kind: str, device: torch.device,
               trace: torch.Tensor | None, copy_bw: float, xgr: dict) -> dict | None:
    cuda = device.type == "cuda"
    gen = torch.Generator().manual_seed(b * 7 + v)
    bitmask_cpu = make_bitmask(kind, b, v, trace, gen)
    if bitmask_cpu is None:
        return None
    bitmask = bitmask_cpu.to(device)
    logits = (torch.randn(b, v, generator=gen) * 3).to(device=device, dtype=dtype)
    sampling = SamplingTensors.from_lists([1.0] * b, seeds=list(range(b)), steps=[0] * b,
                                          device=device)
    row = {"B": b, "V": v, "dtype": str(dtype).removeprefix("torch."), "mask": kind}
    row["ours_us"] = _time_us(lambda: apply_token_bitmask_inplace(logits, bitmask), cuda)
    for name, fn in xgr.items():
        try:
            row[f"xgr_{name}_us"] = _time_us(lambda fn=fn: fn(logits, bitmask), cuda)
        except Exception as err:  # e.g. the CUDA backend needs nvcc to JIT
            row[f"xgr_{name}_us"] = float("nan")
            print(f"(xgrammar {name} failed: {type(err).__name__}: {err})"[:200])
    row["fused_us"] = _time_us(lambda: sample(logits, sampling, bitmask=bitmask), cuda)
    row["unconstrained_us"] = _time_us(lambda: sample(logits, sampling), cuda)
    base = next(iter(xgr.values()), None)
    if base is not None:
        row["xgr_mask_torch_sample_us"] = _time_us(
            lambda: _torch_sample(base(logits, bitmask) or logits, sampling.temperature), cuda)
    mask_bytes, fused_bytes = traffic(bitmask_cpu, v, logits.element_size())
    row["ours_GBps"] = mask_bytes / row["ours_us"] / 1e3
    row["ours_pct_copy"] = 100 * row["ours_GBps"] * 1e9 / copy_bw
    row["fused_GBps"] = fused_bytes / row["fused_us"] / 1e3
    return row


def print_table(rows: list[dict]) -> None:
    cols = ["B", "V", "dtype", "mask", "ours_us", "ours_GBps", "ours_pct_copy"]
    cols += sorted({k for r in rows for k in r if k.startswith("xgr_") and k.endswith("_us")})
    cols += ["fused_us", "unconstrained_us", "fused_GBps", "vs_xgr", "fused_vs_xgr"]
    for r in rows:
        first = r.get("xgr_triton_us", r.get("xgr_cpu_us", float("nan")))
        r["vs_xgr"] = first / r["ours_us"]
        r["fused_vs_xgr"] = r.get("xgr_mask_torch_sample_us", float("nan")) / r["fused_us"]
    print(" | ".join(cols))
    print(" | ".join("---" for _ in cols))
    for r in rows:
        print(" | ".join(f"{r.get(c, float('nan')):.2f}" if isinstance(r.get(c), float)
                         else str(r.get(c, "")) for c in cols))


H200_BYTES_PER_S = 4.8e12
STATIC_CASES = (  # (kernel, case) rows of the static table; `--static --all` prints every case
    *(("_apply_token_bitmask_kernel", f"{d} {c}") for d in ("fp32", "bf16")
      for c in ("V=128256", "V=151669", "V=151669 stride=151680", "V=151669 B=1")),
    ("_update_reasoning_kernel", "marker=1 B=64 slots"),
    ("_sample_kernel", "fp32 plain splits=1"), ("_sample_kernel", "fp32 mask+rows+reasoning splits=1"),
    ("_sample_kernel", "fp32 mask+rows+reasoning splits=64"),
    ("_sample_kernel", "bf16 all+logprobs splits=1"),
    ("_sample_kernel", "fp32 all+logprobs splits=1 V=151669"),
    ("_sample_kernel", "fp32 mask+rows+reasoning splits=1 V=151669 stride=151680"),
    ("_sample_kernel", "fp32 mask+rows+reasoning splits=1 V=151669 B=1"),
    ("_sample_kernel", "bf16 mask+rows+reasoning splits=1 V=151669 B=1"),
    ("_paged_decode_kernel", "bf16 Qwen3-0.6B block=16"),
    ("_paged_decode_kernel", "bf16 Gemma-3 block=16"),
    ("_paged_prefill_kernel", "bf16 Qwen3-0.6B block=16"),
    ("_paged_prefill_kernel", "bf16 Gemma-3 block=16"),
)
# published numbers to hold the roofline against (../shared/reference/perf_anchors.md)
ANCHORS = {
    (1, "fp32"): "xgrammar mask, any backend, H100: 5.4-6.2 us (launch floor)",
    (64, "fp32"): "xgrammar mask B=64 V=128k 50%: Triton 45.4 us, CUDA 38.8 us (H100)",
}


def _widths(ops: dict[str, int], kind: str) -> str:
    """'4x128 4x32' for {'ld.global.v4.b32': 4, 'ld.global.b32': 4} and kind 'ld'."""
    out = []
    for name, n in sorted(ops.items(), key=lambda kv: -kv[1]):
        parts = name.split(".")
        if parts[0] == "cp" and kind == "ld":  # cp.async...shared.global.0x10: 16-byte copies
            out.append(f"{n}x{int(parts[-1], 16) * 8}async")
            continue
        if parts[0] != kind:
            continue
        lanes = int(parts[2][1:]) if parts[2].startswith("v") else 1
        bits = int("".join(ch for ch in parts[-1] if ch.isdigit()) or 0)
        out.append(f"{n}x{lanes * bits}")
    return " ".join(out) or "-"


def static_report(show_all: bool) -> None:
    from thinkgate.kernels.compile_cuda import compile_all

    reports = compile_all()
    wanted = set(STATIC_CASES)
    print("kernel | case | sm | warps | regs | shared B | local B | stack B | ld.global "
          "(count x bits) | st.global | atomics")
    print(" | ".join("---" for _ in range(11)))
    for r in reports:
        if show_all or (r.kernel, r.case) in wanted:
            atom = sum(n for k, n in r.global_ops.items() if k.startswith(("atom", "red")))
            print(f"{r.kernel} | {r.case} | {r.arch} | {r.num_warps} | {r.registers} | "
                  f"{r.shared_bytes} | {r.local_bytes} | {r.stack_bytes} | "
                  f"{_widths(r.global_ops, 'ld')} | {_widths(r.global_ops, 'st')} | {atom}")
    print("\nld/st: instructions in the PTX (per thread, each loop body and branch once), not "
          "executed counts; the bitmask kernel and the sampler's loop each hold a bounds-free "
          "branch (blocks inside the row) and a bounded one (the row's end).\n")
    kinds = ("1 banned", "50% random", "99% banned")
    print("dtype | B | V | in place MB (" + " / ".join(kinds) + ") | in place us | fused MB | "
          "fused us | unconstrained MB | us | anchor (in place, 50% random)")
    print(" | ".join("---" for _ in range(10)))
    gen = torch.Generator().manual_seed(0)
    for dtype, size in (("fp32", 4), ("bf16", 2)):
        for v in (128_256, 151_669):
            for b in (1, 64):
                moved = [traffic(make_bitmask(k, b, v, None, gen), v, size) for k in kinds]
                plain = b * v * size + 8 * b

                def fmt(nbytes: list[float], scale: float) -> str:
                    return " / ".join(f"{n * scale:.2f}" for n in nbytes)

                inplace, fused = [m[0] for m in moved], [m[1] for m in moved]
                us = 1e6 / H200_BYTES_PER_S
                anchor = ANCHORS.get((b, dtype), "") if v == 128_256 else ""
                print(f"{dtype} | {b} | {v} | {fmt(inplace, 1e-6)} | {fmt(inplace, us)} | "
                      f"{fmt(fused, 1e-6)} | {fmt(fused, us)} | {plain / 1e6:.2f} | "
                      f"{plain * us:.2f} | {anchor}")
    print("\nreasoning update: ~40 B per row (ids, 6 int32 reads, 3 writes): latency bound.")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few shapes only")
    parser.add_argument("--json", help="also write the rows as JSON to this path")
    parser.add_argument("--static", action="store_true",
                        help="compile for sm_80/90/100 and print resources and rooflines (no GPU)")
    parser.add_argument("--all", action="store_true", help="with --static: every compiled case")
    args = parser.parse_args(argv)
    if args.static:
        static_report(args.all)
        return
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cuda":
        batches, vocabs = [1, 8, 64, 256, 1024], [32000, 128256, 151936, 262144]
        if args.quick:
            batches, vocabs = [1, 64, 256], [151936]
        print(f"device: {torch.cuda.get_device_name(device)}")
    else:
        batches, vocabs = ([1, 8], [32000]) if args.quick else ([1, 8], [32000, 151936])
        print("device: cpu (our CPU path = the torch twins; xgrammar's CPU kernel)")
    copy_bw = _copy_bandwidth(device)
    print(f"device copy bandwidth: {copy_bw / 1e9:.0f} GB/s")
    trace = json_trace_words(max(vocabs))
    xgr = _xgr_backends(device.type == "cuda")
    rows = []
    for dtype in (torch.float32, torch.bfloat16):
        for v in vocabs:
            for b in batches:
                for kind in MASKS:
                    row = bench_case(b, v, dtype, kind, device, trace, copy_bw, xgr)
                    if row is not None:
                        rows.append(row)
    print_table(rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": str(device), "copy_GBps": copy_bw / 1e9, "rows": rows}, f,
                      indent=1)


if __name__ == "__main__":
    main()
