"""What sampling costs: `LLM.generate` tokens/s with each sampling setting against greedy.

Same prompts, `--new-tokens` tokens each (EOS ignored), batch 1/8/32; per cell the median of
`--repeats` timed runs after a warm-up, the settings alternating run by run so that load from
other jobs hits them alike. Prints tokens/s and each setting's step cost relative to greedy
(issue 11's target: temperature 1, top-k/top-p/min-p included, at most 1.2x greedy).

    python -m thinkgate.benchmarks.bench_sampling [--model DIR] [--threads 1] [--clock cpu]
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import torch
from thinkgate.benchmarks.bench_engine import make_prompts

SETTINGS: dict[str, dict[str, Any]] = {
    "greedy": {"temperature": 0.0},
    "T=1": {"temperature": 1.0},
    "T=0.7 top_p=0.9": {"temperature": 0.7, "top_p": 0.9},
    "T=1 top_k=40": {"temperature": 1.0, "top_k": 40},
    "T=1 min_p=0.05": {"temperature": 1.0, "min_p": 0.05},
    "T=0.6 top_k=20 top_p=0.95": {"temperature": 0.6, "top_k": 20, "top_p": 0.95},
}


def measure(llm: Any, prompts: list[list[int]], new_tokens: int, repeats: int,
            clock: Any) -> tuple[dict[str, float], float]:
    """Median tokens/s per setting, the settings alternating run by run, and the noise: the
    largest (max - min) / median over the settings."""
    from thinkgate import SamplingParams

    params = {name: SamplingParams(max_tokens=new_tokens, ignore_eos=True, seed=i, **kw)
              for i, (name, kw) in enumerate(SETTINGS.items())}
    for p in params.values():  # warm-up
        llm.generate(prompts, p, use_tqdm=False)
    rates: dict[str, list[float]] = {name: [] for name in params}
    for _ in range(repeats):
        for name, p in params.items():
            start = clock()
            outs = llm.generate(prompts, p, use_tqdm=False)
            rates[name].append(sum(len(o.outputs[0].token_ids) for o in outs) / (clock() - start))
    medians = {name: statistics.median(r) for name, r in rates.items()}
    noise = max((max(r) - min(r)) / medians[name] for name, r in rates.items())
    return medians, noise


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="HF folder (default: the demo model)")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="torch threads")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="cpu: tokens per second of this process's CPU time")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    from thinkgate import LLM

    llm = LLM(model=args.model, max_num_seqs=64)
    clock = time.process_time if args.clock == "cpu" else time.perf_counter
    print(f"# bench_sampling: {args.model or 'demo model'}, {args.new_tokens} tokens, "
          f"threads {torch.get_num_threads()}, clock {args.clock}, medians of {args.repeats}")
    names = list(SETTINGS)
    print("| batch | " + " | ".join(names) + " | noise |")
    print("|---:|" + "---:|" * (len(names) + 1))
    for batch in args.batches:
        prompts = make_prompts(llm.llm_engine.vocab_size, batch, 16)
        r, noise = measure(llm, prompts, args.new_tokens, args.repeats, clock)
        cells = [f"{r['greedy']:.0f}"] + [
            f"{r[n]:.0f} ({r['greedy'] / r[n]:.2f}x)" for n in names[1:]] + [f"{noise:.0%}"]
        print(f"| {batch} | " + " | ".join(cells) + " |", flush=True)
    print("cells: tokens/s (step cost relative to greedy); noise: the widest (max - min) / "
          "median of one cell's runs")


if __name__ == "__main__":
    main()
