"""Forced tool calls on real tool sets (BFCL), for each tool format and grammar backend (issue 36).

The method of the shared data README on a `.jsonl.gz` of tool sets (`{"id", "tools", "calls",
"invalid"}`; default: the dev file): for each tool set, format and backend, build the
`tool_choice="required"` constraint as the chat route does (`chat_constraint`) and start it
(`Grammar.new_request`, cold: the compile cache and the per-schema cache emptied first, outside
the timing) and compute the first mask (TTFM). Then the ground-truth calls written in the format's syntax
(`render_calls`) go in token by token, a mask before each (mask time), and a stop token must be
allowed after them; each invalid variant (a required key dropped, a wrong type, a value outside
an enum) must be stopped somewhere. The format's parser must read the written calls back as the
same names and arguments, whole and in 7-character deltas (given the tools, as the server runs
it). A variant whose text the parser reads back as a valid call (in the XML formats the string
parameter `12345` is the text "12345") is not invalid in that format and is skipped. Outcomes
per tool set: passing,
refused (compile error), valid rejected, invalid let through, round-trip mismatch.

The many-tools cells: the distinct tools of the sample, 8 / 32 / all (150+) of them: cold; the
same tools in another order (one grammar: the compile cache); a new combination of tools seen
before (all but one: the per-schema caches); each cell the median of `--many-repeats` rounds.

    python -m thinkgate.benchmarks.bench_tools --model /tmp/qwen3-vocab --limit 120

`--round-trip-only` skips the grammars and counts, per format, the tool sets whose written calls
read back exactly (`--formats all`: every tool parser name):

    python -m thinkgate.benchmarks.bench_tools --round-trip-only --formats all
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

import torch
from thinkgate.benchmarks.bench_maskbench import allowed, load_cases, load_tokenizer, pct

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "bfcl_dev.jsonl.gz"
FORMATS = ("hermes", "llama3_json", "mistral", "pythonic", "qwen3_coder")
BACKENDS = ("auto", "xgrammar", "guidance")
OUTCOMES = ("passing", "refused", "valid rejected", "invalid let through", "round trip")


class Harness:
    """One backend's grammar layer on one tokenizer, driven as the engine drives it."""

    def __init__(self, tokenizer: Any, vocab_size: int, stop_ids: list[int], backend: str) -> None:
        from thinkgate.engine.structured.grammar import Grammar

        self.tokenizer = tokenizer
        self.grammar = Grammar(tokenizer, vocab_size, stop_ids, max_num_seqs=1, backend=backend)
        self.grammar.warm_up()
        self.stop = stop_ids[0]

    def forget(self) -> None:
        """Empty the compile cache and the per-schema caches (the next start is cold); not part
        of any request, so outside the timings (dropping a 150-tool grammar takes ~1 ms)."""
        from thinkgate.engine.structured import canonical, guidance_backend

        self.grammar.cache.clear()
        canonical.clear_schema_caches()
        guidance_backend.clear_schema_caches()

    def start(self, fmt: str, tools: list[dict[str, Any]], cold: bool = True) -> Any:
        from thinkgate.engine.structured.tool_constraints import chat_constraint

        if cold:
            self.forget()
        params = chat_constraint(fmt, tools, "required", None)
        row = self.grammar.new_request(params)
        self.grammar.fill_bitmask([row])
        return params, row

    def goes_through(self, row: Any, text: str, mask_s: list[float]) -> bool:
        """Whether `text` is allowed token by token and may end there."""
        for token in self.tokenizer.encode(text, add_special_tokens=False):
            start = time.perf_counter()
            mask = self.grammar.fill_bitmask([row])
            mask_s.append(time.perf_counter() - start)
            if mask is None or not allowed(mask, token) or not row.accept(token):
                return False
        mask = self.grammar.fill_bitmask([row])
        return mask is not None and allowed(mask, self.stop) and row.accept(self.stop)


def read_back(fmt: str, text: str, tools: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    """The calls the format's parser reads in `text` (given the tools, as the server runs it)."""
    from thinkgate.parsers import get_parser

    return [(c.name, json.loads(c.arguments))
            for c in get_parser(tool_parser=fmt).parse(text, tools).tool_calls]


def expressible(fmt: str, text: str, tools: list[dict[str, Any]]) -> bool:
    """Whether an invalid variant written in the format still reads back as invalid: in the XML
    formats a string parameter's text `12345` is the string "12345", a valid value."""
    import jsonschema

    by_name = {t["function"]["name"]: t["function"].get("parameters") or {} for t in tools}
    for name, args in read_back(fmt, text, tools):
        if name in by_name and not jsonschema.Draft202012Validator(by_name[name]).is_valid(args):
            return True
    return False


def round_trip(fmt: str, text: str, calls: list[list[Any]], tools: list[dict[str, Any]]) -> bool:
    """Whether the format's parser reads `text` back as `calls`, whole and in 7-char deltas."""
    from thinkgate.parsers import collect, get_parser

    want = [(name, args) for name, args in calls]
    parser = get_parser(tool_parser=fmt)
    whole = parser.parse(text, tools).tool_calls
    stream = parser.stream(tools)
    deltas = [d for i in range(0, len(text), 7) for d in stream.feed(text[i:i + 7])]
    streamed = collect([*deltas, *stream.finish()]).tool_calls
    return all([(c.name, json.loads(c.arguments)) for c in got] == want
               for got in (whole, streamed))


def run_set(h: Harness, fmt: str, case: dict[str, Any], ttfm: list[float],
            mask_s: list[float], why: dict[str, str]) -> str:
    from thinkgate.parsers.tools.grammar import render_calls

    h.forget()
    start = time.perf_counter()
    try:
        _, row = h.start(fmt, case["tools"], cold=False)
    except ValueError as err:
        why[case["id"]] = str(err)[:300]
        return "refused"
    ttfm.append(time.perf_counter() - start)
    text = render_calls(fmt, [tuple(c) for c in case["calls"]], tools=case["tools"])
    if not h.goes_through(row, text, mask_s):
        return "valid rejected"
    for _, name, args in case.get("invalid") or ():
        bad = render_calls(fmt, [(name, args)], tools=case["tools"])
        if not expressible(fmt, bad, case["tools"]):
            continue
        _, row = h.start(fmt, case["tools"], cold=False)
        if h.goes_through(row, bad, mask_s):
            why[case["id"]] = f"let through: {name} {json.dumps(args)[:200]}"
            return "invalid let through"
    return "passing" if round_trip(fmt, text, case["calls"], case["tools"]) else "round trip"


def many_tools(h: Harness, fmt: str, cases: list[dict[str, Any]],
               sizes: list[int], repeats: int = 1) -> list[str]:
    """TTFM of `required` over `sizes` distinct tools (0: all of them): cold; the same tools
    reordered (the compile cache); a new combination of seen tools (all but the first: only the
    per-schema caches are warm). Each the median of `repeats` rounds."""
    seen: dict[str, dict[str, Any]] = {}
    for case in cases:
        for tool in case["tools"]:
            seen.setdefault(tool["function"]["name"], tool)
    tools = list(seen.values())
    cells = []
    for n in (size or len(tools) for size in sizes):
        subset = tools[:n]
        shuffled = random.Random(n).sample(subset, len(subset))
        times: list[list[float]] = [[], [], []]
        try:
            for _ in range(repeats):
                h.forget()
                for kind, tools_now in enumerate((subset, shuffled, subset[1:])):
                    start = time.perf_counter()
                    h.start(fmt, tools_now, cold=False)
                    times[kind].append(time.perf_counter() - start)
        except ValueError:
            cells.append(f"{n}: refused")
            continue
        cells.append(f"{n}: " + " / ".join(f"{pct(t, 50) * 1e3:.1f}" for t in times))
    return cells


def round_trips(formats: list[str], cases: list[dict[str, Any]]) -> None:
    """The parser side alone: per format, how many tool sets read back exactly."""
    from thinkgate.parsers.tools.grammar import render_calls

    print(f"# bench_tools --round-trip-only: {len(cases)} tool sets")
    print("| format | read back exactly | round trip | no writer |\n|---|---|---|---|")
    for fmt in formats:
        counts: Counter[str] = Counter()
        for case in cases:
            try:
                text = render_calls(fmt, [tuple(c) for c in case["calls"]], tools=case["tools"])
            except ValueError:
                counts["no writer"] += 1
                continue
            ok = round_trip(fmt, text, case["calls"], case["tools"])
            counts["passing" if ok else "round trip"] += 1
        print(f"| {fmt} | {counts['passing']} | {counts['round trip']} | {counts['no writer']} |",
              flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--model", default=None, help="HF folder for the tokenizer (default: demo)")
    ap.add_argument("--formats", nargs="+", default=list(FORMATS))
    ap.add_argument("--backends", nargs="+", default=list(BACKENDS), choices=list(BACKENDS))
    ap.add_argument("--limit", type=int, default=None, help="a seeded sample of this many")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--many-sizes", nargs="*", type=int, default=[8, 32, 0],
                    help="tool counts of the many-tools cells (0: every distinct tool)")
    ap.add_argument("--many-repeats", type=int, default=5,
                    help="rounds of each many-tools cell (the median is shown)")
    ap.add_argument("--json", default=None, help="write per-set outcomes and reasons here")
    ap.add_argument("--round-trip-only", action="store_true",
                    help="no grammars: only whether each format reads its written calls back")
    args = ap.parse_args()
    if args.formats == ["all"]:
        from thinkgate.parsers import list_parsers

        args.formats = list_parsers()["tool"]
    if args.round_trip_only:
        round_trips(args.formats, load_cases(args.data, args.limit, args.seed))
        return
    torch.set_num_threads(1)
    folder, tokenizer, vocab_size, stop_ids = load_tokenizer(args.model)
    cases = load_cases(args.data, args.limit, args.seed)
    print(f"# bench_tools: {len(cases)} tool sets from {args.data.name}, tokenizer {folder} "
          f"(vocab {vocab_size}), one thread, tool_choice=required")
    print("| format | backend | " + " | ".join(OUTCOMES)
          + " | TTFM p50 / p99 ms | mask p50 / p99 us | many tools: cold / reordered / seen ms |")
    print("|---" * (len(OUTCOMES) + 5) + "|")
    report: dict[str, Any] = {}
    for backend in args.backends:
        h = Harness(tokenizer, vocab_size, stop_ids, backend)
        for fmt in args.formats:
            ttfm: list[float] = []
            mask_s: list[float] = []
            why: dict[str, str] = {}
            outcomes = {c["id"]: run_set(h, fmt, c, ttfm, mask_s, why) for c in cases}
            counts = Counter(outcomes.values())
            many = many_tools(h, fmt, cases, args.many_sizes, args.many_repeats)
            report[f"{fmt}/{backend}"] = {"outcomes": outcomes, "why": why}
            print(f"| {fmt} | {backend} | " + " | ".join(str(counts[o]) for o in OUTCOMES)
                  + f" | {pct(ttfm, 50) * 1e3:.1f} / {pct(ttfm, 99) * 1e3:.1f}"
                  f" | {pct(mask_s, 50) * 1e6:.0f} / {pct(mask_s, 99) * 1e6:.0f}"
                  f" | {'; '.join(many)} |", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(report))


if __name__ == "__main__":
    main()
