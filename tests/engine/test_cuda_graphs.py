"""CUDA-graph decode's host side on CPU: buckets, padding, static buffers (capture skipped)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from thinkgate import SamplingParams
from thinkgate.engine.model.cuda_graphs import DecodeGraphs, capture_sizes


def test_capture_sizes_cover_every_batch_up_to_max_num_seqs() -> None:
    assert capture_sizes(1) == [1]
    assert capture_sizes(3) == [1, 2, 4]
    assert capture_sizes(64) == [1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64]
    assert capture_sizes(65)[-1] == 72
    assert capture_sizes(10_000)[-1] == 512  # larger decode batches run eagerly
    with pytest.raises(ValueError, match="max_num_seqs must be a positive int, got 0"):
        capture_sizes(0)


def _graphs(sizes: list[int], max_blocks: int = 4, scratch: int = 9) -> DecodeGraphs:
    return DecodeGraphs(torch.nn.Identity(), [], sizes, max_blocks, 16, scratch,
                        torch.device("cpu"), capture=False)


def _seq(tokens: list[int], table: list[int]) -> SimpleNamespace:
    return SimpleNamespace(token_ids=tokens, num_tokens=len(tokens), block_table=table)


def test_fill_pads_to_the_bucket_with_scratch_rows() -> None:
    graphs = _graphs([1, 2, 4, 8])
    assert [graphs.bucket(n) for n in (1, 2, 3, 4, 5, 8)] == [1, 2, 4, 4, 8, 8]
    with pytest.raises(ValueError, match="batch of 9 rows outside"):
        graphs.bucket(9)
    wide = [_seq(list(range(40)), [3, 5, 7]), _seq([1, 2], [4])]
    assert graphs.fill(wide, lambda seq, p: 100 + p) == 2
    narrow = [_seq([5, 6, 7], [8]), _seq(list(range(17)), [1, 2]), _seq([9], [6])]
    slot = lambda seq, p: seq.block_table[p // 16] * 16 + p % 16  # noqa: E731
    assert graphs.fill(narrow, slot) == 4
    ids, positions, slots, lens = graphs.step_inputs[:, :4].tolist()
    assert ids == [7, 16, 9, 0]
    assert positions == [2, 16, 0, 0]
    assert slots == [8 * 16 + 2, 2 * 16 + 0, 6 * 16, 9 * 16]  # the padding row: scratch
    assert lens == [3, 17, 1, 1]
    tables = graphs.block_tables.tolist()
    assert [row[:2] for row in tables[:4]] == [[8, 9], [1, 2], [6, 9], [9, 9]]
    assert tables[0][2] == 7  # stale, never read (context 3 needs one block), a valid id
    assert tables[4:] == [[9] * 4] * 4


def test_padded_decode_gives_the_unpadded_tokens(triton_llm, monkeypatch) -> None:
    """Three rows decode in bucket 4 through the static buffers, as greedy and seeded
    sampling give on the eager path of the same engine."""
    engine = triton_llm.llm_engine
    runner, cache = engine.runner, engine.kv_cache
    graphs = DecodeGraphs(runner.model, cache.layers, [1, 2, 4, 8],
                          -(-engine.max_model_len // cache.block_size), cache.block_size,
                          cache.scratch_block, engine.device, capture=False)
    sizes: list[int] = []
    forward = graphs.forward
    monkeypatch.setattr(graphs, "forward", lambda size: sizes.append(size) or forward(size))
    prompts = ["hello", "What is the weather in Paris?", "1 2 3"]
    params = [SamplingParams(temperature=0, max_tokens=5, ignore_eos=True, logprobs=2),
              SamplingParams(temperature=1.0, seed=3, max_tokens=5, ignore_eos=True),
              SamplingParams(temperature=0, max_tokens=5, ignore_eos=True)]

    def run() -> list:
        return [o.outputs[0] for o in triton_llm.generate(prompts, params, use_tqdm=False)]

    eager = run()
    monkeypatch.setattr(runner, "graphs", graphs)
    padded = run()
    assert [o.token_ids for o in padded] == [o.token_ids for o in eager]
    assert sizes == [4] * 4  # 4 decode steps after the prefill, all 3 rows padded to 4
    for a, b in zip(padded[0].logprobs, eager[0].logprobs):
        assert a.keys() == b.keys()
        for token in a:
            assert a[token].logprob == pytest.approx(b[token].logprob, abs=1e-5)


@pytest.mark.gpu
def test_captured_graphs_give_the_eager_tokens(demo_dir: str) -> None:
    from thinkgate import LLM

    kwargs = {"model": demo_dir, "device": "cuda", "max_num_seqs": 8,
              "kv_cache_memory_bytes": 256 << 20}
    graphs, eager = LLM(**kwargs), LLM(enforce_eager=True, **kwargs)
    assert graphs.llm_engine.runner.graphs is not None
    assert eager.llm_engine.runner.graphs is None and eager.llm_engine.runner.paged_kernels
    params = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
    for prompts in (["hello", "What is the weather in Paris?", "1 2 3"], ["hi"]):
        got = [o.outputs[0].token_ids for o in graphs.generate(prompts, params, use_tqdm=False)]
        want = [o.outputs[0].token_ids for o in eager.generate(prompts, params, use_tqdm=False)]
        assert got == want
    assert set(graphs.llm_engine.runner.graphs.graphs) == {1, 4}
