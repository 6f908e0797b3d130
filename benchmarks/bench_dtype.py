"""float32 vs bfloat16 on CPU: the decoder's linears alone, then `LLM.generate` end to end.

    python -m thinkgate.benchmarks.bench_dtype --model DIR [--batches 1 8] [--threads 1]

Part 1 times one decode step's projections (qkv, o, gate_up, down of every layer, the model's
own shapes, weights distinct per layer so they stream from memory as in a real step) through
`F.linear` and through oneDNN-packed weights, in both dtypes. Part 2 runs greedy
`LLM.generate` (EOS ignored) with `dtype="float32"` and `dtype="bfloat16"` loaded side by side,
alternating run by run, and prints output tokens per wall second and per CPU second (process
time: on a shared machine the CPU-second rate moves far less with other jobs' load than the
wall rate does). Medians of `--repeats` runs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

DTYPES = (torch.float32, torch.bfloat16)


def _cpu_ms(fn: Callable[[], Any], repeats: int) -> float:
    fn()
    start = time.process_time()
    for _ in range(repeats):
        fn()
    return (time.process_time() - start) / repeats * 1e3


def bench_linears(cfg: dict[str, Any], rows: int, repeats: int) -> dict[str, float]:
    """CPU ms per step for every layer's projections, per (dtype, path)."""
    h, inter = cfg["hidden_size"], cfg["intermediate_size"]
    heads, d = cfg["num_attention_heads"], cfg.get("head_dim") or h // cfg["num_attention_heads"]
    kv = cfg.get("num_key_value_heads") or heads
    shapes = [((heads + 2 * kv) * d, h), (h, heads * d), (2 * inter, h), (h, inter)]
    out = {}
    for dtype in DTYPES:
        layers = [[torch.randn(o, i).to(dtype) for o, i in shapes]
                  for _ in range(cfg["num_hidden_layers"])]
        packed = [[torch.ops.mkldnn._reorder_linear_weight(w, 32) for w in ws] for ws in layers]
        xs = {i: torch.randn(rows, i).to(dtype) for _, i in shapes}

        def plain(layers: list = layers, xs: dict = xs) -> None:
            for ws in layers:
                for w in ws:
                    F.linear(xs[w.shape[1]], w)

        def onednn(layers: list = layers, packed: list = packed, xs: dict = xs) -> None:
            for ws, ps in zip(layers, packed):
                for w, p in zip(ws, ps):
                    torch.ops.mkldnn._linear_pointwise(xs[w.shape[1]], p, None, "none", [], "")

        name = str(dtype).replace("torch.", "")
        out[f"{name} F.linear"] = _cpu_ms(plain, repeats)
        out[f"{name} packed"] = _cpu_ms(onednn, repeats)
    return out


def bench_generate(model: str, batches: list[int], tokens: int, repeats: int) -> list[dict]:
    from thinkgate import LLM, SamplingParams

    llms = {d: LLM(model=model, dtype=d, max_num_seqs=max(batches)) for d in ("float32",
                                                                                  "bfloat16")}
    params = SamplingParams(temperature=0, max_tokens=tokens, ignore_eos=True)
    prompts = [f"Write a short story about robot number {i}." for i in range(max(batches))]
    for llm in llms.values():
        llm.generate(prompts[:2], params, use_tqdm=False)
    rows = []
    for batch in batches:
        runs: dict[str, list[tuple[float, float]]] = {d: [] for d in llms}
        for _ in range(repeats):
            for dtype, llm in llms.items():
                wall, cpu = time.perf_counter(), time.process_time()
                outs = llm.generate(prompts[:batch], params, use_tqdm=False)
                n = sum(len(o.outputs[0].token_ids) for o in outs)
                runs[dtype].append((n / (time.perf_counter() - wall),
                                    n / (time.process_time() - cpu)))
        row: dict[str, Any] = {"batch": batch}
        for dtype, values in runs.items():
            row[f"{dtype}_wall"] = statistics.median(v[0] for v in values)
            row[f"{dtype}_cpu"] = statistics.median(v[1] for v in values)
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="HF folder (Llama-family config.json)")
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    ap.add_argument("--json", default=None, help="write the tables here")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = json.loads((Path(args.model) / "config.json").read_text())
    print(f"threads {torch.get_num_threads()}; one decode step's projections, CPU ms")
    linears = {}
    for rows in args.batches:
        linears[rows] = bench_linears(cfg, rows, args.repeats)
        cells = "  ".join(f"{k} {v:.1f}" for k, v in linears[rows].items())
        print(f"  rows {rows}: {cells}")
    print("| batch | fp32 tok/s | bf16 tok/s | ratio | fp32 tok/CPU-s | bf16 tok/CPU-s | ratio |")
    print("|---|---|---|---|---|---|---|")
    rows = bench_generate(args.model, args.batches, args.tokens, args.repeats)
    for r in rows:
        print(f"| {r['batch']} | {r['float32_wall']:.1f} | {r['bfloat16_wall']:.1f} | "
              f"{r['bfloat16_wall'] / r['float32_wall']:.2f} | {r['float32_cpu']:.1f} | "
              f"{r['bfloat16_cpu']:.1f} | {r['bfloat16_cpu'] / r['float32_cpu']:.2f} |")
    result = {"benchmark": "dtype", "model": args.model, "threads": torch.get_num_threads(),
              "linears_ms": linears, "generate": rows}
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
