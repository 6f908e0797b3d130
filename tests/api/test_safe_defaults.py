"""Safe by default (issue 34), on real `thinkgate serve` processes: CORS only for loopback
origins, loopback Host names only, bodies and prompts bounded before work is spent on them, and
every opt-out flag restoring the open behaviour."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

MODEL = "thinkgate-demo"
FOREIGN = "https://evil.example"
KEY = "sk-from-the-environment"


def _rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


class _Watch:
    """While a big request runs: /health and a small chat request from other clients, over and
    over (their latencies), and the server's resident memory (its peak)."""

    def __init__(self, server: Any) -> None:
        self.server, self.stop = server, threading.Event()
        self.health: list[float] = []
        self.chat: list[float] = []
        self.peak_rss = _rss_mib(server.proc.pid)
        self.threads = [threading.Thread(target=f, daemon=True)
                        for f in (self._poll_health, self._poll_chat, self._poll_rss)]

    def _poll_health(self) -> None:
        with httpx.Client(base_url=self.server.base, timeout=30) as c:
            while not self.stop.is_set():
                t = time.monotonic()
                assert c.get("/health").status_code == 200
                self.health.append(time.monotonic() - t)
                time.sleep(0.02)

    def _poll_chat(self) -> None:
        body = {"model": MODEL, "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}
        with httpx.Client(base_url=self.server.url, timeout=30) as c:
            while not self.stop.is_set():
                t = time.monotonic()
                assert c.post("/chat/completions", json=body).status_code == 200
                self.chat.append(time.monotonic() - t)
                time.sleep(0.02)

    def _poll_rss(self) -> None:
        while not self.stop.is_set():
            self.peak_rss = max(self.peak_rss, _rss_mib(self.server.proc.pid))
            time.sleep(0.01)

    def __enter__(self) -> _Watch:
        for t in self.threads:
            t.start()
        time.sleep(0.5)  # a few rounds before the big request
        return self

    def __exit__(self, *exc: Any) -> None:
        time.sleep(0.3)
        self.stop.set()
        for t in self.threads:
            t.join(timeout=30)


def _usual(server: Any) -> tuple[float, float]:
    """Median latency of /health and of the small chat request with nothing else running."""
    with _Watch(server) as w:
        time.sleep(1.0)
    return sorted(w.health)[len(w.health) // 2], sorted(w.chat)[len(w.chat) // 2]


def _post_raw(url: str, body: bytes | Iterator[bytes]) -> tuple[httpx.Response, float]:
    t = time.monotonic()
    r = httpx.post(url, content=body, headers={"content-type": "application/json"}, timeout=60)
    return r, time.monotonic() - t


@pytest.fixture(scope="module")
def usual(server: Any) -> tuple[float, float]:
    return _usual(server)


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
    body = json.dumps({"model": MODEL, "messages": [
        {"role": "user", "content": "word " * 20_000_000}]}).encode()  # 100 MB
    assert len(body) > 100_000_000
    before = _rss_mib(server.proc.pid)
    with _Watch(server) as w:
        r, took = _post_raw(f"{server.url}/chat/completions", body)
    assert r.status_code == 413, r.text[:300]
    assert r.json()["error"]["code"] == "request_too_large"
    assert took < 3.0, took
    assert max(w.health) < usual[0] + 0.1 + 0.2, (w.health, usual)  # + 0.2 s: CI's noise
    assert max(w.chat) < usual[1] + 0.1 + 0.2, (w.chat, usual)
    assert w.peak_rss - before < 200, (before, w.peak_rss)  # MiB; the body is never held whole


def test_chunked_body_over_the_limit_is_refused(server: Any) -> None:
    def chunks() -> Iterator[bytes]:
        for _ in range(40):
            yield b" " * (1 << 20)
    r, took = _post_raw(f"{server.url}/chat/completions", chunks())
    assert r.status_code == 413 and took < 3.0


@pytest.mark.parametrize("path,field", [
    ("/v1/chat/completions", "messages"), ("/v1/completions", "prompt"),
    ("/v1/responses", "input"), ("/v1/messages", "messages"), ("/tokenize", "prompt")])
def test_20_mb_prompt_gets_its_400_fast_and_others_are_served(server: Any, usual: Any,
                                                              path: str, field: str) -> None:
    text = "word " * 4_000_000  # 20 MB, under the 32 MiB body limit
    value: Any = text if field in ("prompt", "input") else [{"role": "user", "content": text}]
    body = json.dumps({"model": MODEL, field: value, "max_tokens": 8}).encode()
    before = _rss_mib(server.proc.pid)
    with _Watch(server) as w:
        r, took = _post_raw(server.base + path, body)
    assert r.status_code == 400, r.text[:300]
    assert "maximum context length" in r.text
    assert took < 5.0, took
    assert max(w.health) < usual[0] + 0.5, (w.health, usual)
    assert w.peak_rss - before < 600, (before, w.peak_rss)  # MiB


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
