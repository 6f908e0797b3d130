"""The CPU decode step through torch.compile: same tokens as eager, every graph built at start.

One compiled engine for the module (its warm-up compiles 3 graphs: 10-100 s on this machine,
less once TorchInductor's on-disk cache has them), compared with an eager one on the demo model.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from thinkgate.engine.config import EngineConfig
from thinkgate.engine.model.compiled_decode import compiler_available
from thinkgate.engine.sampling_params import SamplingParams

pytestmark = pytest.mark.skipif(not compiler_available(),
                                reason="TorchInductor's CPU backend needs a C++ compiler")

PROMPTS = [
    "Hi",
    "Tell me about the weather in Paris today",
    "Write a very long story about a lighthouse keeper who counts the waves at night",
    "What is 2 + 2?",
    "List three colours",
]


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread() -> Any:
    """The module's engines compile and run on one torch thread, as `thinkgate serve`'s engine
    core runs the demo model: TorchInductor's CPU code (and its on-disk cache key) depends on
    the thread count, so the default graph here reuses what tests/api/test_compiled_server.py
    compiled (on an empty cache: 28 s against 70 s at load 8)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def compiled(demo_dir: str) -> Any:
    from thinkgate import LLM

    return LLM(model=demo_dir, max_num_seqs=8, enforce_eager=False)


@pytest.fixture(scope="module")
def compiled_paged(demo_dir: str) -> Any:
    from thinkgate import LLM

    return LLM(model=demo_dir, max_num_seqs=8, enforce_eager=False, kv_layout="paged")


@pytest.fixture(scope="module")
def eager(demo_dir: str) -> Any:
    from thinkgate import LLM

    return LLM(model=demo_dir, max_num_seqs=8, enforce_eager=True)


def _graphs() -> int:
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def _run(llm: Any, params: SamplingParams) -> list[Any]:
    return [out.outputs for out in llm.generate(PROMPTS, params, use_tqdm=False)]


def test_the_compiled_engine_compiles_and_the_eager_one_does_not(compiled: Any,
                                                                 eager: Any) -> None:
    assert compiled.llm_engine.runner.compiled_decode is not None
    assert compiled.llm_engine.runner.compiled_decode.ready
    assert eager.llm_engine.runner.compiled_decode is None


def test_greedy_tokens_and_logprobs_match_eager(compiled: Any, eager: Any) -> None:
    params = SamplingParams(max_tokens=24, temperature=0, ignore_eos=True, logprobs=1)
    ours, theirs = _run(compiled, params), _run(eager, params)
    for a, b in zip(ours, theirs):
        assert a[0].token_ids == b[0].token_ids
        for tok, step_a, step_b in zip(a[0].token_ids, a[0].logprobs, b[0].logprobs):
            assert abs(step_a[tok].logprob - step_b[tok].logprob) < 1e-3


def test_the_paged_layout_compiles_and_matches_eager(compiled_paged: Any, eager: Any) -> None:
    from thinkgate.engine.kv.kv_cache import KVCache

    engine = compiled_paged.llm_engine
    assert isinstance(engine.kv_cache, KVCache) and engine.runner.compiled_decode is not None
    params = SamplingParams(max_tokens=40, temperature=0, ignore_eos=True)  # > 2 blocks of 16
    before = _graphs()
    assert ([o[0].token_ids for o in _run(compiled_paged, params)]
            == [o[0].token_ids for o in _run(eager, params)])
    assert _graphs() == before


def test_seeded_sampling_matches_eager_with_n_and_ragged_rows(compiled: Any, eager: Any) -> None:
    params = SamplingParams(max_tokens=20, temperature=1.0, top_p=0.9, seed=7, n=2,
                            ignore_eos=True)
    ours, theirs = _run(compiled, params), _run(eager, params)
    assert [[c.token_ids for c in o] for o in ours] == [[c.token_ids for c in o] for o in theirs]


def test_no_compile_after_warm_up(compiled: Any) -> None:
    before = _graphs()
    for count in (1, 3, 5):  # batch sizes 1 to 5, equal and ragged rows, growing key counts
        compiled.generate(PROMPTS[:count], SamplingParams(max_tokens=12, temperature=0),
                          use_tqdm=False)
    assert _graphs() == before


def test_cached_prefix_prefills_run_compiled_and_match_eager(compiled: Any, eager: Any) -> None:
    import random

    runner = compiled.llm_engine.runner
    assert runner.compiled_prefill is not None and runner.compiled_prefill.ready
    assert eager.llm_engine.runner.compiled_prefill is None
    rng = random.Random(3)
    prefix = [rng.randrange(10, 4000) for _ in range(180)]  # cached after the first request
    prompts = [prefix + [rng.randrange(10, 4000) for _ in range(n)] for n in (2, 3, 17, 40, 9)]
    params = SamplingParams(max_tokens=6, temperature=0, ignore_eos=True, logprobs=1)
    for llm in (compiled, eager):  # the prefix's blocks into both caches
        llm.generate([prefix + [11]], SamplingParams(max_tokens=1), use_tqdm=False)
    before, steps = _graphs(), runner.compiled_prefill.num_steps
    for batch in ([p] for p in prompts), [prompts[:3], prompts[2:]]:  # one row, then several
        for group in batch:
            ours = compiled.generate(group, params, use_tqdm=False)
            theirs = eager.generate(group, params, use_tqdm=False)
            for a, b in zip(ours, theirs):
                assert a.num_cached_tokens > 0 and b.num_cached_tokens > 0
                assert a.outputs[0].token_ids == b.outputs[0].token_ids
                for tok, la, lb in zip(a.outputs[0].token_ids, a.outputs[0].logprobs,
                                       b.outputs[0].logprobs):
                    assert abs(la[tok].logprob - lb[tok].logprob) < 1e-3
    assert runner.compiled_prefill.num_steps - steps >= len(prompts) + 2
    assert _graphs() == before  # warm-up built every graph these steps needed


def test_a_long_cached_prefix_prefill_stays_compiled_on_the_fast_fp32_path(
        compiled: Any, eager: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A long new tail after a cached prefix runs the compiled masked prefill through
    long_forward's fast fp32 path where this CPU keeps fp32 accuracy there: no new graph, and
    the eager engine's tokens and logprobs."""
    import random

    from thinkgate.engine.model import model_runner

    runner = compiled.llm_engine.runner
    seen: list[tuple[bool, int | None, bool]] = []
    real = model_runner.wide_forward

    def spy(run: Any, threads: int | None, fast: bool, *args: Any) -> Any:
        seen.append((run is runner.compiled_prefill, threads, fast))
        return real(run, threads, fast, *args)

    monkeypatch.setattr(model_runner, "wide_forward", spy)
    rng = random.Random(4)
    prefix = [rng.randrange(10, 4000) for _ in range(180)]
    prompt = prefix + [rng.randrange(10, 4000) for _ in range(model_runner.PREFILL_TOKENS + 40)]
    params = SamplingParams(max_tokens=4, temperature=0, ignore_eos=True, logprobs=1)
    for llm in (compiled, eager):
        llm.generate([prefix + [11]], SamplingParams(max_tokens=1), use_tqdm=False)
    before, steps = _graphs(), runner.compiled_prefill.num_steps
    seen.clear()
    ours = compiled.generate([prompt], params, use_tqdm=False)[0]
    theirs = eager.generate([prompt], params, use_tqdm=False)[0]
    assert ours.num_cached_tokens > 0 and runner.compiled_prefill.num_steps > steps
    assert _graphs() == before
    assert ((True, None, True) in seen) == runner.fast_fp32
    assert ours.outputs[0].token_ids == theirs.outputs[0].token_ids
    for tok, la, lb in zip(ours.outputs[0].token_ids, ours.outputs[0].logprobs,
                           theirs.outputs[0].logprobs):
        assert abs(la[tok].logprob - lb[tok].logprob) < 1e-3


def test_a_long_fresh_prompt_runs_its_own_compiled_graph(
        compiled: Any, eager: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """One row's fresh prefill of PREFILL_TOKENS or more runs the `fresh` graph, compiled
    before serving at the thread count long prefills use: no new graph, eager's tokens."""
    import random

    from thinkgate.engine.model import model_runner

    runner = compiled.llm_engine.runner
    fresh = runner.compiled_prefill.fresh
    assert runner.compiled_prefill.fresh_threads
    seen: list[tuple[bool, int | None]] = []
    real = model_runner.wide_forward

    def spy(run: Any, threads: int | None, fast: bool, *args: Any) -> Any:
        seen.append((run is fresh, threads))
        return real(run, threads, fast, *args)

    monkeypatch.setattr(model_runner, "wide_forward", spy)
    rng = random.Random(7)
    params = SamplingParams(max_tokens=6, temperature=0, ignore_eos=True, logprobs=1)
    before = _graphs()
    for n in (model_runner.PREFILL_TOKENS + 3, model_runner.PREFILL_TOKENS + 150):
        prompt = [rng.randrange(10, 4000) for _ in range(n)]
        compiled.reset_prefix_cache()
        ours = compiled.generate([prompt], params, use_tqdm=False)[0].outputs[0]
        theirs = eager.generate([prompt], params, use_tqdm=False)[0].outputs[0]
        assert ours.token_ids == theirs.token_ids
        for tok, la, lb in zip(ours.token_ids, ours.logprobs, theirs.logprobs):
            assert abs(la[tok].logprob - lb[tok].logprob) < 1e-3
    assert _graphs() == before
    assert seen.count((True, runner.compiled_prefill.fresh_threads)) == 2


def test_enforce_eager_default_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("THINKGATE_ENFORCE_EAGER", "1")
    assert EngineConfig().enforce_eager is True
    monkeypatch.setenv("THINKGATE_ENFORCE_EAGER", "0")
    assert EngineConfig().enforce_eager is False
    monkeypatch.delenv("THINKGATE_ENFORCE_EAGER")
    assert EngineConfig().enforce_eager is False
    assert EngineConfig(enforce_eager=True).enforce_eager is True


def test_without_a_compiler_the_engine_runs_eagerly(demo_dir: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from thinkgate import LLM

    monkeypatch.setenv("PATH", os.devnull)  # no g++ / c++ / clang++ to find
    llm = LLM(model=demo_dir, max_num_seqs=2, enforce_eager=False)
    assert llm.llm_engine.runner.compiled_decode is None
    assert llm.llm_engine.runner.compiled_prefill is None
    params = SamplingParams(max_tokens=4, temperature=0, ignore_eos=True)
    assert len(llm.generate(["Hi"], params, use_tqdm=False)[0].outputs[0].token_ids) == 4
