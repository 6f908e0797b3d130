"""Safe by default (issue 34), on real `thinkgate serve` processes: CORS only for loopback
origins, loopback Host names only, bodies and prompts bounded before work is spent on them, and
every opt-out flag restoring the open behaviour."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from thinkgate.benchmarks.bench_big_requests import (
    WORDS_20MB,
    WORDS_100MB,
    LoadWatch,
    post_raw,
    prompt_body,
    usual_latency,
)

MODEL = "thinkgate-demo"
FOREIGN = "https://evil.example"
KEY = "sk-from-the-environment"


@pytest.fixture(scope="module")
def usual(server: Any) -> tuple[float, float]:
    return usual_latency(server.base)


def test_foreign_origin_gets_no_cors_grant_on_any_route(server: Any) -> None:
    for method, path in [("GET", "/v1/files"), ("GET", "/v1/models"), ("GET", "/health"),
                         ("POST", "/v1/chat/completions"), ("GET", "/")]:
        r = httpx.request(method, server.base + path, headers={"Origin": FOREIGN}, json={})
        assert r.status_code == 403, (path, r.status_code)
        assert "access-control-allow-origin" not in r.headers
        assert r.json()["error"]["code"] == "origin_not_allowed" and FOREIGN in r.text
    pre = {"Origin": FOREIGN, "Access-Control-Request-Method": "POST",
           "Access-Control-Request-Headers": "content-type,authorization"}
    r = httpx.options(f"{server.url}/chat/completions", headers=pre)
    assert r.status_code == 403 and "access-control-allow-origin" not in r.headers
    r = httpx.post(f"{server.base}/v1/messages", headers={"Origin": "null"}, json={})
    assert r.status_code == 403 and r.json()["type"] == "error"  # Anthropic's shape there


@pytest.mark.parametrize("origin", ["http://localhost:3000", "http://127.0.0.1:5173",
                                    "http://[::1]:8080", "http://localhost"])
def test_loopback_origins_get_a_cors_grant(server: Any, origin: str) -> None:
    pre = {"Origin": origin, "Access-Control-Request-Method": "POST",
           "Access-Control-Request-Headers": "content-type"}
    r = httpx.options(f"{server.url}/chat/completions", headers=pre)
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == origin
    r = httpx.get(f"{server.url}/models", headers={"Origin": origin})
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == origin


def test_the_servers_own_origin_is_served(server: Any) -> None:
    """The playground's own fetches carry `Origin: http://127.0.0.1:PORT`."""
    r = httpx.post(f"{server.url}/chat/completions", headers={"Origin": server.base},
                   json={"model": MODEL, "max_tokens": 2,
                         "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 200, r.text


def test_foreign_host_is_refused(server: Any) -> None:
    for host in ["evil.example", f"evil.example:{server.port}", "127.0.0.1.evil.example"]:
        r = httpx.get(f"{server.url}/models", headers={"Host": host})
        assert r.status_code == 400, host
        assert r.json()["error"]["code"] == "host_not_allowed" and host in r.text
    for host in [f"localhost:{server.port}", f"[::1]:{server.port}", "127.0.0.1",
                 f"app.localhost:{server.port}"]:
        assert httpx.get(f"{server.url}/models", headers={"Host": host}).status_code == 200


def test_100_mb_body_is_refused_fast_while_others_are_served(server: Any, usual: Any) -> None:
    body = prompt_body("/v1/chat/completions", WORDS_100MB)
    assert len(body) > 100_000_000
    with LoadWatch(server.base, server.proc.pid) as w:
        r, took = post_raw(f"{server.url}/chat/completions", body)
    assert r.status_code == 413, r.text[:300]
    assert r.json()["error"]["code"] == "request_too_large"
    assert took < 3.0, took
    assert not w.errors, w.errors
    assert max(w.health) < usual[0] + 0.1 + 0.2, (w.health, usual)  # + 0.2 s: CI's noise
    # every chat but one within the bound, that one within a second: a stalled server fails
    # both; one 0.5 s hiccup of the shared 2-core machine (seen once in four full runs) does not
    chat = sorted(w.chat)
    assert len(chat) >= 2 and chat[-2] < usual[1] + 0.1 + 0.2, (w.chat, usual)
    assert chat[-1] < usual[1] + 1.0, (w.chat, usual)
    assert w.rss_growth < 200, w.rss_growth  # MiB; the body is never held whole


def test_chunked_body_over_the_limit_is_refused(server: Any) -> None:
    def chunks() -> Iterator[bytes]:
        for _ in range(40):
            yield b" " * (1 << 20)
    r, took = post_raw(f"{server.url}/chat/completions", chunks())
    assert r.status_code == 413 and took < 3.0


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions", "/v1/responses",
                                  "/v1/messages", "/tokenize"])
def test_20_mb_prompt_gets_its_400_fast_and_others_are_served(server: Any, usual: Any,
                                                              path: str) -> None:
    body = prompt_body(path, WORDS_20MB)  # 20 MB, under the 32 MiB body limit
    with LoadWatch(server.base, server.proc.pid) as w:
        r, took = post_raw(server.base + path, body)
    assert r.status_code == 400, r.text[:300]
    assert "maximum context length" in r.text
    assert took < 5.0, took
    assert not w.errors, w.errors
    assert max(w.health) < usual[0] + 0.5, (w.health, usual)
    assert max(w.chat) < usual[1] + 0.5, (w.chat, usual)
    assert w.rss_growth < 600, w.rss_growth  # MiB


def test_a_prompt_just_over_the_context_is_still_exact(server: Any) -> None:
    """Over the context by a little: the exact count of the usual context-length error."""
    client = openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0)
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model=MODEL, prompt="word " * 3000, max_tokens=8)
    assert info.value.code == "context_length_exceeded"
    assert "However, you requested" in info.value.message


@pytest.fixture(scope="module")
def open_server(server_factory: Any) -> Any:
    """Every opt-out at once, and small body limits (the upload's larger than the rest)."""
    return server_factory("--allowed-origins", '["*"]', "--allowed-hosts", '["*"]',
                          "--max-request-bytes", "4096", "--max-upload-bytes", "65536")


def test_opt_outs_restore_the_open_behaviour(open_server: Any) -> None:
    r = httpx.get(f"{open_server.url}/files", headers={"Origin": FOREIGN})
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "*"
    pre = {"Origin": FOREIGN, "Access-Control-Request-Method": "POST"}
    r = httpx.options(f"{open_server.url}/chat/completions", headers=pre)
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == "*"
    assert httpx.get(f"{open_server.url}/models",
                     headers={"Host": "evil.example"}).status_code == 200
    assert "allows any origin and no --api-key is set" in open_server.log()


def test_upload_limit_is_its_own(open_server: Any) -> None:
    client = openai.OpenAI(base_url=open_server.url, api_key="unused", max_retries=0)
    line = json.dumps({"custom_id": "a", "method": "POST", "url": "/v1/completions",
                       "body": {"model": MODEL, "prompt": "x" * 200, "max_tokens": 1}})
    small = client.files.create(file=("in.jsonl", (line + "\n").encode() * 40), purpose="batch")
    assert small.bytes > 4096  # over --max-request-bytes, under --max-upload-bytes
    with pytest.raises(openai.APIStatusError) as info:
        client.files.create(file=("in.jsonl", (line + "\n").encode() * 400), purpose="batch")
    assert info.value.status_code == 413
    r = httpx.post(f"{open_server.url}/completions",
                   json={"model": MODEL, "prompt": "x" * 5000, "max_tokens": 1})
    assert r.status_code == 413 and "--max-request-bytes" in r.text


def test_api_key_from_the_environment(server_factory: Any) -> None:
    keyed = server_factory(env={"THINKGATE_API_KEY": KEY})
    assert httpx.get(f"{keyed.url}/models").status_code == 401
    assert httpx.get(f"{keyed.url}/models", headers={"Authorization": f"Bearer {KEY}x"}
                     ).status_code == 401
    client = openai.OpenAI(base_url=keyed.url, api_key=KEY, max_retries=0)
    assert client.models.list().data[0].id == MODEL
    with open(f"/proc/{keyed.proc.pid}/cmdline", "rb") as f:
        assert KEY.encode() not in f.read()  # the key stays out of the process list
