"""Server benchmark: N concurrent streaming chat clients against `thinkgate serve`.

For each concurrency (default 1, 8, 32) every client sends `--requests` streaming chat requests
back to back (fixed length: `max_tokens` with `ignore_eos`). Reports output tokens/s over the
whole wave, time to first token and inter-token latency (median and p99, over all requests).
Starts its own server on a free port (the demo model) unless `--url` points at one.

    python -m thinkgate.benchmarks.bench_server [--concurrency 1 8 32] [--max-tokens 64]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

PROMPTS = ["What's the weather in Paris?", "Tell me about honey bees.",
           "Convert 10 USD to EUR.", "What time is it in Tokyo?"]


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[k]


async def one_request(client: httpx.AsyncClient, model: str, prompt: str,
                      max_tokens: int) -> dict[str, Any]:
    body = {"model": model, "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens, "ignore_eos": True, "temperature": 1.0, "stream": True,
            "stream_options": {"include_usage": True}}
    start = time.perf_counter()
    arrivals: list[float] = []
    tokens = 0
    async with client.stream("POST", "/v1/chat/completions", json=body) as r:
        r.raise_for_status()
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
            for choice in chunk.get("choices", []):
                delta = choice.get("delta", {})
                if delta.get("content") or delta.get("reasoning") or delta.get("tool_calls"):
                    arrivals.append(time.perf_counter())
    ttft = arrivals[0] - start if arrivals else float("nan")
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:])]
    return {"ttft": ttft, "gaps": gaps, "tokens": tokens}


async def wave(base: str, model: str, concurrency: int, requests: int,
               max_tokens: int) -> dict[str, Any]:
    limits = httpx.Limits(max_connections=concurrency + 4)
    async with httpx.AsyncClient(base_url=base, timeout=600, limits=limits) as client:
        async def client_loop(c: int) -> list[dict[str, Any]]:
            return [await one_request(client, model, PROMPTS[(c + i) % len(PROMPTS)], max_tokens)
                    for i in range(requests)]

        await one_request(client, model, PROMPTS[0], 4)  # warm-up
        start = time.perf_counter()
        results = await asyncio.gather(*(client_loop(c) for c in range(concurrency)))
        wall = time.perf_counter() - start
    flat = [r for per_client in results for r in per_client]
    ttfts = [r["ttft"] * 1e3 for r in flat]
    gaps = [g * 1e3 for r in flat for g in r["gaps"]]
    tokens = sum(r["tokens"] for r in flat)
    return {"concurrency": concurrency, "requests": len(flat), "output_tokens": tokens,
            "wall_s": round(wall, 3), "output_tok_s": round(tokens / wall, 1),
            "ttft_ms_median": round(statistics.median(ttfts), 1),
            "ttft_ms_p99": round(percentile(ttfts, 99), 1),
            "itl_ms_median": round(statistics.median(gaps), 2) if gaps else float("nan"),
            "itl_ms_p99": round(percentile(gaps, 99), 2)}


def start_server(model: str | None) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    script = Path(sys.executable).parent / "thinkgate"
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "thinkgate.api.cli"]
    cmd += ["serve", *([model] if model else []), "--host", "127.0.0.1", "--port", str(port)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, env={**os.environ})
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("thinkgate serve exited during startup")
        try:
            if httpx.get(f"{base}/health", timeout=1).status_code == 200:
                return proc, base
        except httpx.HTTPError:
            time.sleep(0.25)
    proc.kill()
    raise RuntimeError("thinkgate serve did not start")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", default=None, help="server base URL (default: start one)")
    ap.add_argument("--model", default=None, help="model folder when starting a server")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--requests", type=int, default=2, help="requests per client")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--json", default=None, help="write the rows here")
    args = ap.parse_args(argv)
    proc = None
    base = args.url.rstrip("/").removesuffix("/v1") if args.url else None
    if base is None:
        proc, base = start_server(args.model)
    try:
        model = httpx.get(f"{base}/v1/models", timeout=10).json()["data"][0]["id"]
        rows = [asyncio.run(wave(base, model, c, args.requests, args.max_tokens))
                for c in args.concurrency]
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
    print(f"# bench_server: {model}, max_tokens {args.max_tokens}, {args.requests} requests per "
          f"client, {platform.machine()} {os.cpu_count()} CPUs")
    cols = list(rows[0])
    print(" | ".join(cols))
    print(" | ".join("---" for _ in cols))
    for row in rows:
        print(" | ".join(str(row[c]) for c in cols))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
