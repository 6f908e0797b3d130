"""Big requests against a live server: how fast each is refused, what it costs everyone else.

While one client sends a big request (a 100 MB chat body over the body limit, or a 20 MB prompt
under it on each text route), two other clients keep asking: `/health`, and a small chat request
(2 tokens). The table gives the big request's status and time, the others' median and largest
latency during it (against their medians with nothing else running), and the server process's
resident-memory growth (its peak over the start, MiB). Starts `thinkgate serve` (the demo model,
eager) on a free port unless `--base-url` names a running server (`--pid` its process, for the
memory column).

    python -m thinkgate.benchmarks.bench_big_requests [--base-url URL --pid PID]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx

MODEL = "thinkgate-demo"
WORDS_100MB = 20_000_000  # "word " * this: 100 MB
WORDS_20MB = 4_000_000


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


class LoadWatch:
    """While a big request runs: /health and a small chat request from two other clients, over
    and over (`health`, `chat`: their latencies in s), and the server's resident memory
    (`peak_rss`, MiB; `pid` None skips it)."""

    def __init__(self, base: str, pid: int | None, model: str = MODEL) -> None:
        self.base, self.pid, self.model = base, pid, model
        self.stop = threading.Event()
        self.health: list[float] = []
        self.chat: list[float] = []
        self.errors: list[str] = []
        self.start_rss = self.peak_rss = rss_mib(pid) if pid else 0.0
        self.threads = [threading.Thread(target=f, daemon=True)
                        for f in (self._poll_health, self._poll_chat, self._poll_rss)]

    def _poll(self, send: Any, out: list[float]) -> None:
        with httpx.Client(base_url=self.base, timeout=30) as client:
            while not self.stop.is_set():
                t = time.monotonic()
                r = send(client)
                out.append(time.monotonic() - t)
                if r.status_code != 200:
                    self.errors.append(f"{r.request.url.path}: {r.status_code}")
                time.sleep(0.02)

    def _poll_health(self) -> None:
        self._poll(lambda c: c.get("/health"), self.health)

    def _poll_chat(self) -> None:
        body = {"model": self.model, "max_tokens": 2,
                "messages": [{"role": "user", "content": "hi"}]}
        self._poll(lambda c: c.post("/v1/chat/completions", json=body), self.chat)

    def _poll_rss(self) -> None:
        while self.pid and not self.stop.is_set():
            self.peak_rss = max(self.peak_rss, rss_mib(self.pid))
            time.sleep(0.01)

    @property
    def rss_growth(self) -> float:
        return self.peak_rss - self.start_rss

    def __enter__(self) -> LoadWatch:
        for t in self.threads:
            t.start()
        time.sleep(0.5)  # a few rounds before the big request
        return self

    def __exit__(self, *exc: Any) -> None:
        time.sleep(0.3)
        self.stop.set()
        for t in self.threads:
            t.join(timeout=30)


def usual_latency(base: str, model: str = MODEL) -> tuple[float, float]:
    """Median latency of /health and of the small chat request with nothing big running."""
    with LoadWatch(base, None, model) as w:
        time.sleep(1.0)
    return statistics.median(w.health), statistics.median(w.chat)


def post_raw(url: str, body: bytes | Iterator[bytes]) -> tuple[httpx.Response, float]:
    t = time.monotonic()
    r = httpx.post(url, content=body, headers={"content-type": "application/json"}, timeout=60)
    return r, time.monotonic() - t


def prompt_body(path: str, words: int, model: str = MODEL) -> bytes:
    """A request to `path` whose prompt is `words` times "word "."""
    text = "word " * words
    if path in ("/v1/chat/completions", "/v1/messages"):
        body: dict[str, Any] = {"messages": [{"role": "user", "content": text}], "max_tokens": 8}
    elif path == "/v1/responses":
        body = {"input": text, "max_output_tokens": 8}
    elif path == "/v1/completions":
        body = {"prompt": text, "max_tokens": 8}
    else:
        body = {"prompt": text}
    return json.dumps({"model": model, **body}).encode()


CASES = [("100 MB chat body", "/v1/chat/completions", WORDS_100MB)] + [
    (f"20 MB prompt {path}", path, WORDS_20MB)
    for path in ("/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/messages",
                 "/tokenize")]


def run(base: str, pid: int | None) -> list[dict[str, Any]]:
    health0, chat0 = usual_latency(base)
    rows = [{"case": "nothing big (usual)", "status": "", "seconds": 0.0,
             "health_p50_ms": health0 * 1e3, "health_max_ms": health0 * 1e3,
             "chat_p50_ms": chat0 * 1e3, "chat_max_ms": chat0 * 1e3, "rss_growth_mib": 0.0}]
    for name, path, words in CASES:
        body = prompt_body(path, words)
        with LoadWatch(base, pid) as w:
            r, took = post_raw(base + path, body)
        del body
        rows.append({"case": name, "status": r.status_code, "seconds": took,
                     "health_p50_ms": statistics.median(w.health) * 1e3,
                     "health_max_ms": max(w.health) * 1e3,
                     "chat_p50_ms": statistics.median(w.chat) * 1e3,
                     "chat_max_ms": max(w.chat) * 1e3, "rss_growth_mib": w.rss_growth})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base-url", default=None, help="a running server (default: start one)")
    ap.add_argument("--pid", type=int, default=None, help="its process id (memory column)")
    ap.add_argument("--json", default=None, help="also write the rows here")
    args = ap.parse_args()
    proc = None
    if args.base_url is None:
        from thinkgate.benchmarks.bench_server import free_port, launch, stop, thinkgate_command

        port = free_port()
        log = open(os.path.join(tempfile.mkdtemp(prefix="bench_big_"), "serve.log"), "w")
        proc = launch([*thinkgate_command(), "serve", "--port", str(port), "--enforce-eager"],
                      port, log)
        base, pid = f"http://127.0.0.1:{port}", proc.pid
    else:
        base, pid = args.base_url.rstrip("/"), args.pid
    try:
        rows = run(base, pid)
    finally:
        if proc is not None:
            stop(proc)
    print("| request | status | s | /health p50 / max ms | small chat p50 / max ms | "
          "server RSS growth MiB |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['case']} | {r['status']} | {r['seconds']:.2f} | {r['health_p50_ms']:.0f} / "
              f"{r['health_max_ms']:.0f} | {r['chat_p50_ms']:.0f} / {r['chat_max_ms']:.0f} | "
              f"{r['rss_growth_mib']:.0f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
