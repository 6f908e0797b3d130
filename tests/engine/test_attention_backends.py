"""TRITON_ATTN (paged kernels reading K/V in place) == TORCH_SDPA (gather + SDPA), on CPU.

Under TRITON_INTERPRET=1 (`make test`) the paged path runs the interpreted Triton kernels,
otherwise their torch twins; the gather path is the engine's CPU attention either way.
"""

from __future__ import annotations

import pytest
import torch
from thinkgate import LLM, SamplingParams
from thinkgate.engine.config import EngineConfig
from thinkgate.engine.kv.kv_cache import build_attention_metadata, paged_attention
from thinkgate.engine.model.cuda_graphs import attention_plan

pytestmark = pytest.mark.triton_path  # the subject is the Triton kernels' path

PROMPTS = ["hello", "What is the weather in Paris?", "1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16"]


def _step(context: list[int], new: list[int], gen: torch.Generator, paged: bool):
    """One layer's attention for rows with `new` tokens after `context - new` cached ones, on
    a cache whose blocks are scattered; returns (output (B, T, H * D), the cache K)."""
    heads, kv_heads, dim, block_size = 4, 2, 32, 16
    need = [-(-n // block_size) for n in context]
    pool = sum(need)
    k_cache = torch.randn(pool + 1, block_size, kv_heads, dim, generator=gen)
    v_cache = torch.randn(pool + 1, block_size, kv_heads, dim, generator=gen)
    order = torch.randperm(pool, generator=gen).tolist()
    width, tables, slots, positions, start = max(need), [], [], [], 0
    t = max(new)
    for n, m, blocks in zip(context, new, need):
        table = order[start:start + blocks]
        start += blocks
        tables.append(table + [pool] * (width - blocks))
        pos = list(range(n - m, n))
        positions.append(pos + [0] * (t - m))
        slots += [table[p // block_size] * block_size + p % block_size for p in pos]
        slots += [pool * block_size] * (t - m)  # padding writes the scratch block
    b = len(context)
    q = torch.randn(b, t, heads, dim, generator=gen)
    k = torch.randn(b, t, kv_heads, dim, generator=gen)
    v = torch.randn(b, t, kv_heads, dim, generator=gen)
    fresh = context == new
    meta = build_attention_metadata(torch.tensor(positions), torch.tensor(slots),
                                    torch.tensor(tables), context, fresh, paged_kernels=paged)
    assert (meta.context_lens is not None) == paged
    return paged_attention(q, k, v, k_cache, v_cache, meta), k_cache


@pytest.mark.parametrize(("context", "new"), [
    ([5, 17, 40], [5, 17, 40]),  # fresh prefill, ragged
    ([33, 20, 48], [3, 20, 16]),  # chunked / prefix-cache hit / fresh in one batch
    ([1, 16, 17, 50], [1, 1, 1, 1]),  # decode
])
def test_paged_kernels_match_the_gather_path(context: list[int], new: list[int]) -> None:
    ours, k_ours = _step(context, new, torch.Generator().manual_seed(7), paged=True)
    want, k_want = _step(context, new, torch.Generator().manual_seed(7), paged=False)
    assert torch.equal(k_ours, k_want)  # both wrote the new keys to the same slots
    for row, m in enumerate(new):  # padding rows are garbage on the gather path, never read
        torch.testing.assert_close(ours[row, :m], want[row, :m], rtol=2e-5, atol=2e-5)


def _greedy(llm: LLM, prompts: list[str], max_tokens: int = 6) -> list[list[int]]:
    params = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
    return [o.outputs[0].token_ids for o in llm.generate(prompts, params, use_tqdm=False)]


def _gather_llm(llm: LLM, demo_dir: str) -> LLM:
    """The shared demo engine on CPU (its default is the gather path); on CUDA a new one."""
    if llm.llm_engine.device.type == "cpu":
        return llm
    return LLM(model=demo_dir, attention_backend="TORCH_SDPA", max_num_seqs=8,
               kv_cache_memory_bytes=256 << 20)


def test_the_engine_gives_the_gather_paths_tokens(triton_llm: LLM, llm: LLM,
                                                  demo_dir: str) -> None:
    runner = triton_llm.llm_engine.runner
    on_cuda = triton_llm.llm_engine.device.type == "cuda"
    assert runner.paged_kernels and (runner.graphs is not None) == on_cuda  # CPU: eager
    gather = _gather_llm(llm, demo_dir)
    assert not gather.llm_engine.runner.paged_kernels
    assert _greedy(triton_llm, PROMPTS) == _greedy(gather, PROMPTS)


@pytest.mark.slow  # ~70 s under the interpreter on 2 busy cores
def test_preempted_sequences_recompute_through_the_kernels(demo_dir: str, llm: LLM) -> None:
    # three sequences of two blocks each in three blocks: someone is preempted and recomputed
    small = LLM(model=demo_dir, attention_backend="TRITON_ATTN", num_kv_blocks=3,
                block_size=16, max_model_len=48)
    prompts = ["hello", "hi there", "1 2"]
    assert _greedy(small, prompts, 24) == _greedy(_gather_llm(llm, demo_dir), prompts, 24)
    assert small.llm_engine.scheduler.num_preemptions > 0


def test_attention_plan() -> None:
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert attention_plan(None, False, cuda, True, True, 16, 128) == (True, True)
    assert attention_plan(None, True, cuda, True, True, 16, 128) == (True, False)  # eager
    assert attention_plan("TORCH_SDPA", False, cuda, True, True, 16, 128) == (False, False)
    assert attention_plan(None, False, cuda, True, True, 8, 128) == (False, False)  # tiles
    assert attention_plan(None, False, cpu, True, True, 16, 128) == (False, False)
    assert attention_plan("TRITON_ATTN", False, cpu, True, True, 1, 8) == (True, False)
    with pytest.raises(ValueError, match="block_size and head_dim >= 16 on CUDA"):
        attention_plan("TRITON_ATTN", False, cuda, True, True, 8, 128)
    with pytest.raises(ValueError, match="kv_layout 'paged'.*paged=False"):
        attention_plan("TRITON_ATTN", False, cpu, False, True, 16, 128)


def test_config_checks_the_new_fields(demo_dir: str) -> None:
    with pytest.raises(ValueError, match="attention_backend must be one of .*'FLASH_ATTN'"):
        EngineConfig(attention_backend="FLASH_ATTN")
    with pytest.raises(ValueError, match="enforce_eager must be a bool, got 'yes'"):
        EngineConfig(enforce_eager="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="TRITON_ATTN"):
        LLM(model=demo_dir, attention_backend="TRITON_ATTN", kv_layout="contiguous")
    eager = LLM(model=demo_dir, enforce_eager=True, attention_backend="TORCH_SDPA",
                kv_layout="paged", max_model_len=64)
    config, runner = eager.llm_engine.config, eager.llm_engine.runner
    assert config.enforce_eager and config.attention_backend == "TORCH_SDPA"
    assert not runner.paged_kernels and runner.graphs is None


def test_cli_flags_reach_the_engine_config() -> None:
    import argparse

    from thinkgate.api.cli_args import add_model_args
    from thinkgate.api.launch import engine_kwargs

    parser = argparse.ArgumentParser()
    add_model_args(parser, positional=False)
    ns = parser.parse_args(["--enforce-eager", "--attention-backend", "TORCH_SDPA"])
    kwargs = engine_kwargs(ns)
    assert (kwargs["enforce_eager"], kwargs["attention_backend"]) == (True, "TORCH_SDPA")
    config = EngineConfig(**kwargs)
    assert config.enforce_eager and config.attention_backend == "TORCH_SDPA"
    assert not engine_kwargs(parser.parse_args([]))["enforce_eager"]
