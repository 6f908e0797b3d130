"""Engine throughput: output tokens/s of `LLM.generate` vs transformers' `generate()`.

Greedy decoding of fixed-length prompts to a fixed number of new tokens (EOS ignored), batch
1, 8 and 32, both measured in this run on the same model and threads; each cell is the median
of `--repeats` timed runs after one warm-up, the two engines alternating run by run (so load
from other jobs hits both alike). Prints a markdown table; `--json` writes the rows.

    python -m thinkgate.benchmarks.bench_engine [--model DIR] [--new-tokens 128]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

VLLM_CPU_ANCHORS = {1: 300.0, 8: 1900.0}  # vLLM's CPU build on this class of 2-core machine


def make_prompts(vocab_size: int, batch: int, prompt_len: int) -> list[list[int]]:
    gen = torch.Generator().manual_seed(batch)
    ids = torch.randint(10, min(vocab_size, 4000), (batch, prompt_len), generator=gen)
    return ids.tolist()


def timed_pair(
    first: Callable[[], int], second: Callable[[], int], repeats: int, clock: Callable[[], float]
) -> tuple[float, float]:
    """Median tokens/s of two runners (each returns the tokens it produced), timed alternately
    so that load from other jobs on a shared machine hits both alike."""
    first()  # warm-up
    second()
    rates: tuple[list[float], list[float]] = ([], [])
    for _ in range(repeats):
        for fn, out in ((first, rates[0]), (second, rates[1])):
            start = clock()
            produced = fn()
            out.append(produced / (clock() - start))
    return statistics.median(rates[0]), statistics.median(rates[1])


def thinkgate_runner(llm: Any, prompts: list[list[int]], new_tokens: int) -> Callable[[], int]:
    from thinkgate import SamplingParams

    params = SamplingParams(temperature=0, max_tokens=new_tokens, ignore_eos=True)

    def run() -> int:
        outs = llm.generate(prompts, params, use_tqdm=False)
        return sum(len(o.outputs[0].token_ids) for o in outs)

    return run


def transformers_runner(model: Any, prompts: list[list[int]], new_tokens: int) -> Callable[[], int]:
    input_ids = torch.tensor(prompts)
    attention_mask = torch.ones_like(input_ids)

    def run() -> int:
        with torch.inference_mode():
            out = model.generate(
                input_ids=input_ids,
                attention_mask=attention_mask,
                max_new_tokens=new_tokens,
                min_new_tokens=new_tokens,
                do_sample=False,
                pad_token_id=0,
            )
        return (out.shape[1] - input_ids.shape[1]) * out.shape[0]

    return run


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="HF folder (default: the demo model)")
    parser.add_argument("--batches", default="1,8,32")
    parser.add_argument("--prompt-len", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="cpu: tokens per second of this process's CPU time (steadier on a shared machine)",
    )
    parser.add_argument("--threads", type=int, default=None, help="torch threads (both sides)")
    parser.add_argument("--json", default=None, help="write the rows here")
    parser.add_argument("--constrained", action=argparse.BooleanOptionalAction, default=True,
                        help="then the JSON-schema-constrained vs plain rows (bench_constrained)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    from thinkgate import LLM
    from thinkgate.engine.demo import demo_model_path
    from transformers import AutoModelForCausalLM

    model_dir = args.model or demo_model_path()
    llm = LLM(model=model_dir, max_num_seqs=64)
    hf_model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    vocab = llm.llm_engine.vocab_size
    rows = []
    for batch in (int(b) for b in args.batches.split(",")):
        prompts = make_prompts(vocab, batch, args.prompt_len)
        ours, theirs = timed_pair(
            thinkgate_runner(llm, prompts, args.new_tokens),
            transformers_runner(hf_model, prompts, args.new_tokens),
            args.repeats,
            time.process_time if args.clock == "cpu" else time.perf_counter,
        )
        rows.append(
            {
                "batch": batch,
                "thinkgate": ours,
                "transformers": theirs,
                "ratio": ours / theirs,
                "vllm_cpu_anchor": VLLM_CPU_ANCHORS.get(batch),
            }
        )
    print(
        f"model={model_dir} torch={torch.__version__} threads={torch.get_num_threads()} "
        f"cpu={platform.processor() or platform.machine()} prompt_len={args.prompt_len} "
        f"new_tokens={args.new_tokens} repeats={args.repeats} clock={args.clock} (medians)"
    )
    print("| batch | thinkgate tok/s | transformers tok/s | ratio | vLLM CPU anchor |")
    print("|---:|---:|---:|---:|---:|")
    for r in rows:
        anchor = f"{r['vllm_cpu_anchor']:.0f}" if r["vllm_cpu_anchor"] else "-"
        print(
            f"| {r['batch']} | {r['thinkgate']:.0f} | {r['transformers']:.0f} | "
            f"{r['ratio']:.2f}x | {anchor} |"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    if args.constrained:
        from thinkgate.benchmarks import bench_constrained

        print("\nconstrained rows (demo model, JSON schema vs plain, greedy):")
        threads = ["--threads", str(args.threads)] if args.threads else []
        bench_constrained.main(["--batches", *args.batches.split(","), *threads])


if __name__ == "__main__":
    main()
