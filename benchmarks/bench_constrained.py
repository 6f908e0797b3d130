"""Constrained vs unconstrained decoding throughput, and the exposed mask time.

    python -m thinkgate.benchmarks.bench_constrained [--model DIR] [--batches 1 8 32]
        [--tokens 64] [--repeats 3] [--clock wall|cpu] [--threads N] [--json F]

The model is the demo model unless `--model` names a folder: `real_vocab_model.py` builds one
at the real Qwen3 vocabulary (151,936 logits, 151,669 tokens), where masks cost what they cost
on real models.

For each batch size it decodes the same prompts for exactly `--tokens` tokens (greedy), once
without a constraint and once under a JSON schema whose instances are longer than that (a list
of small objects: strings, integers, separators, so masks range from one token to most of the
vocabulary). It prints output tokens/s for both, their ratio, the CPU time per step spent
filling the bitmask, and the part of it the step loop waited for (not hidden behind the
forward). The grammar's compile happens before timing (it is cached per schema).
`complete/json` is the tok/s ratio of `complete_before_max_tokens` on against off, both under a
schema with a short completion (the option plans on each of the last steps): its cost per step.

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
# the same items with no minimum: its completion is short, so complete_before_max_tokens plans
# and checks on every step near max_tokens (the "complete" columns: its cost per step)
SHORT_SCHEMA = {"type": "array", "items": SCHEMA["items"]}
PROMPT = ("<|im_start|>user\nList people as JSON.<|im_end|>\n<|im_start|>assistant\n"
          "<think>\n\n</think>\n\n")


def _run(llm: Any, batch: int, tokens: int, constrained: bool,
         clock: Any = time.perf_counter, schema: dict[str, Any] | None = None,
         complete: bool = False) -> dict[str, float]:
    from thinkgate import SamplingParams, StructuredOutputsParams

    so = (StructuredOutputsParams(json=schema or SCHEMA, complete_before_max_tokens=complete)
          if constrained else None)
    params = SamplingParams(temperature=0.0, max_tokens=tokens, ignore_eos=True,
                            structured_outputs=so)
    engine = llm.llm_engine
    hook = engine.structured_output
    for i in range(batch):
        engine.add_request(f"b{batch}-{constrained}-{complete}-{i}", PROMPT, params)
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
    ap.add_argument("--json", default=None, help="write the table here as JSON")
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
    _run(llm, 2, 8, True)  # warm-up: compile the schema, touch every code path
    _run(llm, 2, 8, False)
    _run(llm, 2, 8, True, schema=SHORT_SCHEMA, complete=True)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    rows = []
    print(f"{'batch':>5} {'plain tok/s':>12} {'json tok/s':>11} {'ratio':>6} {'range':>10} "
          f"{'fill us/step':>13} {'exposed us/step':>16} {'complete/json':>14} {'range':>10}")
    for batch in args.batches:
        runs: dict[bool, list[dict[str, float]]] = {False: [], True: []}
        short: dict[bool, list[dict[str, float]]] = {False: [], True: []}
        for _ in range(args.repeats):  # alternate, so load changes hit both sides alike
            for constrained in (False, True):
                runs[constrained].append(_run(llm, batch, args.tokens, constrained, clock))
            for complete in (False, True):  # SHORT_SCHEMA without / with the option
                short[complete].append(_run(llm, batch, args.tokens, True, clock, SHORT_SCHEMA,
                                            complete))
        ratios = sorted(c["tok_s"] / p["tok_s"] for p, c in zip(runs[False], runs[True]))
        costs = sorted(c["tok_s"] / p["tok_s"] for p, c in zip(short[False], short[True]))
        row = {"batch": batch,
               "plain_tok_s": statistics.median(r["tok_s"] for r in runs[False]),
               "json_tok_s": statistics.median(r["tok_s"] for r in runs[True]),
               "ratio": statistics.median(ratios), "ratio_lo": ratios[0], "ratio_hi": ratios[-1],
               "fill_us": statistics.median(r["fill_us"] for r in runs[True]),
               "exposed_us": statistics.median(r["exposed_us"] for r in runs[True]),
               "complete_ratio": statistics.median(costs), "complete_lo": costs[0],
               "complete_hi": costs[-1],
               "short_tokens": statistics.median(r["tokens"] for r in short[True])}
        rows.append(row)
        spread = f"{row['ratio_lo']:.2f}-{row['ratio_hi']:.2f}"
        cspread = f"{costs[0]:.3f}-{costs[-1]:.3f}"
        print(f"{batch:>5} {row['plain_tok_s']:>12.0f} {row['json_tok_s']:>11.0f} "
              f"{row['ratio']:>6.2f} {spread:>10} {row['fill_us']:>13.0f} "
              f"{row['exposed_us']:>16.0f} {row['complete_ratio']:>14.3f} {cspread:>10}")
    result = {"benchmark": "constrained", "model": args.model or "demo", "tokens": args.tokens,
              "threads": args.threads, "clock": args.clock, "repeats": args.repeats,
              "overlap": llm.llm_engine.structured_output.grammar.overlap, "rows": rows}
    print(f"mask fill overlapped with the forward: {result['overlap']}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=2)
    return result


if __name__ == "__main__":
    main()
