"""--api-key, --max-concurrent-requests (429) and --allowed-origins on a live server."""

from __future__ import annotations

import time
from typing import Any

import anthropic
import httpx
import openai
import pytest

KEY = "sk-thinkgate-test"
ORIGIN = "http://app.example"
MODEL = "thinkgate-demo"


@pytest.fixture(scope="module")
def server(server_factory: Any) -> Any:
    return server_factory("--api-key", KEY, "--max-concurrent-requests", "1",
                          "--allowed-origins", f'["{ORIGIN}"]')


def test_api_key(server) -> None:
    assert httpx.get(f"{server.base}/health").status_code == 200
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        r = httpx.get(f"{server.url}/models", headers=headers)
        assert r.status_code == 401
        assert r.json()["error"]["code"] == "invalid_api_key"
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=server.url, api_key="wrong", max_retries=0).models.list()
    good = openai.OpenAI(base_url=server.url, api_key=KEY, max_retries=0)
    assert good.models.list().data[0].id == MODEL
    assert httpx.post(f"{server.base}/tokenize", json={"prompt": "hi"}).status_code == 401


def test_x_api_key(server) -> None:
    """Anthropic clients send `x-api-key`; /v1/messages answers 401 in Anthropic's shape."""
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
    count = f"{server.base}/v1/messages/count_tokens"
    for headers in ({}, {"x-api-key": "wrong"}, {"Authorization": f"Bearer {KEY}x"}):
        r = httpx.post(count, json=body, headers=headers)
        assert r.status_code == 401
        assert r.json() == {"type": "error", "error": {"type": "authentication_error",
                                                       "message": "invalid x-api-key"}}
    assert httpx.post(count, json=body, headers={"x-api-key": KEY}).json()["input_tokens"] > 0
    assert httpx.get(f"{server.url}/models", headers={"x-api-key": KEY}).status_code == 200
    with pytest.raises(anthropic.AuthenticationError):
        anthropic.Anthropic(base_url=server.base, api_key="wrong", max_retries=0
                            ).messages.count_tokens(**body)
    for client in (anthropic.Anthropic(base_url=server.base, api_key=KEY, max_retries=0),
                   anthropic.Anthropic(base_url=server.base, api_key=None, max_retries=0,
                                       default_headers={"x-api-key": KEY})):
        out = client.messages.create(**body, max_tokens=4)
        assert out.usage.output_tokens > 0


def test_queue_full_is_429(server) -> None:
    headers = {"Authorization": f"Bearer {KEY}"}
    body = {"model": MODEL, "prompt": "x", "max_tokens": 1500, "ignore_eos": True,
            "stream": True}
    client = openai.OpenAI(base_url=server.url, api_key=KEY, max_retries=0)
    with httpx.Client(base_url=server.base, headers=headers, timeout=60) as c:
        with c.stream("POST", "/v1/completions", json=body) as r:
            assert r.status_code == 200
            lines = r.iter_lines()  # keep a reference: a collected iterator closes the stream
            assert next(lines).startswith("data: ")
            with pytest.raises(openai.RateLimitError) as info:
                client.completions.create(model=MODEL, prompt="y", max_tokens=2)
            assert info.value.body["type"] == "rate_limit_error"
    deadline = time.monotonic() + 20
    while True:  # the disconnected stream frees its slot
        try:
            out = client.completions.create(model=MODEL, prompt="y", max_tokens=2)
            break
        except openai.RateLimitError:
            assert time.monotonic() < deadline
            time.sleep(0.1)
    assert out.choices


def test_cors(server) -> None:
    pre = {"Origin": ORIGIN, "Access-Control-Request-Method": "POST",
           "Access-Control-Request-Headers": "authorization,content-type"}
    r = httpx.options(f"{server.url}/chat/completions", headers=pre)
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == ORIGIN
    other = httpx.options(f"{server.url}/chat/completions",
                          headers={**pre, "Origin": "http://evil.example"})
    assert other.headers.get("access-control-allow-origin") != "http://evil.example"
    r = httpx.get(f"{server.url}/models", headers={"Origin": ORIGIN,
                                                   "Authorization": f"Bearer {KEY}"})
    assert r.headers["access-control-allow-origin"] == ORIGIN
