"""Streaming parser cost per delta as the output grows (should stay flat), and throughput.

Per-delta cost is the median `feed` time (target: 16k/1k ratio <= 1.3); MB/s is the output size
over the best whole-stream time.

    python -m thinkgate.benchmarks.bench_parsers [--sizes 1000 4000 16000] [--json out.json]

Each output is fed one "token" (a word-sized piece) per `feed`, as a server streams it: 70% of
the tokens thinking, then the end marker, then the answer (and, for hermes, a tool call). The
"args" rows write the answer as one tool call's string argument, streamed as it is written; the
"pythonic" row answers with text full of `[`/`{` (anchored start markers: text after the start).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from typing import Any

from thinkgate.parsers import get_parser

# (label, tool parser, reasoning parser, start marker, end marker + answer head, answer suffix,
#  share of the tokens spent thinking)
CASES: list[tuple[str, str | None, str, str, str, str, float]] = [
    ("qwen3+hermes", "hermes", "qwen3", "<think>\n", "\n</think>\n\n",
     '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>', 0.7),
    ("hermes args", "hermes", "qwen3", "<think>\n",
     '\n</think>\n\n<tool_call>\n{"name": "write", "arguments": {"text": "', '"}}\n</tool_call>', 0.1),
    ("qwen3_coder args", "qwen3_coder", "qwen3", "<think>\n",
     "\n</think>\n\n<tool_call>\n<function=write>\n<parameter=text>\n",
     "\n</parameter>\n</function>\n</tool_call>", 0.1),
    ("pythonic", "pythonic", "deepseek_r1", "<think>", "</think>See [1] ", "", 0.1),
    ("deepseek_r1", None, "deepseek_r1", "<think>", "</think>", "", 0.7),
    ("mistral", None, "mistral", "[THINK]", "[/THINK]", "", 0.7),
    ("gemma4", None, "gemma4", "<|channel>thought\n", "<channel|>", "", 0.7),
    ("granite", None, "granite", "Here's my thought process:", "Here's my response:", "", 0.7),
    ("openai_gptoss", None, "openai_gptoss", "<|channel|>analysis<|message|>",
     "<|end|><|start|>assistant<|channel|>final<|message|>", "<|return|>", 0.7),
]
WORDS = ["the", " model", " thinks", " about", " <", "tags", ">", " and", " 42", ",", "\n",
         " x<y", " ünï", " code", "()", " </", "b", ">", " [1]", " {", "}", '"', "\\"]


def tokens(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [rng.choice(WORDS) for _ in range(n)]


def output(n: int, start: str, end: str, suffix: str, think: float = 0.7) -> list[str]:
    k = int(n * think)
    answer = tokens(n - k, 2)
    if end.endswith('"'):  # inside a JSON string argument
        answer = [json.dumps(t, ensure_ascii=False)[1:-1] for t in answer]
    return [start, *tokens(k, 1), end, *answer, suffix]


def time_stream(parser: Any, deltas: list[str], repeats: int) -> tuple[float, float]:
    """(median seconds per `feed`, best total seconds) over `repeats` runs.

    The median is robust to other processes stealing the CPU mid-run, which on a shared machine
    swamps a mean of microsecond calls.
    """
    best_median, best_total = float("inf"), float("inf")
    clock = time.perf_counter
    for _ in range(repeats):
        s = parser.stream()
        times = [0.0] * len(deltas)
        t0 = clock()
        for i, d in enumerate(deltas):
            t = clock()
            s.feed(d)
            times[i] = clock() - t
        s.finish()
        best_total = min(best_total, clock() - t0)
        best_median = min(best_median, statistics.median(times))
    return best_median, best_total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 4000, 16000])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", default=None, help="also write the rows to this JSON file")
    args = ap.parse_args()
    rows = []
    sizes = args.sizes
    head = " ".join(f"{f'us/delta @{n}':>15}" for n in sizes)
    print(f"{'parser':<16}{head} {'ratio':>7} {'MB/s':>7} {'parse MB/s':>11}")
    for label, tool, reasoning, start, end, suffix, think in CASES:
        parser = get_parser(tool_parser=tool, reasoning_parser=reasoning)
        per_delta, mbps = [], 0.0
        for n in sizes:
            deltas = output(n, start, end, suffix, think)
            median, secs = time_stream(parser, deltas, args.repeats)
            per_delta.append(median * 1e6)
            mbps = len("".join(deltas).encode()) / secs / 1e6
        ratio = per_delta[-1] / per_delta[0]
        text = "".join(deltas)
        t0 = time.perf_counter()
        parser.parse(text)
        parse_mbps = len(text.encode()) / (time.perf_counter() - t0) / 1e6
        rows.append({"parser": label, "sizes": sizes, "us_per_delta": per_delta,
                     "ratio_last_first": ratio, "mb_per_s_largest": mbps,
                     "parse_mb_per_s_largest": parse_mbps})
        cells = " ".join(f"{v:>15.2f}" for v in per_delta)
        print(f"{label:<16}{cells} {ratio:>7.2f} {mbps:>7.2f} {parse_mbps:>11.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
