"""Online latency while batch work runs: /v1/batches (behind online traffic) vs the same lines sent
as plain concurrent requests.

Starts `thinkgate serve` (the demo model, `--max-num-seqs` small so that the batch saturates the
engine) and, for each scenario, times `--probes` online chat requests sent one after another:
  idle   nothing else runs;
  batch  an online batch of `--lines` requests runs (cancelled once the probes are done);
  flood  the same `--lines` requests are sent at once as ordinary online requests.
Scenarios alternate for `--repeats` rounds; the table gives the probes' latency (wall clock:
latency is what a user waits): median, mean, max, and the first probe's, which arrives while the
background work saturates the engine; plus the batch lines finished per second meanwhile.

    python -m thinkgate.benchmarks.bench_batch_priority [--lines 32] [--probes 5] [--repeats 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from thinkgate.benchmarks.bench_server import free_port, launch, stop, thinkgate_command

MODEL = "thinkgate-demo"


def chat_body(content: str, max_tokens: int) -> dict[str, Any]:
    return {"model": MODEL, "max_tokens": max_tokens, "temperature": 0,
            "ignore_eos": True, "messages": [{"role": "user", "content": content}]}


async def probe(client: httpx.AsyncClient, n: int, max_tokens: int) -> list[float]:
    """`n` online requests one after another: their latencies in ms."""
    latencies = []
    for i in range(n):
        start = time.perf_counter()
        r = await client.post("/v1/chat/completions",
                              json=chat_body(f"Probe {i}: what time is it?", max_tokens))
        r.raise_for_status()
        latencies.append((time.perf_counter() - start) * 1e3)
    return latencies


async def start_batch(client: httpx.AsyncClient, lines: int, max_tokens: int) -> str:
    rows = [{"custom_id": f"l{i}", "method": "POST", "url": "/v1/chat/completions",
             "body": chat_body(f"Tell me about city {i}.", max_tokens)} for i in range(lines)]
    data = "".join(json.dumps(r) + "\n" for r in rows).encode()
    file = (await client.post("/v1/files", data={"purpose": "batch"},
                              files={"file": ("b.jsonl", data)})).json()
    batch = (await client.post("/v1/batches", json={
        "input_file_id": file["id"], "endpoint": "/v1/chat/completions",
        "completion_window": "24h"})).json()
    while batch["request_counts"]["total"] == 0:  # wait until it runs
        await asyncio.sleep(0.05)
        batch = (await client.get(f"/v1/batches/{batch['id']}")).json()
    return batch["id"]


async def scenario(client: httpx.AsyncClient, kind: str, args: argparse.Namespace) -> dict:
    background: Any = None
    if kind == "batch":
        batch_id = await start_batch(client, args.lines, args.line_tokens)
        await asyncio.sleep(args.settle)
    elif kind == "flood":
        background = asyncio.gather(*(
            client.post("/v1/chat/completions", json=chat_body(f"Tell me about city {i}.",
                                                               args.line_tokens))
            for i in range(args.lines)))
        await asyncio.sleep(args.settle)
    start = time.perf_counter()
    latencies = await probe(client, args.probes, args.probe_tokens)
    elapsed = time.perf_counter() - start
    done = None
    if kind == "batch":
        batch = (await client.post(f"/v1/batches/{batch_id}/cancel")).json()
        counts = batch["request_counts"]
        done = counts["completed"] + counts["failed"]
        while batch["status"] != "cancelled":
            await asyncio.sleep(0.05)
            batch = (await client.get(f"/v1/batches/{batch_id}")).json()
    elif kind == "flood":
        await background
    return {"scenario": kind, "latencies": latencies, "elapsed_s": elapsed, "lines_done": done}


async def run(base: str, args: argparse.Namespace) -> list[dict]:
    rows = []
    async with httpx.AsyncClient(base_url=base, timeout=600) as client:
        await probe(client, 2, args.probe_tokens)  # warm-up
        for _ in range(args.repeats):
            for kind in ("idle", "batch", "flood"):
                rows.append(await scenario(client, kind, args))
    return rows


def table(rows: list[dict]) -> list[dict]:
    """Per scenario: the probes' median, mean and max latency, and the first probe's (it arrives
    while the background work saturates the engine) as the median over the rounds."""
    out = []
    idle = statistics.mean(x for r in rows if r["scenario"] == "idle" for x in r["latencies"])
    for kind in ("idle", "batch", "flood"):
        mine = [r for r in rows if r["scenario"] == kind]
        lat = [x for r in mine for x in r["latencies"]]
        rate = None
        if kind == "batch":
            rate = round(sum(r["lines_done"] for r in mine) / sum(r["elapsed_s"] for r in mine), 2)
        out.append({"scenario": kind, "probes": len(lat),
                    "latency_ms_median": round(statistics.median(lat)),
                    "latency_ms_mean": round(statistics.mean(lat)),
                    "first_ms_median": round(statistics.median(r["latencies"][0] for r in mine)),
                    "latency_ms_max": round(max(lat)),
                    "mean_vs_idle": round(statistics.mean(lat) / idle, 2),
                    "batch_lines_per_s": rate})
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=32, help="batch lines (and flood requests)")
    ap.add_argument("--line-tokens", type=int, default=64, help="max_tokens of each line")
    ap.add_argument("--probes", type=int, default=5, help="online requests timed per scenario")
    ap.add_argument("--probe-tokens", type=int, default=16)
    ap.add_argument("--max-num-seqs", type=int, default=8)
    ap.add_argument("--settle", type=float, default=1.0,
                    help="seconds the background work runs before the probes start")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--json", default=None, help="write the rows here")
    args = ap.parse_args(argv)
    port = free_port()
    with tempfile.TemporaryDirectory() as batch_dir:
        cmd = [*thinkgate_command(), "serve", "--port", str(port), "--batch-dir", batch_dir,
               "--max-num-seqs", str(args.max_num_seqs)]
        proc = launch(cmd, port)
        try:
            rows = asyncio.run(run(f"http://127.0.0.1:{port}", args))
        finally:
            stop(proc)
    summary = table(rows)
    print(f"online probe latency ({args.probes} x {args.probe_tokens} tokens, sequential) while "
          f"{args.lines} lines x {args.line_tokens} tokens run; max_num_seqs "
          f"{args.max_num_seqs}; {platform.node()}")
    print(f"{'scenario':<8} {'probes':>6} {'median ms':>10} {'mean ms':>8} {'first ms':>9} "
          f"{'max ms':>8} {'mean/idle':>9} {'batch lines/s':>14}")
    for r in summary:
        rate = "" if r["batch_lines_per_s"] is None else f"{r['batch_lines_per_s']:.2f}"
        print(f"{r['scenario']:<8} {r['probes']:>6} {r['latency_ms_median']:>10} "
              f"{r['latency_ms_mean']:>8} {r['first_ms_median']:>9} {r['latency_ms_max']:>8} "
              f"{r['mean_vs_idle']:>9.2f} {rate:>14}")
    if args.json:
        Path(args.json).write_text(json.dumps({"summary": summary, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
