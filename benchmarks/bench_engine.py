"""Engine throughput: output tokens/s of `LLM.generate` vs transformers' `generate()`.

Greedy decoding of fixed-length prompts to a fixed number of new tokens (EOS ignored), batch
1, 8 and 32, both measured in this run on the same model and threads; each cell is the median
of `--repeats` timed runs after one warm-up. Prints a markdown table; `--json` writes the rows.

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


def timed(fn: Callable[[], int], repeats: int) -> float:
    """Median tokens/s of `fn` (which returns the number of tokens it produced)."""
    fn()  # warm-up
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        produced = fn()
        rates.append(produced / (time.perf_counter() - start))
    return statistics.median(rates)


def bench_thinkgate(llm: Any, prompts: list[list[int]], new_tokens: int, repeats: int) -> float:
    from thinkgate import SamplingParams

    params = SamplingParams(temperature=0, max_tokens=new_tokens, ignore_eos=True)

    def run() -> int:
        outs = llm.generate(prompts, params, use_tqdm=False)
        return sum(len(o.outputs[0].token_ids) for o in outs)

    return timed(run, repeats)


def bench_transformers(
    model: Any, prompts: list[list[int]], new_tokens: int, repeats: int
) -> float:
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

    return timed(run, repeats)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="HF folder (default: the demo model)")
    parser.add_argument("--batches", default="1,8,32")
    parser.add_argument("--prompt-len", type=int, default=16)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (both sides)")
    parser.add_argument("--json", default=None, help="write the rows here")
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
        ours = bench_thinkgate(llm, prompts, args.new_tokens, args.repeats)
        theirs = bench_transformers(hf_model, prompts, args.new_tokens, args.repeats)
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
        f"new_tokens={args.new_tokens} repeats={args.repeats} (medians)"
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


if __name__ == "__main__":
    main()
