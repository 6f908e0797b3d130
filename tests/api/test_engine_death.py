"""A real `thinkgate serve` whose engine core process is killed mid-stream: the open stream ends
with an error event, /health answers 503, new requests get 503 with OpenAI's error shape."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import httpx

MODEL = "thinkgate-demo"


def engine_core_pid(server_pid: int) -> int:
    """The server's child that runs `multiprocessing.spawn` (not its resource tracker)."""
    children = []
    for task in Path(f"/proc/{server_pid}/task").iterdir():
        children += (task / "children").read_text().split()
    for pid in children:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
        if b"spawn_main" in cmdline:
            return int(pid)
    raise AssertionError(f"no engine core process among {children}")


def test_killing_the_engine_core_is_reported(server_factory) -> None:
    srv = server_factory()
    core = engine_core_pid(srv.proc.pid)
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Tell me a long story."}],
            "max_tokens": 1800, "ignore_eos": True, "stream": True}
    events = []
    with httpx.Client(base_url=srv.base, timeout=30) as c:
        with c.stream("POST", "/v1/chat/completions", json=body) as r:
            assert r.status_code == 200
            for line in r.iter_lines():
                if not line.startswith("data: "):
                    continue
                events.append(line[6:])
                if len(events) == 3:
                    os.kill(core, signal.SIGKILL)
        assert events[-1] == "[DONE]"
        error = json.loads(events[-2])["error"]
        assert error["code"] == "engine_dead" and "exit code -9" in error["message"]
        assert c.get("/health").status_code == 503
        r = c.post("/v1/completions", json={"model": MODEL, "prompt": "hi", "max_tokens": 4})
        assert r.status_code == 503 and r.json()["error"]["type"] == "server_error"
        r = c.post("/v1/chat/completions", json={**body, "max_tokens": 4})
        assert r.status_code == 503 and r.json()["error"]["code"] == "engine_dead"
        assert c.get("/v1/models").status_code == 200  # the API process keeps answering
    assert srv.alive()
