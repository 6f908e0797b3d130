"""How well the bundled models do what they were trained for, on held-out chats (values the
models never saw): `python -m thinkgate.benchmarks.eval_models [--n 200] [--json OUT]`.

Everything runs through thinkgate itself (`LLM`, the chat layer, the qwen3 + hermes parsers,
the grammar and the reasoning gate), greedy. Tables:

1. tools: the right tool with every argument value copied exactly (`tool_choice` auto and
   required), on requests offered 1-3 of twelve tools and (demo model) on requests offered the
   demo's eight tools, as the playground offers them; json: `response_format` json_schema answers holding the asked-for values; result:
   answers after a tool result that repeat the result's values.
2. thinking length (reasoning tokens) per kind of request and per `reasoning_effort`, and how
   often the model closed its thinking itself; whether it follows the question: per number of
   steps the reference reasoning takes (plain requests), and its correlation with the reference
   reasoning's length in tokens; plain answers exactly right.
3. the share of answers valid under each constraint within `max_tokens`, without and with each
   `thinking_token_budget`.

The reasoning model (`--models reasoner`) is the bundled `thinkgate-reasoner` unless
`--reasoner FOLDER` names another.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from thinkgate.benchmarks.training.chats import (
    Chat,
    heldout_chats,
    heldout_demo_tool_chats,
    reasoning_steps,
)

MODELS = ("demo", "reasoner")


def load(folder: str):
    from thinkgate import LLM

    return LLM(model=folder, reasoning_parser="qwen3", tool_call_parser="hermes",
               max_num_seqs=64)


def prepare(llm, chats: list[Chat], params, *, tool_choice: str = "auto",
            schema: str | None = None, budget: int | None = None, effort: str | None = None,
            thinking: bool | list[bool] | None = None) -> list[Any]:
    """Each chat as the chat layer prepares it (template, constraint, parsers): `tool_choice`
    "none" offers no tools; `schema` "json_schema" (the task's) or "json_object"; `thinking` one
    switch for all or one per chat (None: the chat's own)."""
    from thinkgate.api.chat import chat_layer_for

    layer = chat_layer_for(llm)
    switches = thinking if isinstance(thinking, list) else [thinking] * len(chats)
    requests = []
    for chat, think in zip(chats, switches):
        kwargs = dict(chat.template_kwargs)
        if effort is not None:
            kwargs["reasoning_effort"] = effort
        if think is not None:
            kwargs["enable_thinking"] = think
        fmt = None
        if schema == "json_schema":
            fmt = {"type": "json_schema", "json_schema": {"name": "answer",
                                                          "schema": chat.task.schema}}
        elif schema == "json_object":
            fmt = {"type": "json_object"}
        requests.append(layer.prepare(
            chat.messages, params, tools=chat.tools if tool_choice != "none" else None,
            tool_choice=tool_choice if chat.tools and tool_choice != "none" else None,
            response_format=fmt, chat_template_kwargs=kwargs, thinking_token_budget=budget))
    return requests


def run(llm, chats: list[Chat], *, max_tokens: int = 160, params=None, **kwargs) -> list[Any]:
    """Every chat in one batch (greedy unless `params`); `kwargs` as `prepare` takes them."""
    from thinkgate import SamplingParams
    from thinkgate.api.chat import chat_layer_for

    params = params or SamplingParams(temperature=0, max_tokens=max_tokens)
    requests = prepare(llm, chats, params, **kwargs)
    outs = llm.generate([r.prompt_token_ids for r in requests],
                        [r.sampling_params for r in requests], use_tqdm=False)
    layer = chat_layer_for(llm)
    return [layer.chat_output(r, o) for r, o in zip(requests, outs)]


def calls_of(out) -> list[tuple[str, Any]] | None:
    try:
        return [(c["function"]["name"], json.loads(c["function"]["arguments"]))
                for c in out.message.get("tool_calls") or []]
    except json.JSONDecodeError:
        return None


def tool_scores(chats: list[Chat], outs: list[Any]) -> dict[str, float]:
    exact = name = 0
    for chat, out in zip(chats, outs):
        got = calls_of(out) or []
        want = [(n, a) for n, a in chat.task.calls]
        exact += got == want
        name += [n for n, _ in got] == [n for n, _ in want]
    return {"right_tool": name / len(chats), "exact_args": exact / len(chats)}


def json_value(out) -> Any:
    try:
        return json.loads(out.message.get("content") or "")
    except json.JSONDecodeError:
        return None


def json_scores(chats: list[Chat], outs: list[Any]) -> dict[str, float]:
    import jsonschema

    valid = values = 0
    for chat, out in zip(chats, outs):
        obj = json_value(out)
        ok = obj is not None and jsonschema.Draft202012Validator(chat.task.schema).is_valid(obj)
        valid += ok
        values += ok and all(obj.get(k) == x for k, x in chat.task.expected.items())
    return {"valid": valid / len(chats), "asked_values": values / len(chats)}


def result_scores(chats: list[Chat], outs: list[Any]) -> dict[str, float]:
    used = sum(all(v in (o.message.get("content") or "") for v in c.task.expected["used"])
               for c, o in zip(chats, outs))
    return {"uses_result": used / len(chats)}


def thinking_stats(outs: list[Any]) -> dict[str, float]:
    n = [o.choices[0].num_reasoning_tokens for o in outs]
    closed = sum(bool(o.message.get("content") or o.message.get("tool_calls")) for o in outs)
    q = statistics.quantiles(n, n=10) if len(n) > 1 else [n[0]] * 9
    return {"mean": statistics.mean(n), "p10": q[0], "p50": statistics.median(n), "p90": q[8],
            "max": max(n), "closed": closed / len(outs)}


def plain_scores(chats: list[Chat], outs: list[Any]) -> dict[str, float]:
    right = sum((o.message.get("content") or "").strip() == c.task.answer
                for c, o in zip(chats, outs))
    return {"exact_answer": right / len(chats)}


def follows_question(name: str, tok, chats: list[Chat], outs: list[Any],
                     effort: str | None) -> dict[str, Any]:
    """Thinking tokens against the reference reasoning at `effort`: grouped by its number of
    sentences, and the Pearson correlation with its length in tokens."""
    refs = [reasoning_steps(c.task, name, effort) for c in chats]
    got = [o.choices[0].num_reasoning_tokens for o in outs]
    want = [len(tok.encode(" ".join(r), add_special_tokens=False)) for r in refs]
    by_steps: dict[int, list[int]] = {}
    for ref, n in zip(refs, got):
        by_steps.setdefault(len(ref), []).append(n)
    corr = statistics.correlation(got, want) if len(set(got)) > 1 else 0.0
    return {"by_steps": {k: {"count": len(v), "p50": statistics.median(v), "min": min(v),
                             "max": max(v)} for k, v in sorted(by_steps.items())},
            "correlation": corr, "reference_p50": statistics.median(want)}


def valid_under(kind: str, chats: list[Chat], outs: list[Any]) -> float:
    """Share of answers that finished and hold what the constraint promises."""
    import jsonschema

    good = 0
    for chat, out in zip(chats, outs):
        if out.finish_reason == "length":
            continue
        if kind == "tool_choice=required":
            calls = calls_of(out)
            schemas = {t["function"]["name"]: t["function"]["parameters"] for t in chat.tools}
            good += bool(calls) and all(
                n in schemas and jsonschema.Draft202012Validator(schemas[n]).is_valid(a)
                for n, a in calls)
        else:
            obj = json_value(out)
            schema = chat.task.schema if kind == "json_schema" else {"type": "object"}
            good += obj is not None and jsonschema.Draft202012Validator(schema).is_valid(obj)
    return good / len(chats)


def evaluate(name: str, folder: str, n: int, budgets: list[int], max_tokens: int,
             think_max_tokens: int = 512, heldout_seed: int = 1234) -> dict[str, Any]:
    llm = load(folder)
    tok = llm.get_tokenizer()
    sets = {k: heldout_chats(name, k, n, seed=heldout_seed)
            for k in ("tool", "json", "result", "plain")}
    on = {k: [c for c in v if c.template_kwargs.get("enable_thinking", True)]
          for k, v in sets.items()}
    report: dict[str, Any] = {"model": name, "folder": folder, "n": n,
                              "heldout_seed": heldout_seed}
    report["tool_auto"] = tool_scores(sets["tool"], run(llm, sets["tool"]))
    report["tool_required"] = tool_scores(sets["tool"], run(llm, sets["tool"],
                                                            tool_choice="required"))
    if name == "demo":
        eight = heldout_demo_tool_chats(n, seed=heldout_seed)
        report["tool8_auto"] = tool_scores(eight, run(llm, eight))
        report["tool8_required"] = tool_scores(eight, run(llm, eight, tool_choice="required"))
    report["json_schema"] = json_scores(sets["json"], run(llm, sets["json"], schema="json_schema"))
    report["result"] = result_scores(sets["result"], run(llm, sets["result"]))
    report["plain"] = plain_scores(sets["plain"], run(llm, sets["plain"]))
    report["thinking"] = {k: thinking_stats(run(llm, v, thinking=True,
                                                max_tokens=think_max_tokens))
                          for k, v in sets.items()}
    report["effort"], report["follows"] = {}, {}
    for e in ("low", "medium", "high"):
        outs = run(llm, sets["tool"] + sets["plain"], effort=e, thinking=True,
                   max_tokens=think_max_tokens)
        report["effort"][e] = thinking_stats(outs)
        report["follows"][e] = follows_question(name, tok, sets["plain"], outs[n:], e)
    constraints = {"json_schema": ("json", {"schema": "json_schema"}),
                   "json_object": ("json", {"schema": "json_object"}),
                   "tool_choice=required": ("tool", {"tool_choice": "required"})}
    report["valid"] = {}
    for cname, (kind, opts) in constraints.items():
        chats = on[kind]
        row = {}
        for label, b in (("no budget", None), *((f"budget {b}", b) for b in budgets)):
            row[label] = valid_under(cname, chats, run(llm, chats, thinking=True, budget=b,
                                                       max_tokens=max_tokens, **opts))
        report["valid"][cname] = row
    return report


def print_report(r: dict[str, Any], max_tokens: int) -> None:
    pct = lambda x: f"{100 * x:.1f}%"  # noqa: E731
    print(f"\n## {r['model']} ({r['folder']}), {r['n']} held-out chats per kind "
          f"(held-out seed {r.get('heldout_seed', 1234)})\n")
    print("| measure | share |\n|---|---|")
    for key, label in (("tool_auto", "tool_choice auto"),
                       ("tool_required", "tool_choice required"),
                       ("tool8_auto", "the demo's eight tools, tool_choice auto"),
                       ("tool8_required", "the demo's eight tools, tool_choice required")):
        if key not in r:
            continue
        print(f"| {label}: right tool | {pct(r[key]['right_tool'])} |")
        print(f"| {label}: right tool, exact argument values | {pct(r[key]['exact_args'])} |")
    print(f"| json_schema: valid | {pct(r['json_schema']['valid'])} |")
    print(f"| json_schema: asked-for values | {pct(r['json_schema']['asked_values'])} |")
    print(f"| after a tool result: answer repeats its values | {pct(r['result']['uses_result'])} |")
    print(f"| plain requests: the exact answer | {pct(r['plain']['exact_answer'])} |")
    print("\n| thinking tokens | mean | p10 | p50 | p90 | max | closed by the model |")
    print("|---|---|---|---|---|---|---|")
    rows = [(f"kind {k}", s) for k, s in r["thinking"].items()]
    rows += [(f"effort {e} (tool + plain)", s) for e, s in r["effort"].items()]
    for label, s in rows:
        print(f"| {label} | {s['mean']:.1f} | {s['p10']:.0f} | {s['p50']:.0f} | {s['p90']:.0f} "
              f"| {s['max']} | {pct(s['closed'])} |")
    print("\n| plain requests, effort | reference sentences: thinking tokens p50 (min-max, n) "
          "| correlation with the reference's tokens |\n|---|---|---|")
    for e, f in r["follows"].items():
        cells = "; ".join(f"{k}: {s['p50']:.0f} ({s['min']}-{s['max']}, {s['count']})"
                          for k, s in f["by_steps"].items())
        print(f"| {e} | {cells} | {f['correlation']:.2f} |")
    labels = list(next(iter(r["valid"].values())))
    print(f"\n| valid within max_tokens {max_tokens} | " + " | ".join(labels) + " |")
    print("|---" * (len(labels) + 1) + "|")
    for cname, row in r["valid"].items():
        print(f"| {cname} | " + " | ".join(pct(x) for x in row.values()) + " |")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--models", nargs="+", default=["demo"], choices=MODELS,
                    help="which held-out chats: the demo model's or the reasoning model's")
    ap.add_argument("--demo", default=None, help="model folder (default: the bundled one)")
    ap.add_argument("--reasoner", default=None,
                    help="model folder of a reasoning model (default: the bundled "
                    "thinkgate-reasoner)")
    ap.add_argument("--n", type=int, default=200, help="held-out chats per kind")
    ap.add_argument("--budget", type=int, nargs="+", default=[16],
                    help="thinking_token_budget(s) of the validity runs")
    ap.add_argument("--max-tokens", type=int, default=64, help="max_tokens of the validity runs")
    ap.add_argument("--think-max-tokens", type=int, default=512,
                    help="max_tokens of the thinking-length runs")
    ap.add_argument("--heldout-seed", type=int, default=1234,
                    help="seed of the held-out sets (another seed draws other chats, values "
                    "still never seen in training: how much the figures move between sets)")
    ap.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = ap.parse_args(argv)
    from thinkgate.engine.demo import demo_model_path, reasoner_model_path

    args.demo = args.demo or demo_model_path()
    if "reasoner" in args.models:
        args.reasoner = args.reasoner or reasoner_model_path()
    reports = []
    for name in args.models:
        reports.append(evaluate(name, getattr(args, name), args.n, args.budget, args.max_tokens,
                                args.think_max_tokens, args.heldout_seed))
        print_report(reports[-1], args.max_tokens)
    if args.json:
        args.json.write_text(json.dumps(reports, indent=2) + "\n")


if __name__ == "__main__":
    main()
