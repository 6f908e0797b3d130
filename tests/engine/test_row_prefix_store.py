"""The contiguous layout's row reuse (engine/kv/row_prefix_store.py): a freed row keeps its K/V, and
`load` copies only the cached blocks the row does not hold already."""

from __future__ import annotations

import random

import pytest
import torch
from thinkgate import LLM, SamplingParams

rng = random.Random(5)
PREFIXES = [[rng.randrange(10, 4000) for _ in range(n)] for n in (96, 160, 64)]


def prompt(prefix: int, seed: int, extra: int = 9) -> list[int]:
    r = random.Random(seed)
    return PREFIXES[prefix] + [r.randrange(10, 4000) for _ in range(extra)]


def greedy(max_tokens: int) -> SamplingParams:
    return SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)


@pytest.fixture(scope="module")
def plain(demo_dir: str) -> LLM:
    return LLM(model=demo_dir, enable_prefix_caching=False, max_num_seqs=8)


def cached(demo_dir: str) -> LLM:
    llm = LLM(model=demo_dir, kv_layout="contiguous", max_num_seqs=8)
    assert llm.llm_engine.row_store is not None
    return llm


def check_rows(llm: LLM) -> None:
    """Every block a row's record names holds that block's K/V (the pool's copy), up to float32
    rounding: a row that computed the block again in a longer prefill (a short cached prefix
    not used) rounds otherwise than the prefill that filled the pool (about 1e-4 with the demo
    model v3, after four layers); another block's K/V would differ by O(1)."""
    engine = llm.llm_engine
    store, cache = engine.row_store, engine.kv_cache
    bs = store.block_size
    for row in range(cache.num_rows):
        for i, h in enumerate(store.row_hashes[row]):
            block = store.pool.by_hash.get(h)
            if block is None:
                continue  # evicted from the pool: nothing to compare with
            for (k, v), (pk, pv) in zip(cache.layers, store.layers):
                assert torch.allclose(k[row, i * bs:(i + 1) * bs], pk[block], rtol=0,
                                      atol=1e-3)
                assert torch.allclose(v[row, i * bs:(i + 1) * bs], pv[block], rtol=0,
                                      atol=1e-3)


def drive(llm: LLM, arrivals: list[tuple[int, str, list[int], int]]) -> dict[str, list[int]]:
    """Add each request at its step, step until all finish, checking the rows between steps."""
    engine = llm.llm_engine
    out: dict[str, list[int]] = {}
    step = 0
    pending = sorted(arrivals)
    while pending or engine.has_unfinished_requests():
        while pending and pending[0][0] <= step:
            _, rid, ids, n = pending.pop(0)
            engine.add_request(rid, ids, greedy(n))
        for o in engine.step():
            if o.finished:
                out[o.request_id] = list(o.outputs[0].token_ids)
        check_rows(llm)
        step += 1
    return out


def alone(plain: LLM, ids: list[int], n: int) -> list[int]:
    return list(plain.generate([ids], greedy(n), use_tqdm=False)[0].outputs[0].token_ids)


def test_sequential_requests_reuse_the_row(plain: LLM, demo_dir: str) -> None:
    llm = cached(demo_dir)
    store = llm.llm_engine.row_store
    blocks = len(PREFIXES[0]) // store.block_size
    loaded = []
    short = [rng.randrange(10, 4000) for _ in range(store.block_size // 2)]  # no full block
    for i, prefix in enumerate((0, 0, 0, 1, 0, None, 0)):
        ids = short if prefix is None else prompt(prefix, i)
        before = store.num_loaded_blocks
        got = drive(llm, [(0, f"s{i}", ids, 4)])[f"s{i}"]
        loaded.append(store.num_loaded_blocks - before)
        assert got == alone(plain, ids, 4)
    # the first computes its prefix; the next two find it in their row; the other prefix
    # overwrites the row, so the fifth copies its prefix back from the pool; a short prompt
    # (no full block of its own to record) overwrites the row's first positions: the last
    # request copies the prefix again
    assert loaded == [0, 0, 0, 0, blocks, 0, blocks]


def test_rows_moved_by_finishing_requests_keep_true_records(plain: LLM, demo_dir: str) -> None:
    llm = cached(demo_dir)
    r = random.Random(11)
    arrivals = []
    for i in range(24):  # staggered arrivals, mixed prefixes and lengths: rows fill, free, move
        ids = prompt(r.randrange(3), 100 + i, extra=r.randrange(1, 40))
        arrivals.append((r.randrange(0, 60), f"m{i}", ids, r.randrange(1, 24)))
    got = drive(llm, arrivals)
    for _, rid, ids, n in arrivals:
        assert got[rid] == alone(plain, ids, n), rid
    assert llm.llm_engine.row_store.num_loaded_blocks > 0  # some rows did need copies


def test_a_short_cached_prefix_before_a_long_rest_is_computed_again(plain: LLM,
                                                                    demo_dir: str) -> None:
    """The masked prefill of a long rest over a short cached prefix costs more than the plain
    causal prefill of the whole prompt: such a prefix is not used (same tokens out), a prefix
    of at least a third of the rest is."""
    llm = cached(demo_dir)
    engine = llm.llm_engine
    head = PREFIXES[0]  # 96 tokens: 6 full blocks once cached
    llm.generate(head + [11], greedy(1), use_tqdm=False)
    long_rest = [random.Random(9).randrange(10, 4000) for _ in range(400)]
    short_rest = [random.Random(10).randrange(10, 4000) for _ in range(200)]
    for tail, used in ((long_rest, False), (short_rest, True)):
        hits = engine.block_manager.num_hits
        [out] = llm.generate(head + tail, greedy(4), use_tqdm=False)
        assert (engine.block_manager.num_hits > hits) == used
        assert out.num_cached_tokens == (96 if used else 0)
        [ref] = plain.generate(head + tail, greedy(4), use_tqdm=False)
        assert out.outputs[0].token_ids == ref.outputs[0].token_ids
    check_rows(llm)
