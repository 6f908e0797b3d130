"""Does one slow grammar compile stall everyone else? (issue 31 item 4)

Starts `thinkgate serve MODEL` (eager), opens one long streaming chat (`--stream-tokens`, EOS
ignored), and once it is under way sends a `response_format` request whose JSON schema is slow
to compile (a MaskBench schema by id from the shared dev set, `best_effort` on). Prints the
stream's largest and p99 gap between chunks with and without that request in flight, and the
slow request's status and time.

    python -m thinkgate.benchmarks.bench_compile_stall --model /tmp/qwen3-vocab
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
from thinkgate.benchmarks.bench_server import (
    free_port,
    launch,
    percentile,
    request_body,
    stop,
    thinkgate_command,
)

DEV_SET = Path(__file__).resolve().parents[2] / "shared" / "data" / "maskbench_dev.jsonl.gz"


def load_schema(path: Path, schema_id: str) -> dict[str, Any]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            case = json.loads(line)
            if case["id"] == schema_id:
                return case["schema"]
    raise ValueError(f"no schema {schema_id!r} in {path}")


def synthetic_schema(salt: int, num_props: int) -> dict[str, Any]:
    """An object of many pattern-checked strings, slow to compile and needing no data file
    (about 1 s of xgrammar per 300 properties on the demo vocabulary); each `salt` is another
    schema, so nothing comes from a cache."""
    props = {f"field_{salt}_{i}": {"type": "string",
                                   "pattern": f"^[a-z]{{{i % 7 + 1},{i % 7 + 9}}}-[0-9]{{{i % 5 + 1}}}$"}
             for i in range(num_props)}
    return {"type": "object", "properties": props, "required": list(props)[:2]}


def stream_gaps(url: str, model: str, tokens: int, gaps: list[float]) -> None:
    body = request_body(model, "Tell me about honey bees.", tokens, temperature=0)
    # a chunk per token: with EOS ignored the demo model v5 writes end-of-turn ids, which carry
    # no text and so no chunk; min_tokens bans the stop ids instead, to the last token
    del body["ignore_eos"]
    body["min_tokens"] = tokens
    with httpx.Client(timeout=600) as c, c.stream("POST", f"{url}/chat/completions",
                                                  json=body) as r:
        last = None
        for line in r.iter_lines():
            now = time.monotonic()
            if line.startswith("data: ") and last is not None:
                gaps.append(now - last)
            last = now


def run(url: str, model: str, schema: dict[str, Any], tokens: int) -> dict[str, Any]:
    quiet: list[float] = []
    stream_gaps(url, model, tokens, quiet)
    busy: list[float] = []
    reader = threading.Thread(target=stream_gaps, args=(url, model, tokens, busy))
    reader.start()
    time.sleep(0.5)
    body = {"model": model, "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}],
            "chat_template_kwargs": {"enable_thinking": False},
            "structured_outputs": {"best_effort": True},
            "response_format": {"type": "json_schema",
                                "json_schema": {"name": "slow", "schema": schema}}}
    t = time.monotonic()
    r = httpx.post(f"{url}/chat/completions", json=body, timeout=600)
    took = time.monotonic() - t
    reader.join()
    return {"quiet_max_ms": max(quiet) * 1e3, "quiet_p99_ms": percentile(quiet, 99) * 1e3,
            "busy_max_ms": max(busy) * 1e3, "busy_p99_ms": percentile(busy, 99) * 1e3,
            "slow_status": r.status_code, "slow_s": took}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="HF folder (the Qwen-vocabulary one)")
    ap.add_argument("--data", type=Path, default=DEV_SET)
    ap.add_argument("--schema-id", default="Github_ultra---o21137.json")
    ap.add_argument("--stream-tokens", type=int, default=1500)
    ap.add_argument("--synthetic-props", type=int, default=None,
                    help="use a synthetic schema of this many pattern properties instead")
    ap.add_argument("--backends", nargs="+", default=["xgrammar", "auto"],
                    choices=["auto", "xgrammar", "guidance"],
                    help="one server per backend (--structured-outputs-backend), in turn")
    args = ap.parse_args()
    schema = (synthetic_schema(0, args.synthetic_props) if args.synthetic_props
              else load_schema(args.data, args.schema_id))
    print(f"# bench_compile_stall: {args.schema_id} (best_effort) during a {args.stream_tokens}-"
          f"token stream on {args.model}")
    print("| backend | stream alone: max / p99 gap ms | with the slow request: max / p99 gap ms "
          "| slow request: status, s |")
    print("|---|---|---|---|")
    for backend in args.backends:
        port = free_port()
        log = open(os.path.join(tempfile.mkdtemp(prefix="bench_stall_"), "serve.log"), "w")
        proc = launch([*thinkgate_command(), "serve", args.model, "--port", str(port),
                       "--enforce-eager", "--served-model-name", "m", "--reasoning-parser",
                       "qwen3", "--tool-call-parser", "hermes",
                       "--structured-outputs-backend", backend], port, log)
        try:
            row = run(f"http://127.0.0.1:{port}/v1", "m", schema, args.stream_tokens)
        finally:
            stop(proc)
        print(f"| {backend} | {row['quiet_max_ms']:.0f} / {row['quiet_p99_ms']:.0f} | "
              f"{row['busy_max_ms']:.0f} / {row['busy_p99_ms']:.0f} | {row['slow_status']}, "
              f"{row['slow_s']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
