"""`thinkgate serve --replicas N` (Ray Serve, issue 25): prefix-aware routing against round robin.

Workload: 16 concurrent streaming clients over 4 distinct shared prefixes (a 1,200-token system
prompt each, demo tokenizer); client c always uses prefix c % 4 and sends `--rounds` requests one
after another, each with its own question, `max_tokens` 16 with `ignore_eos`, temperature 0.
Each server start builds its prompts from a new tag, so every run starts cold.

Per run: mean and median time to first token (first streamed delta, reasoning included),
the prefix-cache hit rate (cached / prompt tokens over all requests, from each stream's usage:
`prompt_tokens_details.cached_tokens`), completion tokens per second over the run's wall time,
how many requests landed on each replica (`x-thinkgate-replica`), and lost requests (an error or
a stream without its finish). Rows:

- 2 replicas, prefix-aware routing vs round robin, at each `--kv-blocks` (per replica): 200
  blocks of 16 tokens hold two of the four prefixes besides the running requests' own blocks
  (the regime routing is for: the replicas' caches together hold every prefix, one alone does
  not); `0` is the engine's default, which holds all four, so round robin also hits once warm;
- 1 replica at the last cache size (same workload, both cores to one engine): the tokens/s of
  2 vs 1 replicas.

    python -m thinkgate.benchmarks.bench_replicas [--rounds 8] [--kv-blocks 200 0] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
from thinkgate.benchmarks.bench_prefix import system_prompt
from thinkgate.benchmarks.bench_server import free_port, launch, stop, thinkgate_command

CLIENTS, PREFIXES, PREFIX_TOKENS, MAX_TOKENS = 16, 4, 1200, 16
MODEL = "thinkgate-demo"


async def one_request(client: httpx.AsyncClient, system: str, question: str) -> dict[str, Any]:
    body = {"model": MODEL, "max_tokens": MAX_TOKENS, "temperature": 0, "ignore_eos": True,
            "stream": True, "stream_options": {"include_usage": True},
            "messages": [{"role": "system", "content": system},
                         {"role": "user", "content": question}]}
    start = time.perf_counter()
    ttft, usage, finished = None, None, False
    async with client.stream("POST", "/v1/chat/completions", json=body) as r:
        replica = r.headers.get("x-thinkgate-replica", "?").split("@")[0]
        if r.status_code != 200:
            return {"lost": True, "replica": replica}
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if "error" in chunk:
                return {"lost": True, "replica": replica}
            if chunk.get("usage"):
                usage = chunk["usage"]
            for choice in chunk.get("choices", ()):
                delta = choice.get("delta") or {}
                if ttft is None and (delta.get("content") or delta.get("reasoning_content")
                                     or delta.get("reasoning") or delta.get("tool_calls")):
                    ttft = time.perf_counter() - start
                finished = finished or choice.get("finish_reason") is not None
    if usage is None or ttft is None or not finished:
        return {"lost": True, "replica": replica}
    details = usage.get("prompt_tokens_details") or {}
    return {"lost": False, "replica": replica, "ttft": ttft,
            "prompt": usage["prompt_tokens"], "cached": details.get("cached_tokens") or 0,
            "completion": usage["completion_tokens"]}


async def workload(base: str, rounds: int) -> dict[str, Any]:
    tag = uuid.uuid4().hex[:8]
    systems = [system_prompt(f"{tag}-{p}", PREFIX_TOKENS) for p in range(PREFIXES)]
    limits = httpx.Limits(max_connections=CLIENTS + 4)
    async with httpx.AsyncClient(base_url=base, timeout=600, limits=limits) as client:
        async def one_client(c: int) -> list[dict[str, Any]]:
            return [await one_request(client, systems[c % PREFIXES],
                                      f"Client {c}, question {k}: what now?")
                    for k in range(rounds)]

        start = time.perf_counter()
        rows = [r for rs in await asyncio.gather(*(one_client(c) for c in range(CLIENTS)))
                for r in rs]
        wall = time.perf_counter() - start
    done = [r for r in rows if not r["lost"]]
    ttfts = [r["ttft"] * 1e3 for r in done]
    per_replica: dict[str, int] = {}
    for r in rows:
        per_replica[r["replica"]] = per_replica.get(r["replica"], 0) + 1
    return {
        "requests": len(rows), "lost": len(rows) - len(done),
        "ttft_mean": statistics.fmean(ttfts) if ttfts else float("nan"),
        "ttft_p50": statistics.median(ttfts) if ttfts else float("nan"),
        "hit_rate": sum(r["cached"] for r in done) / max(1, sum(r["prompt"] for r in done)),
        "tok_s": sum(r["completion"] for r in done) / wall, "wall": wall,
        "per_replica": sorted(per_replica.values(), reverse=True),
    }


def run_server(replicas: int, routing: str, kv_blocks: int, rounds: int,
               log_dir: Path) -> dict[str, Any]:
    port = free_port()
    cmd = [*thinkgate_command(), "serve", "--replicas", str(replicas), "--port", str(port),
           "--replica-routing", routing, "--max-num-seqs", "8", "--enforce-eager",
           "--batch-dir", str(log_dir / f"batches-{port}")]
    if kv_blocks:
        cmd += ["--num-kv-blocks", str(kv_blocks)]
    with open(log_dir / f"serve-{port}.log", "w") as log:
        proc = launch(cmd, port, log, timeout=300)
        try:
            base = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 120
            while httpx.get(f"{base}/health", timeout=10).json()["status"] != "ok":
                if time.monotonic() > deadline:
                    raise RuntimeError("not every replica started")
                time.sleep(0.5)
            return asyncio.run(workload(base, rounds))
        finally:
            stop(proc, grace=40)
            root = Path(os.environ.get("RAY_TMPDIR") or tempfile.gettempdir()) / "ray"
            for session in root.glob(f"session_*_{proc.pid}"):  # this run's Ray logs
                shutil.rmtree(session, ignore_errors=True)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=8, help="requests per client, one at a time")
    p.add_argument("--kv-blocks", type=int, nargs="+", default=[200, 0],
                   help="KV blocks per replica (16 tokens each); 0: the engine's default")
    p.add_argument("--quick", action="store_true", help="one cache size, no 1-replica row")
    args = p.parse_args(argv)
    sizes = args.kv_blocks[:1] if args.quick else args.kv_blocks
    log_dir = Path(tempfile.mkdtemp(prefix="bench_replicas_"))
    print(f"{CLIENTS} clients x {args.rounds} requests, {PREFIXES} prefixes of {PREFIX_TOKENS} "
          f"tokens, max_tokens {MAX_TOKENS}; load average {os.getloadavg()[0]:.1f}; server logs "
          f"in {log_dir}", flush=True)
    rows: list[tuple[str, dict[str, Any]]] = []
    for blocks in sizes:
        for routing in ("prefix", "round_robin"):
            rows.append((f"2 replicas, {routing}, kv {blocks or 'default'}",
                         run_server(2, routing, blocks, args.rounds, log_dir)))
            print(f"  {rows[-1][0]}: {rows[-1][1]}", flush=True)
        rr, pa = rows[-1][1], rows[-2][1]
        print(f"  kv {blocks or 'default'}: mean TTFT round robin / prefix-aware = "
              f"{rr['ttft_mean'] / pa['ttft_mean']:.2f}x", flush=True)
    if not args.quick:  # at the last cache size (the default: the cache is no factor there)
        rows.append((f"1 replica, kv {sizes[-1] or 'default'}",
                     run_server(1, "prefix", sizes[-1], args.rounds, log_dir)))
    print()
    print("| run | requests | lost | TTFT mean ms | TTFT p50 ms | prefix-cache hit rate | "
          "tok/s | per replica |")
    print("|---|---|---|---|---|---|---|---|")
    for name, r in rows:
        print(f"| {name} | {r['requests']} | {r['lost']} | {r['ttft_mean']:.0f} | "
              f"{r['ttft_p50']:.0f} | {r['hit_rate']:.1%} | {r['tok_s']:.0f} | "
              f"{'/'.join(map(str, r['per_replica']))} |")


if __name__ == "__main__":
    main()
