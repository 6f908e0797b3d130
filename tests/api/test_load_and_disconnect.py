"""Many concurrent streaming clients, and a client that disconnects mid-stream."""

from __future__ import annotations

import asyncio
import json
import re
import time

import httpx

MODEL = "thinkgate-demo"


def _metric(http: httpx.Client, name: str) -> float:
    text = http.get("/metrics").text
    match = re.search(rf"^{name}(?:\{{[^}}]*\}})? (\S+)$", text, re.M)
    assert match, f"{name} not in /metrics"
    return float(match.group(1))


def test_32_concurrent_streaming_clients(server) -> None:
    from openai import AsyncOpenAI

    async def one(client: AsyncOpenAI, i: int) -> tuple[str, str | None, int]:
        stream = await client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": f"Question number {i}: hi"}],
            max_tokens=12, stream=True, stream_options={"include_usage": True})
        text, finish, usage = [], None, 0
        async for chunk in stream:
            if chunk.usage is not None:
                usage = chunk.usage.completion_tokens
            for c in chunk.choices:
                text.append(c.delta.content or getattr(c.delta, "reasoning", None) or "")
                finish = c.finish_reason or finish
        return "".join(text), finish, usage

    async def main() -> list[tuple[str, str | None, int]]:
        async with AsyncOpenAI(base_url=server.url, api_key="x", max_retries=0,
                               timeout=120) as client:
            return await asyncio.gather(*(one(client, i) for i in range(32)))

    results = asyncio.run(main())
    assert len(results) == 32
    assert all(finish in ("stop", "length", "tool_calls") for _, finish, _ in results)
    assert all(1 <= usage <= 12 for _, _, usage in results)


def test_disconnect_aborts_and_frees_blocks(server, http) -> None:
    before = _metric(http, "thinkgate_generation_tokens_total")
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Tell me a long story."}],
            "max_tokens": 1800, "ignore_eos": True, "stream": True}
    with httpx.Client(base_url=server.base, timeout=60) as c:
        with c.stream("POST", "/v1/chat/completions", json=body) as r:
            assert r.status_code == 200
            lines = r.iter_lines()
            received = [next(lines) for _ in range(6)]
            assert sum(line.startswith("data: ") for line in received) == 3
            assert _metric(http, "thinkgate_num_requests_running") == 1
            assert _metric(http, "thinkgate_kv_cache_usage_perc") > 0
        # leaving the block closes the connection mid-stream
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if (_metric(http, "thinkgate_num_requests_running") == 0
                and _metric(http, "thinkgate_kv_cache_usage_perc") == 0):
            break
        time.sleep(0.1)
    assert _metric(http, "thinkgate_num_requests_running") == 0
    assert _metric(http, "thinkgate_kv_cache_usage_perc") == 0
    time.sleep(0.5)
    generated = _metric(http, "thinkgate_generation_tokens_total") - before
    assert generated < 1800, "the request ran to the end instead of being aborted"
    r = http.post("/v1/chat/completions", json={**body, "stream": False, "max_tokens": 3})
    assert r.status_code == 200 and json.loads(r.text)["usage"]["completion_tokens"] == 3


def test_non_streaming_disconnect_aborts(server, http) -> None:
    before = _metric(http, "thinkgate_generation_tokens_total")
    body = {"model": MODEL, "prompt": "x", "max_tokens": 1800, "ignore_eos": True}
    try:
        httpx.post(f"{server.url}/completions", json=body, timeout=0.5)
    except httpx.ReadTimeout:
        pass
    deadline = time.monotonic() + 20  # the engine frees the blocks just after the server lets go
    while time.monotonic() < deadline and (
            _metric(http, "thinkgate_num_requests_running") > 0
            or _metric(http, "thinkgate_kv_cache_usage_perc") > 0):
        time.sleep(0.1)
    assert _metric(http, "thinkgate_num_requests_running") == 0
    assert _metric(http, "thinkgate_kv_cache_usage_perc") == 0
    assert _metric(http, "thinkgate_generation_tokens_total") - before < 1800
