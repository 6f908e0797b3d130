"""Continuous batching: abort, preemption by recompute, requests arriving while others run."""

from __future__ import annotations

import random

import pytest
from thinkgate import LLM, SamplingParams
from thinkgate.engine.sampling_params import RequestOutputKind


def greedy(max_tokens: int, **kw: object) -> SamplingParams:
    return SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True, **kw)


def test_abort_frees_every_block(llm: LLM) -> None:
    engine = llm.llm_engine
    total = engine.block_manager.num_blocks
    assert engine.block_manager.num_free_blocks == total
    engine.add_request("a", "hello there, how are you today?", greedy(40))
    engine.add_request("b", "one two three", greedy(40, n=2))
    engine.add_request("c", "never scheduled " * 3, greedy(40))
    for _ in range(5):
        engine.step()
    assert engine.block_manager.num_free_blocks < total
    final = engine.abort_request("b")
    assert final is not None and [c.finish_reason for c in final.outputs] == ["abort"] * 2
    assert engine.abort_request("b") is None
    engine.abort_request("a")
    engine.abort_request("c")
    assert not engine.has_unfinished_requests()
    assert not engine.scheduler.waiting and not engine.scheduler.running
    assert engine.block_manager.num_free_blocks == total
    assert engine.step() == []


def test_preemption_by_recompute_keeps_greedy_tokens(llm: LLM, demo_dir: str) -> None:
    prompts = [f"request {i}: the weather in town {i}" for i in range(6)]
    params = [greedy(36), greedy(30), greedy(40)] * 2
    seeded = SamplingParams(temperature=1.0, seed=5, max_tokens=36, ignore_eos=True)
    params[1] = seeded
    expected = [o.outputs[0].token_ids for o in llm.generate(prompts, params, use_tqdm=False)]
    small = LLM(model=demo_dir, num_kv_blocks=8, block_size=16, max_model_len=64)
    got = [o.outputs[0].token_ids for o in small.generate(prompts, params, use_tqdm=False)]
    assert small.llm_engine.scheduler.num_preemptions > 0
    assert got == expected
    assert small.llm_engine.block_manager.num_free_blocks == 8


def test_64_requests_arriving_while_others_run(llm: LLM) -> None:
    engine = llm.llm_engine
    rng = random.Random(0)
    words = "the cat sat on a mat and then it ran to the sea where fish swim".split()
    pending = []
    for i in range(64):
        prompt = " ".join(rng.choice(words) for _ in range(rng.randint(1, 30)))
        kind = RequestOutputKind.DELTA if i % 2 else RequestOutputKind.CUMULATIVE
        pending.append((f"r{i}", prompt, greedy(rng.randint(1, 16), output_kind=kind)))
    finished: dict[str, int] = {}
    streamed: dict[str, list[int]] = {}
    added = 0
    steps = 0
    while added < len(pending) or engine.has_unfinished_requests():
        for _ in range(rng.randint(0, 4)):
            if added < len(pending):
                engine.add_request(*pending[added])
                added += 1
        for out in engine.step():
            assert out.request_id not in finished, "an output after the request finished"
            completion = out.outputs[0]
            if (
                out.request_id in streamed
                and pending[int(out.request_id[1:])][2].output_kind is RequestOutputKind.DELTA
            ):
                streamed[out.request_id] += completion.token_ids
            else:
                streamed[out.request_id] = list(completion.token_ids)
            if out.finished:
                finished[out.request_id] = len(streamed[out.request_id])
        steps += 1
        assert steps < 5000
    assert finished == {rid: params.max_tokens for rid, _, params in pending}
    assert engine.block_manager.num_free_blocks == engine.block_manager.num_blocks
    alone = llm.generate(pending[7][1], pending[7][2], use_tqdm=False)[0].outputs[0].token_ids
    assert streamed["r7"] == alone


def test_max_num_seqs_limits_the_running_batch(demo_dir: str) -> None:
    small = LLM(model=demo_dir, max_num_seqs=3)
    engine = small.llm_engine
    for i in range(7):
        engine.add_request(str(i), f"prompt {i}", greedy(5))
    peak = 0
    while engine.has_unfinished_requests():
        engine.step()
        peak = max(peak, len(engine.scheduler.running))
    assert peak == 3


def test_request_ids_must_be_unique(llm: LLM) -> None:
    engine = llm.llm_engine
    engine.add_request("dup", "hello", greedy(2))
    with pytest.raises(ValueError, match="dup"):
        engine.add_request("dup", "hello", greedy(2))
    engine.abort_request("dup")


def test_paged_and_contiguous_layouts_agree(demo_dir: str) -> None:
    rng = random.Random(1)
    prompts = [[rng.randrange(10, 2000) for _ in range(rng.randint(1, 40))] for _ in range(12)]
    params = [greedy(rng.randint(1, 30)) for _ in prompts]
    results = {}
    for layout in ("paged", "contiguous"):
        llm = LLM(model=demo_dir, kv_layout=layout, max_num_seqs=5, max_model_len=128)
        assert type(llm.llm_engine.kv_cache).__name__ == (
            "KVCache" if layout == "paged" else "SlotKVCache"
        )
        outs = llm.generate(prompts, params, use_tqdm=False)
        results[layout] = [o.outputs[0].token_ids for o in outs]
        assert llm.llm_engine.block_manager.num_free_blocks == llm.llm_engine.num_kv_blocks
    assert results["paged"] == results["contiguous"]


def test_a_lone_arrival_waits_a_few_decode_steps_then_joins(demo_dir: str) -> None:
    from thinkgate.engine.config import EngineConfig
    from thinkgate.engine.core.llm_engine import LLMEngine

    delay = 3
    engine = LLMEngine(EngineConfig(model=demo_dir, prefill_delay_steps=delay))
    for i in range(8):
        engine.add_request(f"run{i}", f"prompt {i}", greedy(40))
    engine.step()  # the idle engine prefills all 8 at once
    assert not engine.scheduler.waiting and len(engine.scheduler.running) == 8
    engine.add_request("late", "one more", greedy(4))
    decodes_before = engine.scheduler.num_decode_steps
    waited = 0
    while engine.scheduler.waiting:
        engine.step()
        waited += 1
    assert waited == delay + 1  # `delay` decode steps, then the prefill
    assert engine.scheduler.num_decode_steps - decodes_before == delay
    # a queue of a quarter of the running batch is prefilled at once
    engine.add_request("late2", "again", greedy(4))
    engine.add_request("late3", "and again", greedy(4))
    engine.add_request("late4", "once more", greedy(4))
    decodes_before = engine.scheduler.num_decode_steps
    engine.step()
    assert not engine.scheduler.waiting and engine.scheduler.num_decode_steps == decodes_before
    while engine.has_unfinished_requests():
        engine.step()


def test_rows_that_finish_together_are_freed_without_moving_kv(demo_dir: str) -> None:
    """Contiguous layout: a freed row takes the last row's sequence (a K/V copy). Rows that
    finish in the same step are freed from the last one down, so none moves; a row finishing
    alone in the middle still moves the last one into its place, and tokens stay the same."""
    llm = LLM(model=demo_dir, kv_layout="contiguous", max_model_len=128, enforce_eager=True)
    cache = llm.llm_engine.kv_cache
    assert type(cache).__name__ == "SlotKVCache"
    moves: list[tuple[int, int]] = []
    inner = cache.moved

    def record(source: int, target: int) -> None:
        moves.append((source, target))
        if inner is not None:
            inner(source, target)

    cache.moved = record
    prompts = [[11 + i, 200 + i, 300 + i] for i in range(5)]
    together = llm.generate(prompts, greedy(6), use_tqdm=False)
    assert moves == [] and cache.rows == []
    apart = [greedy(3)] + [greedy(6)] * 4  # row 0 ends first: the last row moves into it
    staggered = llm.generate(prompts, apart, use_tqdm=False)
    assert moves and moves[0][1] == 0 and cache.rows == []
    assert [o.outputs[0].token_ids[:3] for o in staggered] == [
        o.outputs[0].token_ids[:3] for o in together]
    assert [o.outputs[0].token_ids for o in staggered[1:]] == [
        o.outputs[0].token_ids for o in together[1:]]
