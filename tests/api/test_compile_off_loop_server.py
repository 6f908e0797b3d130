"""Through `thinkgate serve` (engine core in its own process): a grammar that compiles for a
second does not stall another client's stream, and one past `--structured-outputs-compile-timeout`
gets a 400 naming its constraint while the server keeps serving (issue 31 item 4)."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import pytest
from thinkgate.benchmarks.bench_server import request_body

MODEL = "thinkgate-demo"


def slow_schema(salt: int, num_props: int) -> dict[str, Any]:
    props = {f"field_{salt}_{i}": {"type": "string",
                                   "pattern": f"^[a-z]{{{i % 7 + 1},{i % 7 + 9}}}-[0-9]{{{i % 5 + 1}}}$"}
             for i in range(num_props)}
    return {"type": "object", "properties": props, "required": list(props)[:2]}


def _json_chat(schema: dict[str, Any]) -> dict[str, Any]:
    return {"model": MODEL, "max_tokens": 16, "temperature": 0,
            "messages": [{"role": "user", "content": "hi"}],
            "chat_template_kwargs": {"enable_thinking": False},
            "response_format": {"type": "json_schema",
                                "json_schema": {"name": "slow", "schema": schema}}}


@pytest.fixture(scope="module")
def server(server_factory: Any) -> Any:
    return server_factory("--structured-outputs-compile-timeout", "2")


def test_slow_compile_does_not_stall_another_stream(server: Any) -> None:
    gaps: list[float] = []

    def stream() -> None:
        body = request_body(MODEL, "Tell me about honey bees.", 600, temperature=0)
        with httpx.Client(timeout=60) as c, c.stream("POST", f"{server.url}/chat/completions",
                                                     json=body) as r:
            last = None
            for line in r.iter_lines():
                now = time.monotonic()
                if line.startswith("data: ") and last is not None:
                    gaps.append(now - last)
                last = now

    reader = threading.Thread(target=stream)
    reader.start()
    time.sleep(0.3)  # the stream is under way
    t = time.monotonic()
    r = httpx.post(f"{server.url}/chat/completions", json=_json_chat(slow_schema(1, 300)),
                   timeout=60)
    took = time.monotonic() - t
    reader.join(timeout=60)
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"].startswith("{")
    assert gaps and len(gaps) > 100
    assert max(gaps) < 0.25, (max(gaps), took)


def test_compile_past_the_timeout_is_a_400_for_that_request_only(server: Any) -> None:
    r = httpx.post(f"{server.url}/chat/completions", json=_json_chat(slow_schema(2, 700)),
                   timeout=60)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert "did not compile within 2 s" in error["message"]
    assert error["param"] == "response_format"
    ok = httpx.post(f"{server.url}/chat/completions", timeout=60, json={
        "model": MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]})
    assert ok.status_code == 200
