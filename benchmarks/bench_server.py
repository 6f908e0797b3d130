"""Server benchmark: concurrent streaming chat clients against any OpenAI-compatible server.

For each concurrency level (default 1, 8, 32) that many clients send streaming
`/v1/chat/completions` requests back to back, fixed length (`max_tokens` with `ignore_eos`),
either `--requests` per client or `--num-prompts` in all per level. Reports output tokens/s over
the whole wave, time to first token and inter-token latency (median and p99, over all requests).
Starts `thinkgate serve` on a free port (the demo model, or the folder `--model`) unless
`--base-url` points at a running server (thinkgate, vLLM, ...); `--model` then names the model
to ask for (default: the first one `/v1/models` lists).

    python -m thinkgate.benchmarks.bench_server [--concurrency 1 8 32] [--max-tokens 64]
    python -m thinkgate.benchmarks.bench_server --base-url http://127.0.0.1:8000 --model NAME \\
        --num-prompts 32 --temperature 0 [--json-schema schema.json]
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
from typing import Any, TextIO

import httpx

PROMPTS = ["What's the weather in Paris?", "Tell me about honey bees.",
           "Convert 10 USD to EUR.", "What time is it in Tokyo?"]
TEXT_FIELDS = ("content", "reasoning", "reasoning_content", "tool_calls")


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    k = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[k]


def request_body(model: str, prompt: str, max_tokens: int, temperature: float = 1.0,
                 json_schema: dict | None = None,
                 chat_template_kwargs: dict | None = None) -> dict[str, Any]:
    """One streaming chat request of exactly `max_tokens` tokens (EOS ignored)."""
    body: dict[str, Any] = {
        "model": model, "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens, "ignore_eos": True, "temperature": temperature,
        "stream": True, "stream_options": {"include_usage": True}}
    if json_schema is not None:
        body["response_format"] = {"type": "json_schema",
                                   "json_schema": {"name": "bench", "schema": json_schema}}
    if chat_template_kwargs:
        body["chat_template_kwargs"] = chat_template_kwargs
    return body


async def one_request(client: httpx.AsyncClient, body: dict[str, Any]) -> dict[str, Any]:
    start = time.perf_counter()
    arrivals: list[float] = []
    tokens = None
    async with client.stream("POST", "/v1/chat/completions", json=body) as r:
        if r.status_code != 200:
            raise RuntimeError(f"HTTP {r.status_code}: {(await r.aread())[:500]!r}")
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if "error" in chunk:
                raise RuntimeError(f"error in stream: {chunk['error']}")
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
            for choice in chunk.get("choices", []):
                delta = choice.get("delta", {})
                if any(delta.get(field) for field in TEXT_FIELDS):
                    arrivals.append(time.perf_counter())
    ttft = arrivals[0] - start if arrivals else float("nan")
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:])]
    return {"ttft": ttft, "gaps": gaps, "tokens": len(arrivals) if tokens is None else tokens}


async def wave(base: str, model: str, concurrency: int, num_requests: int, max_tokens: int,
               temperature: float = 1.0, json_schema: dict | None = None,
               chat_template_kwargs: dict | None = None) -> dict[str, Any]:
    """`num_requests` requests over `concurrency` clients; one untimed warm-up request first."""
    def body(i: int, tokens: int) -> dict[str, Any]:
        return request_body(model, PROMPTS[i % len(PROMPTS)], tokens, temperature, json_schema,
                            chat_template_kwargs)

    limits = httpx.Limits(max_connections=concurrency + 4)
    async with httpx.AsyncClient(base_url=base, timeout=600, limits=limits) as client:
        await one_request(client, body(0, 4))
        queue = iter(range(num_requests))  # clients pull the next request index

        async def client_loop() -> list[dict[str, Any]]:
            return [await one_request(client, body(i, max_tokens)) for i in queue]

        start = time.perf_counter()
        results = await asyncio.gather(*(client_loop() for _ in range(concurrency)))
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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def thinkgate_command() -> list[str]:
    """`thinkgate` run by this interpreter (its console script when it sits beside it)."""
    script = Path(sys.executable).parent / "thinkgate"
    return [str(script)] if script.exists() else [sys.executable, "-m", "thinkgate.api.cli"]


def spawn(cmd: list[str], log: TextIO | int = subprocess.DEVNULL,
          env: dict[str, str] | None = None, cwd: str | Path | None = None) -> subprocess.Popen:
    """Start a server in a process group of its own (so `stop` reaches its engine processes)."""
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            env=env if env is not None else dict(os.environ), cwd=cwd)


def wait_ready(proc: subprocess.Popen, port: int, timeout: float = 180,
               poll: float = 0.5) -> None:
    """Wait until the server on `port` answers `/health` with 200 (raise if it exits first);
    `poll`: seconds between tries."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args[0]} exited during startup (code {proc.returncode})")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(poll)
    raise RuntimeError(f"{proc.args[0]} did not answer /health within {timeout:.0f} s")


def launch(cmd: list[str], port: int, log: TextIO | int = subprocess.DEVNULL,
           env: dict[str, str] | None = None, timeout: float = 180) -> subprocess.Popen:
    """`spawn` + `wait_ready`; the server is stopped again if it never gets ready."""
    proc = spawn(cmd, log, env)
    try:
        wait_ready(proc, port, timeout)
    except BaseException:
        stop(proc)
        raise
    return proc


def stop(proc: subprocess.Popen, grace: float = 15) -> None:
    """SIGINT to the server's whole process group (engine subprocesses too), then SIGKILL."""
    for sig, wait in ((signal.SIGINT, grace), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
        try:  # the leader is gone; its children may not be
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return


def _json_arg(text: str) -> dict:
    path = Path(text)
    return json.loads(path.read_text() if path.is_file() else text)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-url", "--url", dest="base_url", default=None,
                    help="server base URL (default: start `thinkgate serve`)")
    ap.add_argument("--model", default=None,
                    help="with --base-url: model name to request; else the folder to serve")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--requests", type=int, default=2, help="requests per client")
    ap.add_argument("--num-prompts", type=int, default=None,
                    help="requests per concurrency level in all (overrides --requests)")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--json-schema", type=_json_arg, default=None,
                    help="response_format json_schema: a JSON file or inline JSON")
    ap.add_argument("--chat-template-kwargs", type=_json_arg, default=None,
                    help='e.g. \'{"enable_thinking": false}\'')
    ap.add_argument("--json", default=None, help="write the rows here")
    args = ap.parse_args(argv)
    proc = None
    base = args.base_url.rstrip("/").removesuffix("/v1") if args.base_url else None
    model = args.model if base else None
    if base is None:
        port = free_port()
        cmd = thinkgate_command() + ["serve", *([args.model] if args.model else []),
                                     "--host", "127.0.0.1", "--port", str(port)]
        proc, base = launch(cmd, port), f"http://127.0.0.1:{port}"
    try:
        model = model or httpx.get(f"{base}/v1/models", timeout=10).json()["data"][0]["id"]
        rows = [asyncio.run(wave(base, model, c, args.num_prompts or c * args.requests,
                                 args.max_tokens, args.temperature, args.json_schema,
                                 args.chat_template_kwargs))
                for c in args.concurrency]
    finally:
        if proc is not None:
            stop(proc)
    schema = ", json_schema" if args.json_schema else ""
    print(f"# bench_server: {model} at {base}, max_tokens {args.max_tokens}, temperature "
          f"{args.temperature}{schema}, {platform.machine()} {os.cpu_count()} CPUs")
    cols = list(rows[0])
    print(" | ".join(cols))
    print(" | ".join("---" for _ in cols))
    for row in rows:
        print(" | ".join(str(row[c]) for c in cols))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
