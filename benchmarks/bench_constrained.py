"""Constrained vs unconstrained decoding throughput, and the exposed mask time.

    python -m thinkgate.benchmarks.bench_constrained [--model DIR] [--batches 1 8 32]
        [--tokens 64] [--repeats 3] [--clock wall|cpu] [--threads N] [--json F]
        [--schemas people long_keys enums] [--jump-forward off|on|both]

The model is the demo model unless `--model` names a folder: `real_vocab_model.py` builds one
at the real Qwen3 vocabulary (151,936 logits, 151,669 tokens), where masks cost what they cost
on real models.

For each batch size it decodes the same prompts for exactly `--tokens` tokens (greedy), once
without a constraint and once under a JSON schema whose instances are longer than that (a list
of small objects: strings, integers, separators, so masks range from one token to most of the
vocabulary). It prints output tokens/s for both, their ratio, the CPU time per step spent
filling the bitmask, and the part of it the step loop waited for (not hidden behind the
forward). The grammar's compile happens before timing (it is cached per schema). `--schemas`
picks the constrained side's schemas (people: the list above; long_keys: objects with long
fixed keys; enums: objects of long enum values), `--jump-forward` times it without and/or with
jump-forward (engine/structured/jump_forward.py); `steps` is the median number of engine steps per run.
A second table, `complete/json`, is the tok/s ratio of `complete_before_max_tokens` on against
off, both under a schema with a short completion (the option plans on each of the last steps),
with jump-forward as the engine's default: the option's cost per step (`steps off / on`: engine
steps per run; the option writes its forced completion in one forward).

Each cell runs `--repeats` alternating (plain, json) pairs and prints the median tok/s of each
side, the median of the pairs' ratios and their range (`lo-hi`): on a shared machine the range
says how far to trust the median. `--clock cpu` times with the process's CPU time instead of
the wall clock, so waiting for a core other jobs hold does not count (with `--threads 1` and
the inline fill on CPU, the process's CPU time is the step's work).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

SCHEMA = {"type": "array", "minItems": 400, "items": {
    "type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
                                     "age": {"type": "integer", "minimum": 0, "maximum": 99}},
    "required": ["name", "age"]}}
# jump-forward's cases: most of the text is forced by long fixed keys, or by enum values that
# are fixed after their first token
LONG_KEYS = {"type": "array", "minItems": 400, "items": {
    "type": "object", "properties": {
        "customer_full_name": {"type": "string", "maxLength": 8},
        "preferred_contact_method": {"enum": ["email", "phone"]},
        "subscribed_to_newsletter": {"type": "boolean"}},
    "required": ["customer_full_name", "preferred_contact_method", "subscribed_to_newsletter"]}}
ENUMS = {"type": "array", "minItems": 400, "items": {
    "type": "object", "properties": {
        "status": {"enum": ["pending_review", "approved_and_shipped", "cancelled_by_customer"]},
        "priority": {"enum": ["low_priority", "medium_priority", "high_priority"]},
        "region": {"enum": ["north_america", "south_america", "europe_middle_east"]}},
    "required": ["status", "priority", "region"]}}
# the people list with closed objects (additionalProperties: false, as OpenAI's strict mode
# and pydantic-built schemas send them): by JSON Schema the open one's objects take other keys
# too, so fewer of its keys are forced (jump-forward) under a backend with those semantics
CLOSED = {**SCHEMA, "items": {**SCHEMA["items"], "additionalProperties": False}}
SCHEMAS = {"people": SCHEMA, "long_keys": LONG_KEYS, "enums": ENUMS, "people_closed": CLOSED}
# the people items with no minimum: its completion is short, so complete_before_max_tokens
# plans and checks on every step near max_tokens (the "complete" table: its cost per step)
SHORT_SCHEMA = {"type": "array", "items": SCHEMA["items"]}
PROMPT = ("<|im_start|>user\nList people as JSON.<|im_end|>\n<|im_start|>assistant\n"
          "<think>\n\n</think>\n\n")


def _run(llm: Any, batch: int, tokens: int, constrained: bool,
         clock: Any = time.perf_counter, schema: dict[str, Any] | None = None,
         jump_forward: bool = False, complete: bool = False) -> dict[str, float]:
    from thinkgate import SamplingParams, StructuredOutputsParams

    so = (StructuredOutputsParams(json=schema or SCHEMA, jump_forward=jump_forward,
                                  complete_before_max_tokens=complete)
          if constrained else None)
    params = SamplingParams(temperature=0.0, max_tokens=tokens, ignore_eos=True,
                            structured_outputs=so)
    engine = llm.llm_engine
    hook = engine.structured_output
    for i in range(batch):
        engine.add_request(f"b{batch}-{constrained}-{jump_forward}-{complete}-{i}", PROMPT,
                           params)
    fills, waits, steps, generated = [], [], 0, 0
    start = clock()
    while engine.has_unfinished_requests():
        outs = engine.step()
        steps += 1
        if constrained and hook.grammar.last_fill_s:
            fills.append(hook.grammar.last_fill_s)
            waits.append(hook.grammar.last_wait_s)
        generated += sum(len(o.outputs[0].token_ids) for o in outs if o.finished)
    elapsed = clock() - start
    return {"tok_s": generated / elapsed, "steps": steps, "tokens": generated,
            "fill_us": 1e6 * statistics.mean(fills) if fills else 0.0,
            "exposed_us": 1e6 * statistics.mean(waits) if waits else 0.0}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="HF folder (default: the demo model)")
    ap.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3,
                    help="alternating (plain, json) pairs per cell; medians are printed")
    ap.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                    help="wall: perf_counter; cpu: process CPU time (robust to other jobs)")
    ap.add_argument("--schemas", nargs="+", choices=sorted(SCHEMAS), default=["people"],
                    help="people: short keys, free values; long_keys / enums: mostly forced")
    ap.add_argument("--jump-forward", choices=["off", "on", "both"], default="both",
                    help="time the constrained side without and/or with jump-forward")
    ap.add_argument("--json", default=None, help="write the table here as JSON")
    ap.add_argument("--backends", nargs="+", default=["auto"],
                    choices=["auto", "xgrammar", "guidance"],
                    help="grammar backends to time side by side (each cell alternates them)")
    ap.add_argument("--threads", type=int, default=None,
                    help="torch intra-op threads (bench_engine uses 1 on the shared 2-core VM; "
                         "then the mask fill overlaps the forward on the other core)")
    args = ap.parse_args(argv)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)

    from thinkgate import LLM
    from thinkgate.api.chat import chat_layer_for

    llm = LLM(model=args.model, max_num_seqs=max(args.batches))
    chat_layer_for(llm)  # the constrained-decoding hook, when LLM has not installed it
    sides = {"off": [False], "on": [True], "both": [False, True]}[args.jump_forward]
    cache = llm.llm_engine.structured_output.grammar.cache
    for backend in args.backends:  # warm-up: compile the schemas, touch every code path
        cache.backend = backend
        for name in args.schemas:
            for jf in sides:
                _run(llm, 2, 8, True, schema=SCHEMAS[name], jump_forward=jf)
    _run(llm, 2, 8, False)
    _run(llm, 2, 8, True, schema=SHORT_SCHEMA, jump_forward=True, complete=True)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    rows = []
    print(f"{'backend':>8} {'schema':>9} {'jf':>3} {'batch':>5} {'plain tok/s':>12} "
          f"{'json tok/s':>11} "
          f"{'ratio':>6} {'range':>10} {'steps':>6} {'fill us/step':>13} {'exposed us':>11}")
    for name in args.schemas:
        for batch in args.batches:
            rows += _cell(llm, name, batch, args, sides, clock)
    cache.backend = args.backends[0]
    print(f"{'batch':>5} {'complete/json':>14} {'range':>12} {'tokens':>7} steps off / on "
          f"({args.backends[0]})")
    costs = [_complete_cost(llm, batch, args, clock) for batch in args.batches]
    result = {"benchmark": "constrained", "model": args.model or "demo", "tokens": args.tokens,
              "threads": args.threads, "clock": args.clock, "repeats": args.repeats,
              "overlap": llm.llm_engine.structured_output.grammar.overlap, "rows": rows,
              "complete_rows": costs}
    print(f"mask fill overlapped with the forward: {result['overlap']}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=2)
    return result


def _cell(llm: Any, name: str, batch: int, args: argparse.Namespace, sides: list[bool],
          clock: Any) -> list[dict[str, Any]]:
    """One schema x batch: `repeats` alternating (plain, json per side) rounds, medians."""
    cache = llm.llm_engine.structured_output.grammar.cache
    keys = [(backend, jf) for backend in args.backends for jf in sides]
    runs: dict[Any, list[dict[str, float]]] = {"plain": [], **{k: [] for k in keys}}
    for _ in range(args.repeats):  # alternate, so load changes hit every side alike
        runs["plain"].append(_run(llm, batch, args.tokens, False, clock))
        for backend, jf in keys:
            cache.backend = backend
            runs[backend, jf].append(_run(llm, batch, args.tokens, True, clock, SCHEMAS[name],
                                          jf))
    rows = []
    for backend, jf in keys:
        key = (backend, jf)
        ratios = sorted(c["tok_s"] / p["tok_s"] for p, c in zip(runs["plain"], runs[key]))
        row = {"backend": backend, "schema": name, "jump_forward": jf, "batch": batch,
               "plain_tok_s": statistics.median(r["tok_s"] for r in runs["plain"]),
               "json_tok_s": statistics.median(r["tok_s"] for r in runs[key]),
               "ratio": statistics.median(ratios), "ratio_lo": ratios[0], "ratio_hi": ratios[-1],
               "steps": statistics.median(r["steps"] for r in runs[key]),
               "fill_us": statistics.median(r["fill_us"] for r in runs[key]),
               "exposed_us": statistics.median(r["exposed_us"] for r in runs[key])}
        rows.append(row)
        spread = f"{row['ratio_lo']:.2f}-{row['ratio_hi']:.2f}"
        print(f"{backend:>8} {name:>9} {'on' if jf else 'off':>3} {batch:>5} "
              f"{row['plain_tok_s']:>12.0f} "
              f"{row['json_tok_s']:>11.0f} {row['ratio']:>6.2f} {spread:>10} "
              f"{row['steps']:>6.0f} {row['fill_us']:>13.0f} {row['exposed_us']:>11.0f}")
    return rows




def _complete_cost(llm: Any, batch: int, args: argparse.Namespace, clock: Any
                   ) -> dict[str, Any]:
    """complete_before_max_tokens on / off under SHORT_SCHEMA, alternating pairs."""
    sides: dict[bool, list[dict[str, float]]] = {False: [], True: []}
    for _ in range(args.repeats):
        for complete in (False, True):
            sides[complete].append(_run(llm, batch, args.tokens, True, clock, SHORT_SCHEMA,
                                        jump_forward=True, complete=complete))
    costs = sorted(c["tok_s"] / p["tok_s"] for p, c in zip(sides[False], sides[True]))
    row = {"batch": batch, "complete_ratio": statistics.median(costs), "complete_lo": costs[0],
           "complete_hi": costs[-1],
           "short_tokens": statistics.median(r["tokens"] for r in sides[True]),
           "steps_off": statistics.median(r["steps"] for r in sides[False]),
           "steps_on": statistics.median(r["steps"] for r in sides[True])}
    spread = f"{costs[0]:.3f}-{costs[-1]:.3f}"
    print(f"{batch:>5} {row['complete_ratio']:>14.3f} {spread:>12} {row['short_tokens']:>7.0f} "
          f"{row['steps_off']:>5.0f} / {row['steps_on']:<5.0f}")
    return row


if __name__ == "__main__":
    main()
