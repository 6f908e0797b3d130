"""Engine throughput on a Qwen3-0.6B-shaped model at the real Qwen3 vocabulary, on CUDA.

    python -m thinkgate.benchmarks.bench_gpu_engine --out DIR [--model DIR | --workdir DIR]
        [--batches 1 8 64] [--tokens 64] [--repeats 2] [--engines graphs eager gather]
        [--dry-run]

Builds a randomly initialized Qwen3-0.6B-shaped checkpoint (28 layers, hidden 1024, 16 heads
over 8 K/V heads of 128, the 151,669-token Qwen3 vocabulary; `real_vocab_model.py`) unless
`--model` names one (built under `--workdir`, default `--out`; kept for the next run), then times greedy decoding of exactly `--tokens` tokens per sequence
(EOS ignored) with three engines, each loaded in turn:

- `graphs`: attention backend TRITON_ATTN (paged kernels) with CUDA-graph decode (the default);
- `eager`: TRITON_ATTN with `enforce_eager=True`;
- `gather`: TORCH_SDPA (every step gathers the blocks, then SDPA), eager.

Each engine decodes batch 1, 8 and 64, unconstrained and under bench_constrained's JSON schema
(grammar masks on every step), `--repeats` alternating (plain, json) pairs after a warm-up that
also captures the graphs; cells are medians of output tokens/s over the wall clock (a step ends
when its sampled ids reach the host, so no extra sync is needed). Prints markdown tables and
rewrites `engine.md` and `engine.json` under `--out` after each engine (a run cut short by a
timeout keeps the engines it finished).

`--dry-run` proves the script on a CPU: a 2-layer model at the same vocabulary, batches 1 and
2, 3 tokens, one pair; the `graphs` engine runs the CUDA-graph buffer code with the capture
skipped (on CPU every step is eager), and the paged kernels run as their torch twins.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time
from pathlib import Path
from typing import Any

ENGINES = {  # name -> LLM arguments
    "graphs": {"attention_backend": "TRITON_ATTN"},
    "eager": {"attention_backend": "TRITON_ATTN", "enforce_eager": True},
    "gather": {"attention_backend": "TORCH_SDPA", "enforce_eager": True},
}


def build_checkpoint(out: Path, dry_run: bool) -> Path:
    from thinkgate.benchmarks import real_vocab_model as rv

    folder = out / ("model-tiny" if dry_run else "model-qwen3-0.6b")
    if (folder / "config.json").exists():
        return folder
    args = [str(folder), "--shape", "tiny" if dry_run else "qwen3-0.6b"]
    args += ["--dtype", "float32"] if dry_run else ["--dtype", "bfloat16", "--device", "cuda"]
    return rv.main(args)


def load_engine(model: Path | str, name: str, max_batch: int, dry_run: bool) -> Any:
    from thinkgate import LLM
    from thinkgate.api.chat import chat_layer_for

    kwargs = {**ENGINES[name], "kv_layout": "paged"}
    if not dry_run:
        kwargs["kv_cache_memory_bytes"] = 8 << 30  # leave the GPU to the next engine
    llm = LLM(model=str(model), max_num_seqs=max_batch, max_model_len=1024,
              device="cpu" if dry_run else "cuda", **kwargs)
    chat_layer_for(llm)  # the constrained-decoding hook
    runner = llm.llm_engine.runner
    if name == "graphs" and dry_run:  # the buffer path with the capture skipped
        from thinkgate.engine.model.cuda_graphs import DecodeGraphs, capture_sizes

        engine, cache = llm.llm_engine, llm.llm_engine.kv_cache
        runner.graphs = DecodeGraphs(
            runner.model, cache.layers, capture_sizes(max_batch),
            -(-engine.max_model_len // cache.block_size), cache.block_size, cache.scratch_block,
            engine.device, capture=False)
    expected = (name != "gather", name == "graphs")
    got = (runner.paged_kernels, runner.graphs is not None)
    if got != expected:
        raise RuntimeError(f"engine {name}: (paged kernels, graphs) = {got}, wanted {expected}")
    return llm


def measure(llm: Any, batches: list[int], tokens: int, repeats: int) -> list[dict[str, Any]]:
    from thinkgate.benchmarks.bench_constrained import _run

    for batch in batches:  # warm-up: schema compile, Triton compiles, one graph per bucket
        _run(llm, batch, 2, True)
        _run(llm, batch, 2, False)
    rows = []
    for batch in batches:
        runs: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(repeats):
            for constrained in (False, True):
                runs[constrained].append(_run(llm, batch, tokens, constrained)["tok_s"])
        for constrained in (False, True):
            rows.append({"batch": batch, "constrained": constrained,
                         "tok_s": statistics.median(runs[constrained]),
                         "runs": runs[constrained]})
    return rows


def table(results: dict[str, list[dict[str, Any]]], batches: list[int]) -> str:
    names = list(results)
    lines = ["| batch | constraint | " + " | ".join(f"{n} tok/s" for n in names)
             + " | graphs / eager | eager / gather |",
             "|---|---|" + "---|" * (len(names) + 2)]
    for batch in batches:
        for constrained in (False, True):
            cell = {n: next(r["tok_s"] for r in results[n] if r["batch"] == batch
                            and r["constrained"] == constrained) for n in names}
            ratios = [cell[a] / cell[b] if a in cell and b in cell else float("nan")
                      for a, b in (("graphs", "eager"), ("eager", "gather"))]  # nan: not run
            lines.append(f"| {batch} | {'json' if constrained else 'none'} | "
                         + " | ".join(f"{cell[n]:.0f}" for n in names)
                         + f" | {ratios[0]:.2f} | {ratios[1]:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for the tables (and model)")
    ap.add_argument("--model", default=None, help="checkpoint folder (default: build one)")
    ap.add_argument("--workdir", type=Path, default=None, help="where to build it")
    ap.add_argument("--batches", type=int, nargs="+", default=None)
    ap.add_argument("--tokens", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--engines", nargs="+", choices=list(ENGINES), default=list(ENGINES))
    ap.add_argument("--dry-run", action="store_true", help="tiny model on CPU (see above)")
    ap.add_argument("--threads", type=int, default=None,
                    help="torch CPU threads (dry run: 1; on a loaded 2-core VM 2 threads ran the "
                         "demo model's steps 25x slower)")
    args = ap.parse_args(argv)
    dry = args.dry_run
    if args.threads or dry:
        import torch

        torch.set_num_threads(args.threads or 1)
    batches = args.batches or ([1, 2] if dry else [1, 8, 64])
    tokens = args.tokens or (3 if dry else 64)
    repeats = args.repeats or (1 if dry else 2)
    args.out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    model = Path(args.model) if args.model else build_checkpoint(args.workdir or args.out, dry)
    print(f"model {model} ({time.perf_counter() - start:.0f}s)", flush=True)
    results: dict[str, list[dict[str, Any]]] = {}
    for name in args.engines:
        t0 = time.perf_counter()
        llm = load_engine(model, name, max(batches), dry)
        results[name] = measure(llm, batches, tokens, repeats)
        del llm
        gc.collect()
        _empty_cuda_cache()
        print(f"engine {name}: {time.perf_counter() - t0:.0f}s", flush=True)
        header = (f"engine throughput, {'DRY RUN (CPU, tiny model)' if dry else 'CUDA'}: "
                  f"{tokens} tokens per sequence, median of {repeats}, model {model.name}")
        text = header + "\n\n" + table(results, batches) + "\n"
        (args.out / "engine.md").write_text(text)
        result = {"benchmark": "gpu_engine", "dry_run": dry, "model": str(model),
                  "tokens": tokens, "repeats": repeats, "batches": batches, "engines": results}
        (args.out / "engine.json").write_text(json.dumps(result, indent=1))
    print(text)
    return result


def _empty_cuda_cache() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
