"""MaskBench's method on real-world JSON schemas: thinkgate's grammar layer beside xgrammar and
llguidance, on one tokenizer (issue 31).

For each schema (a `.jsonl.gz` of `{"id", "schema", "tests": [{"valid", "data"}]}`, MaskBench's
layout; default: the dev set in the shared data folder) and each engine: compile and compute the
first mask (time to first mask, TTFM); then for each instance tokenize `json.dumps(data)` and
feed it token by token, computing the mask before each token (time between masks, TBM): every
token must be allowed by the mask and accepted, and the end (a stop token) must be allowed after
the last one. A schema passes when every valid instance gets through and every invalid one is
stopped. The other outcomes: refused (a compile error, an honest refusal), validation error (a
valid instance stopped), invalidation error (an invalid instance let through: output that fails
its schema), crash. Engines:

- `thinkgate`: `Grammar.new_request(StructuredOutputsParams(json=schema))`, as the server runs it
  (bounded numbers, refusals of unenforced keywords), with the default backend (`auto`);
  `thinkgate-xgrammar` / `thinkgate-guidance`: the same with one backend alone;
- `xgrammar`: its JSON-schema compiler with its defaults, no thinkgate rules;
- `llguidance`: `LLMatcher` on `grammar_from_json_schema` (needs `pip install llguidance`).

    python -m thinkgate.benchmarks.bench_maskbench --model /tmp/qwen3-vocab --limit 200
    (build the Qwen-vocabulary folder first: python -m thinkgate.benchmarks.real_vocab_model DIR)

No per-schema timeout: a slow compile is measured as it is (TTFM p99 shows it).
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

import torch

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "maskbench_dev.jsonl.gz"
OUTCOMES = ("passing", "refused", "validation error", "invalidation error", "crash")


def allowed(mask: torch.Tensor, token: int) -> bool:
    return bool((int(mask[0, token >> 5]) >> (token & 31)) & 1)


class ThinkgateEngine:
    name = "thinkgate"
    backend = "auto"

    def __init__(self, tokenizer: Any, vocab_size: int, stop_ids: list[int]) -> None:
        from thinkgate.engine.structured.grammar import Grammar

        self.grammar = Grammar(tokenizer, vocab_size, stop_ids, max_num_seqs=1,
                               backend=self.backend)
        self.grammar.warm_up()  # what the engine does at start (not a compile)
        self.stop = stop_ids[0]

    def compile(self, schema: Any) -> Any:
        from thinkgate.engine.sampling_params import StructuredOutputsParams

        return StructuredOutputsParams(json=schema)

    def start(self, compiled: Any) -> Any:
        return self.grammar.new_request(compiled)  # cached after the first compile

    def mask(self, matcher: Any) -> torch.Tensor | None:
        return self.grammar.fill_bitmask([matcher])

    def accept(self, matcher: Any, token: int) -> bool:
        return matcher.accept(token)

    def can_end(self, matcher: Any) -> bool:
        mask = self.mask(matcher)
        return mask is not None and allowed(mask, self.stop) and matcher.accept(self.stop)


class ThinkgateXgrammar(ThinkgateEngine):
    name = "thinkgate-xgrammar"
    backend = "xgrammar"


class ThinkgateGuidance(ThinkgateEngine):
    name = "thinkgate-guidance"
    backend = "guidance"


class XgrammarEngine:
    name = "xgrammar"

    def __init__(self, tokenizer: Any, vocab_size: int, stop_ids: list[int]) -> None:
        import xgrammar as xgr

        self.xgr = xgr
        info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size,
                                                  stop_token_ids=stop_ids)
        self.compiler = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)
        self.bitmask = xgr.allocate_token_bitmask(1, vocab_size)
        self.stop = stop_ids[0]

    def compile(self, schema: Any) -> Any:
        return self.compiler.compile_json_schema(json.dumps(schema))

    def start(self, compiled: Any) -> Any:
        return self.xgr.GrammarMatcher(compiled)

    def mask(self, matcher: Any) -> torch.Tensor | None:
        matcher.fill_next_token_bitmask(self.bitmask)
        return self.bitmask

    def accept(self, matcher: Any, token: int) -> bool:
        return matcher.accept_token(token)

    def can_end(self, matcher: Any) -> bool:
        return allowed(self.mask(matcher), self.stop) and matcher.accept_token(self.stop)


class LlguidanceEngine:
    name = "llguidance"

    def __init__(self, tokenizer: Any, vocab_size: int, stop_ids: list[int]) -> None:
        import llguidance
        import llguidance.hf
        import llguidance.torch

        self.ll = llguidance
        self.tokenizer = llguidance.hf.from_tokenizer(tokenizer, n_vocab=vocab_size,
                                                      eos_token=stop_ids[0])
        self.bitmask = llguidance.torch.allocate_token_bitmask(1, vocab_size)

    def compile(self, schema: Any) -> Any:
        return self.ll.LLMatcher.grammar_from_json_schema(schema)  # compiled in start()

    def start(self, compiled: Any) -> Any:
        matcher = self.ll.LLMatcher(self.tokenizer, compiled)
        if matcher.is_error():
            raise ValueError(matcher.get_error())
        return matcher

    def mask(self, matcher: Any) -> torch.Tensor | None:
        self.ll.torch.fill_next_token_bitmask(matcher, self.bitmask, 0)
        return self.bitmask

    def accept(self, matcher: Any, token: int) -> bool:
        return matcher.consume_token(token)

    def can_end(self, matcher: Any) -> bool:
        return matcher.is_accepting()


ENGINES = {e.name: e for e in (ThinkgateEngine, ThinkgateXgrammar, ThinkgateGuidance,
                               XgrammarEngine, LlguidanceEngine)}


def _goes_through(engine: Any, matcher: Any, ids: list[int], tbm: list[float]) -> bool:
    """Whether the instance's tokens all pass mask + accept and the end is allowed after them."""
    for token in ids:
        t = time.perf_counter()
        mask = engine.mask(matcher)
        tbm.append(time.perf_counter() - t)
        if mask is None or not allowed(mask, token) or not engine.accept(matcher, token):
            return False
    return engine.can_end(matcher)


def run_schema(engine: Any, tokenizer: Any, case: dict[str, Any], ttfm: list[float],
               tbm: list[float], why: dict[str, str] | None = None) -> str:
    """One schema's outcome (OUTCOMES) on one engine; `why` gets a refusal's message."""
    try:
        t = time.perf_counter()
        compiled = engine.compile(case["schema"])
        first = engine.start(compiled)
        engine.mask(first)
        ttfm.append(time.perf_counter() - t)
    except (ValueError, RuntimeError) as exc:  # each engine's refusal of a schema
        if why is not None:
            why[case["id"]] = str(exc)[:300]
        return "refused"
    outcome = "passing"
    try:
        for test in case["tests"]:
            ids = tokenizer.encode(json.dumps(test["data"]), add_special_tokens=False)
            through = _goes_through(engine, engine.start(compiled), ids, tbm)
            if test["valid"] and not through:
                outcome = "validation error" if outcome == "passing" else outcome
            elif not test["valid"] and through:
                outcome = "invalidation error"
    except Exception:  # noqa: BLE001 - a crash is an outcome of its own here
        return "crash"
    return outcome


def load_cases(path: Path, limit: int | None, seed: int) -> list[dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        cases = [json.loads(line) for line in f if line.strip()]
    if limit is not None and limit < len(cases):
        cases = random.Random(seed).sample(cases, limit)
    return cases


def load_tokenizer(model: str | None) -> tuple[str, Any, int, list[int]]:
    """(folder, tokenizer, vocab size, stop ids) of an HF model folder (default: the demo)."""
    from thinkgate.engine.demo import demo_model_path
    from transformers import AutoConfig, AutoTokenizer

    folder = model or str(demo_model_path())
    tokenizer = AutoTokenizer.from_pretrained(folder)
    vocab_size = AutoConfig.from_pretrained(folder).vocab_size
    stop_ids = sorted({i for i in (tokenizer.eos_token_id,
                                   tokenizer.convert_tokens_to_ids("<|im_end|>")) if i is not None})
    return folder, tokenizer, vocab_size, stop_ids


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--model", default=None, help="HF folder for the tokenizer (default: demo)")
    ap.add_argument("--engines", nargs="+", default=list(ENGINES), choices=list(ENGINES))
    ap.add_argument("--limit", type=int, default=None, help="a seeded sample of this many")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None, help="write per-schema outcomes here")
    args = ap.parse_args()
    torch.set_num_threads(1)
    folder, tokenizer, vocab_size, stop_ids = load_tokenizer(args.model)
    cases = load_cases(args.data, args.limit, args.seed)
    print(f"# bench_maskbench: {len(cases)} schemas from {args.data.name}, tokenizer {folder} "
          f"(vocab {vocab_size}), one thread")
    print("| engine | passing | refused | validation error | invalidation error | crash | "
          "TTFM p50 / p99 ms | TBM p50 / p99 us |")
    print("|---|---|---|---|---|---|---|---|")
    per_schema: dict[str, dict[str, str]] = {}
    refusals: dict[str, dict[str, str]] = {}
    for name in args.engines:
        try:
            engine = ENGINES[name](tokenizer, vocab_size, stop_ids)
        except ImportError as exc:
            print(f"| {name} | not installed ({exc.name}) |")
            continue
        ttfm: list[float] = []
        tbm: list[float] = []
        why: dict[str, str] = {}
        outcomes = {c["id"]: run_schema(engine, tokenizer, c, ttfm, tbm, why) for c in cases}
        per_schema[name] = outcomes
        refusals[name] = why
        counts = Counter(outcomes.values())
        print(f"| {name} | " + " | ".join(str(counts[o]) for o in OUTCOMES)
              + f" | {pct(ttfm, 50) * 1e3:.1f} / {pct(ttfm, 99) * 1e3:.0f}"
              f" | {pct(tbm, 50) * 1e6:.0f} / {pct(tbm, 99) * 1e6:.0f} |", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"schemas": [c["id"] for c in cases], "outcomes": per_schema,
                       "refusals": refusals}, f)


if __name__ == "__main__":
    main()
