"""Through `thinkgate serve` (engine core in its own process): a grammar that compiles for half a
second does not stall another client's stream, and one past `--structured-outputs-compile-timeout`
gets a 400 naming its constraint while the server keeps serving (issue 31 item 4). The slow
compiles are xgrammar's: the server runs `--structured-outputs-backend xgrammar` (under `auto`,
llguidance compiles these schemas in milliseconds)."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import pytest
from thinkgate.benchmarks.bench_compile_stall import stream_gaps, synthetic_schema

MODEL = "thinkgate-demo"


def _json_chat(schema: dict[str, Any]) -> dict[str, Any]:
    return {"model": MODEL, "max_tokens": 16, "temperature": 0,
            "messages": [{"role": "user", "content": "hi"}],
            "chat_template_kwargs": {"enable_thinking": False},
            "response_format": {"type": "json_schema",
                                "json_schema": {"name": "slow", "schema": schema}}}


@pytest.fixture(scope="module")
def server(server_factory: Any) -> Any:
    return server_factory("--structured-outputs-compile-timeout", "2",
                          "--structured-outputs-backend", "xgrammar")


def test_slow_compile_does_not_stall_another_stream(server: Any) -> None:
    gaps: list[float] = []
    reader = threading.Thread(target=stream_gaps, args=(server.url, MODEL, 600, gaps))
    reader.start()
    time.sleep(0.3)  # the stream is under way
    t = time.monotonic()
    # 150 properties: ~0.5 s of xgrammar quiet, twice the gap bound (a compile on the loop
    # fails the test), and inside the 2 s limit with the machine loaded 4x (300 were not)
    r = httpx.post(f"{server.url}/chat/completions", json=_json_chat(synthetic_schema(1, 150)),
                   timeout=60)
    took = time.monotonic() - t
    reader.join(timeout=60)
    if r.status_code == 200:
        assert r.json()["choices"][0]["message"]["content"].startswith("{")
    else:  # a machine loaded many times over: the compile ran past the 2 s limit, off the loop
        assert r.status_code == 400 and "did not compile within 2 s" in r.text, r.text
    assert gaps and len(gaps) > 100
    assert max(gaps) < max(0.25, took / 4), (max(gaps), took)


def test_compile_past_the_timeout_is_a_400_for_that_request_only(server: Any) -> None:
    r = httpx.post(f"{server.url}/chat/completions", json=_json_chat(synthetic_schema(2, 700)),
                   timeout=60)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert "did not compile within 2 s" in error["message"]
    assert error["param"] == "response_format"
    ok = httpx.post(f"{server.url}/chat/completions", timeout=60, json={
        "model": MODEL, "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]})
    assert ok.status_code == 200
