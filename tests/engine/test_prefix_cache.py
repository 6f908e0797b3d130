"""Automatic prefix caching: the same tokens as without it, block sharing, eviction, lifetimes."""

from __future__ import annotations

import random
from typing import Any

import pytest
from thinkgate import LLM, SamplingParams
from thinkgate.engine.config import EngineConfig
from thinkgate.engine.kv.prefix_cache import BlockPool, chain_hash, extend_block_hashes

LAYOUTS = ("contiguous", "paged")
rng = random.Random(17)
SYSTEM = [rng.randrange(10, 4000) for _ in range(200)]  # a shared "system prompt"


def tail(n: int, seed: int) -> list[int]:
    r = random.Random(seed)
    return [r.randrange(10, 4000) for _ in range(n)]


def greedy(max_tokens: int = 8, **kw: Any) -> SamplingParams:
    return SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True, logprobs=1, **kw)


def run(llm: LLM, prompts: list[list[int]], params: Any) -> list[list[tuple[list[int], list]]]:
    outs = llm.generate(prompts, params, use_tqdm=False)
    return [[(c.token_ids, [lp[t].logprob for lp, t in zip(c.logprobs, c.token_ids)])
             for c in o.outputs] for o in outs]


def assert_same(got: list, want: list) -> None:
    """Identical tokens; logprobs equal up to float rounding (attention over a loaded prefix
    runs with a mask instead of the causal kernel)."""
    assert [[s[0] for s in o] for o in got] == [[s[0] for s in o] for o in want]
    for o, w in zip(got, want):
        for (_, lp), (_, wlp) in zip(o, w):
            assert lp == pytest.approx(wlp, abs=1e-3)


def check_blocks(llm: LLM) -> None:
    """No block in use is free: reference counts equal the block tables holding each block."""
    engine = llm.llm_engine
    pool = engine.block_manager.pool
    held = [0] * pool.num_blocks
    for seq in engine.scheduler.running:
        for block in seq.block_table:
            held[block] += 1
    assert held == pool.ref_counts
    free = list(pool.plain_free) + list(pool.cached_free)
    assert len(free) == len(set(free)) and all(held[b] == 0 for b in free)
    assert len(free) + sum(1 for h in held if h) == pool.num_blocks
    store = engine.row_store
    if store is not None:  # between steps nothing stays pinned
        assert not any(store.pool.ref_counts)


@pytest.fixture(scope="module")
def plain(demo_dir: str) -> LLM:
    return LLM(model=demo_dir, enable_prefix_caching=False, max_num_seqs=16)


@pytest.fixture(scope="module", params=LAYOUTS)
def cached(request: pytest.FixtureRequest, demo_dir: str) -> LLM:
    return LLM(model=demo_dir, kv_layout=request.param, max_num_seqs=16)


def test_block_pool_reference_counts_and_lru_eviction() -> None:
    pool = BlockPool(3)
    a, b, c = pool.take(), pool.take(), pool.take()
    assert pool.num_free == 0
    with pytest.raises(RuntimeError):
        pool.take()
    for block, name in ((a, b"a"), (b, b"b"), (c, b"c")):
        assert pool.register(block, name)
    assert not pool.register(a, b"b") and pool.register(a, b"a")  # a keeps its one hash
    pool.acquire(a)  # a shared by two holders
    pool.release(a)
    assert pool.num_free == 0 and pool.match([b"a", b"b"]) == [a, b]
    pool.release(b)
    pool.release(a)
    pool.release(c)  # released order b, a, c: b is the least recently used
    assert pool.num_free == 3 and pool.match([b"a", b"b", b"c"]) == [a, b, c]
    pool.acquire(b)  # a hit takes b back out of the free list...
    pool.release(b)  # ...and its release makes it the most recent
    assert pool.take() == a and pool.num_evictions == 1
    assert pool.match([b"a"]) == [] and pool.match([b"c", b"b"]) == [c, b]
    assert pool.by_hash == {b"b": b, b"c": c}


def test_hashes_chain_over_every_earlier_token() -> None:
    ids = list(range(40))
    hashes = extend_block_hashes([], ids, 16, 2)
    assert len(hashes) == 2 and hashes[0] == chain_hash(None, ids[:16])
    other = extend_block_hashes([], [99] + ids[1:], 16, 2)
    assert other[1] != hashes[1]  # same second block, different first: different hash
    assert extend_block_hashes(list(hashes), ids, 16, 2) == hashes


def test_greedy_tokens_and_logprobs_match_without_cache(plain: LLM, cached: LLM) -> None:
    prompts = [SYSTEM + tail(n, n) for n in (1, 7, 16, 33)] + [SYSTEM[:64], SYSTEM[:9]]
    want = run(plain, prompts, greedy())
    before = cached.llm_engine.stats()["prefix_cache_hits"]
    for prompt, expected in zip(prompts, want):  # one by one: each reuses the ones before
        assert_same(run(cached, [prompt], greedy()), [expected])
        check_blocks(cached)
    assert_same(run(cached, prompts, greedy()), want)  # again, all at once
    stats = cached.llm_engine.stats()
    assert stats["prefix_cache_hits"] - before >= 7 * 192  # the 200-token prefix: 12 blocks
    assert stats["prefix_cache_queries"] >= stats["prefix_cache_hits"]
    assert plain.llm_engine.stats()["prefix_cache_hits"] == 0


def test_a_fully_cached_prompt_still_computes_its_last_token(cached: LLM) -> None:
    prompt = SYSTEM[:48]  # exactly three blocks
    run(cached, [prompt], greedy(2))
    out = cached.generate([prompt], greedy(2), use_tqdm=False)[0]
    assert out.num_cached_tokens == 32  # the block holding the last token is recomputed


def test_concurrent_requests_sharing_a_prefix(plain: LLM, cached: LLM) -> None:
    cached.reset_prefix_cache()
    prompts = [SYSTEM + tail(5 + i, 100 + i) for i in range(8)]
    want = run(plain, prompts, greedy(12))
    engine = cached.llm_engine
    before = engine.stats()["prefix_cache_hits"]
    for i, prompt in enumerate(prompts):
        engine.add_request(f"c{i}", prompt, greedy(12))
    done: dict[str, Any] = {}
    while engine.has_unfinished_requests():
        for out in engine.step():
            if out.finished:
                done[out.request_id] = out
        check_blocks(cached)
    got = [[(c.token_ids, [lp[t].logprob for lp, t in zip(c.logprobs, c.token_ids)])
            for c in done[f"c{i}"].outputs] for i in range(8)]
    assert_same(got, want)
    # the first computes the prefix; the other seven read its 12 blocks (paged: in the same
    # step; contiguous: in the next one)
    assert engine.stats()["prefix_cache_hits"] - before == 7 * 192
    assert sorted(done[f"c{i}"].num_cached_tokens for i in range(8)) == [0] + [192] * 7


def test_cached_tokens_do_not_count_against_the_step_budget(demo_dir: str) -> None:
    llm = LLM(model=demo_dir, kv_layout="paged", max_model_len=256, max_num_batched_tokens=256)
    engine = llm.llm_engine
    for i in range(4):  # 205-208 tokens each: one fits the budget, unless cached
        engine.add_request(f"b{i}", SYSTEM + tail(5 + i, 200 + i), greedy(2))
    engine.step()
    assert len(engine.scheduler.running) == 4 and not engine.scheduler.waiting
    while engine.has_unfinished_requests():
        engine.step()


def test_n_greater_than_one_shares_the_prompt(plain: LLM, cached: LLM) -> None:
    cached.llm_engine.reset_prefix_cache()
    prompt = SYSTEM + tail(20, 5)
    seeded = SamplingParams(n=3, temperature=1.0, seed=3, max_tokens=10, ignore_eos=True,
                            logprobs=1)
    for params in (greedy(10, n=3), seeded):
        before = cached.llm_engine.stats()["prefix_cache_hits"]
        assert_same(run(cached, [prompt], params), run(plain, [prompt], params))
        assert cached.llm_engine.stats()["prefix_cache_hits"] - before >= 2 * 208


def test_finished_and_running_requests_share_blocks(plain: LLM, demo_dir: str) -> None:
    llm = LLM(model=demo_dir, kv_layout="paged", max_num_seqs=16)
    engine = llm.llm_engine
    first = SYSTEM + tail(3, 1)
    want = run(plain, [first, SYSTEM + tail(4, 2), SYSTEM + tail(5, 3)], greedy(12))
    engine.add_request("finished", first, greedy(12))
    while engine.has_unfinished_requests():
        engine.step()
    engine.add_request("running", SYSTEM + tail(4, 2), greedy(12))
    for _ in range(3):
        engine.step()
    running = engine.scheduler.running[0]
    shared = running.block_table[:12]
    assert all(engine.block_manager.pool.ref_counts[b] == 1 for b in shared)
    engine.add_request("late", SYSTEM + tail(5, 3), greedy(12))
    engine.step()  # the late one's prefill: it holds the same 12 blocks
    assert all(engine.block_manager.pool.ref_counts[b] == 2 for b in shared)
    check_blocks(llm)
    outs: dict[str, Any] = {}
    while engine.has_unfinished_requests():
        for out in engine.step():
            outs[out.request_id] = out
        check_blocks(llm)
    assert outs["running"].outputs[0].token_ids == want[1][0][0]
    assert outs["late"].outputs[0].token_ids == want[2][0][0]
    assert outs["late"].num_cached_tokens == 192


@pytest.mark.parametrize("layout", LAYOUTS)
def test_eviction_under_memory_pressure(plain: LLM, demo_dir: str, layout: str) -> None:
    # paged: 12 blocks of 16 tokens; contiguous: 4 rows of 64 tokens and a 16-block pool
    kw = ({"num_kv_blocks": 12} if layout == "paged" else
          {"kv_cache_memory_bytes": 1 << 20, "max_num_seqs": 4})
    llm = LLM(model=demo_dir, kv_layout=layout, max_model_len=64, **kw)
    store = llm.llm_engine.row_store
    pool = store.pool if store is not None else llm.llm_engine.block_manager.pool
    prompts = [tail(50, 1000 + i) for i in range(6)]
    want = run(plain, prompts, greedy(3))
    for prompt, expected in zip(prompts, want):  # each leaves 3 cached blocks behind
        assert_same(run(llm, [prompt], greedy(3)), [expected])
        check_blocks(llm)
    assert pool.num_evictions > 0
    hits = llm.llm_engine.stats()["prefix_cache_hits"]
    assert_same(run(llm, prompts[-1:], greedy(3)), want[-1:])  # the newest is still cached
    assert llm.llm_engine.stats()["prefix_cache_hits"] == hits + 48
    assert_same(run(llm, prompts[:1], greedy(3)), want[:1])  # the oldest was evicted
    assert llm.llm_engine.stats()["prefix_cache_hits"] == hits + 48
    assert_same(run(llm, prompts, greedy(3)), want)  # all at once, reusing what fits
    check_blocks(llm)


def test_preemption_and_abort_with_shared_blocks(plain: LLM, demo_dir: str) -> None:
    prefix = tail(32, 7)
    prompts = [prefix + tail(3 + i, 50 + i) for i in range(6)]
    want = run(plain, prompts, greedy(20))
    small = LLM(model=demo_dir, kv_layout="paged", num_kv_blocks=10, max_model_len=64)
    engine = small.llm_engine
    for i, prompt in enumerate(prompts):
        engine.add_request(f"p{i}", prompt, greedy(20))
    outs: dict[str, Any] = {}
    steps = 0
    while engine.has_unfinished_requests():
        for out in engine.step():
            outs[out.request_id] = out
        steps += 1
        if steps == 6:  # p1 shares the prefix blocks with the others
            aborted = engine.abort_request("p1")
            assert aborted is not None and aborted.outputs[0].finish_reason == "abort"
        check_blocks(small)
    assert engine.scheduler.num_preemptions > 0
    for i in (0, 2, 3, 4, 5):
        assert outs[f"p{i}"].outputs[0].token_ids == want[i][0][0]
    assert "p1" not in outs or not outs["p1"].finished
    assert engine.block_manager.num_free_blocks == 10
    assert engine.stats()["prefix_cache_hits"] > 0


def test_the_switch(demo_dir: str) -> None:
    with pytest.raises(ValueError, match="enable_prefix_caching"):
        EngineConfig(enable_prefix_caching="yes")  # type: ignore[arg-type]
    import argparse

    from thinkgate.api.cli_args import add_model_args
    from thinkgate.api.launch import engine_kwargs

    p = argparse.ArgumentParser()
    add_model_args(p)
    assert engine_kwargs(p.parse_args([]))["enable_prefix_caching"] is True
    off = p.parse_args(["--no-enable-prefix-caching"])
    assert engine_kwargs(off)["enable_prefix_caching"] is False
