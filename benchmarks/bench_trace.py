"""What the token trace costs: engine CPU time per generated token, traced and untraced.

In-process `LLMEngine` on the demo model (one torch thread, qwen3 gate + xgrammar hook), greedy:

    plain   B random prompts of 16 tokens, `--new-tokens` each (EOS ignored)
    tools   B chats "What's the weather in Paris?" with the demo tools, tool_choice required
            (thinking, then the grammar), up to 80 tokens

Variants: `off` (no request traced), `on` (every request traced) and, with `--base-tree DIR`,
`base` (the same run on an older checkout, e.g. `git archive <commit> | tar -x -C DIR/thinkgate`,
so "off" can be compared with the code before the trace existed). Each variant is a worker
process of its own (its own engine); each cell is the median over `--repeats` runs, the
variants alternating run by run, their order rotating (so load from other jobs and any
first-or-last effect hit them alike), after one warm-up; `--fresh` starts new workers for
every repeat. The clock is the
worker's CPU time (`time.process_time`), not wall time.

    python -m thinkgate.benchmarks.bench_trace [--batches 1 8 32] [--repeats 5] [--base-tree DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

WORKLOADS = ("plain", "tools")


class Worker:
    """One engine for one variant; `run` times one (workload, batch) run after a warm-up."""

    def __init__(self, trace: bool, max_batch: int, new_tokens: int) -> None:
        import torch
        from thinkgate import LLM
        from thinkgate.api.chat import chat_layer_for

        torch.set_num_threads(1)
        self.llm = LLM(reasoning_parser="qwen3", tool_call_parser="hermes",
                       max_num_seqs=max(max_batch, 8))
        self.layer = chat_layer_for(self.llm)
        self.extra = {"token_trace": True} if trace else {}
        self.new_tokens = new_tokens
        self.warm: set[tuple[str, int]] = set()

    def requests(self, workload: str, batch: int) -> tuple[list[Any], list[Any]]:
        import torch
        from thinkgate import SamplingParams

        if workload == "plain":
            gen = torch.Generator().manual_seed(batch)
            prompts = torch.randint(10, 4000, (batch, 16), generator=gen).tolist()
            return prompts, [SamplingParams(temperature=0, max_tokens=self.new_tokens,
                                            ignore_eos=True, **self.extra) for _ in prompts]
        try:
            from thinkgate.engine.demo.data import TOOLS
        except ImportError:  # a --base-tree from before engine/demo/ (issue 35)
            from thinkgate.engine.demo_data import TOOLS  # type: ignore[no-redef]

        messages = [{"role": "user", "content": "What's the weather in Paris?"}]
        req = self.layer.prepare(messages, SamplingParams(temperature=0, max_tokens=80,
                                                          **self.extra),
                                 tools=list(TOOLS.values()), tool_choice="required")
        return [req.prompt_token_ids] * batch, [req.sampling_params] * batch

    def run(self, workload: str, batch: int) -> dict[str, float]:
        prompts, params = self.requests(workload, batch)

        def once() -> int:
            outs = self.llm.generate(prompts, params, use_tqdm=False)
            return sum(len(o.outputs[0].token_ids) for o in outs)

        if (workload, batch) not in self.warm:  # grammar compile, first-step allocations
            once()
            self.warm.add((workload, batch))
        start = time.process_time()
        tokens = once()
        return {"cpu_s": time.process_time() - start, "tokens": tokens}


def serve_worker(trace: bool, max_batch: int, new_tokens: int) -> None:
    """Answer one JSON line per request line `workload batch` on stdin."""
    worker = Worker(trace, max_batch, new_tokens)
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        workload, batch = line.split()
        print(json.dumps(worker.run(workload, int(batch))), flush=True)


def _start(args: argparse.Namespace, variant: str) -> subprocess.Popen[str]:
    tree = args.base_tree if variant == "base" else str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": tree, "TRITON_INTERPRET": "0"}
    # by path, so an older tree without this file can run it
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker",
           "1" if variant == "on" else "0", str(max(args.batches)), str(args.new_tokens)]
    proc = subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    assert json.loads(proc.stdout.readline())["ready"]
    return proc


def _time(proc: subprocess.Popen[str], workload: str, batch: int) -> float:
    proc.stdin.write(f"{workload} {batch}\n")
    proc.stdin.flush()
    row = json.loads(proc.stdout.readline())
    return 1e3 * row["cpu_s"] / row["tokens"]  # CPU ms per token


def _stop(procs: dict[str, subprocess.Popen[str]]) -> None:
    for proc in procs.values():
        proc.stdin.close()
        proc.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=WORKLOADS)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--base-tree", default=None,
                    help="PYTHONPATH of an older checkout to time as variant 'base'")
    ap.add_argument("--fresh", action="store_true",
                    help="new worker processes every repeat (a worker process's own speed, "
                         "e.g. where its memory landed, then averages out; an A/A run with "
                         "--base-tree set to this tree showed 6%% between two long-lived ones)")
    ap.add_argument("--json", default=None, help="write the rows here")
    ap.add_argument("--worker", nargs=3, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        trace, max_batch, new_tokens = args.worker
        serve_worker(trace == "1", int(max_batch), int(new_tokens))
        return
    variants = (["base"] if args.base_tree else []) + ["off", "on"]
    procs = {v: _start(args, v) for v in variants}
    rows: list[dict[str, Any]] = []
    print("| workload | batch | " + " | ".join(f"{v} ms/tok" for v in variants)
          + " | off/base | on/off | spread |")
    print("|---|---|" + "---|" * (len(variants) + 3))
    for workload in args.workloads:
        for batch in args.batches:
            runs: dict[str, list[float]] = {v: [] for v in variants}
            for r in range(args.repeats):
                if args.fresh and r:
                    _stop(procs)
                    procs = {v: _start(args, v) for v in variants}
                for v in variants[r % len(variants):] + variants[: r % len(variants)]:
                    runs[v].append(_time(procs[v], workload, batch))
            med = {v: statistics.median(r) for v, r in runs.items()}
            spread = max((max(r) - min(r)) / statistics.median(r) for r in runs.values())
            base = f"{med['off'] / med['base']:.3f}" if "base" in med else "-"
            print(f"| {workload} | {batch} | " + " | ".join(f"{med[v]:.3f}" for v in variants)
                  + f" | {base} | {med['on'] / med['off']:.3f} | {spread:.0%} |", flush=True)
            rows.append({"workload": workload, "batch": batch, "median_ms_per_token": med,
                         "runs": runs})
    _stop(procs)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
