"""Speculative verify steps: the few queries of each row attended like decode's one
(kv_cache.py, `packed_queries`) give SDPA's grouped-query result, in either layout; and the
compiled verify graph (model/compiled_verify.py) runs the drafted steps with plain decoding's
tokens."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch
from thinkgate.engine.kv.kv_cache import build_attention_metadata, paged_attention
from thinkgate.engine.model.compiled_decode import compiler_available
from thinkgate.engine.sampling_params import SamplingParams


@pytest.mark.parametrize("paged", [False, True])
@pytest.mark.parametrize("queries", [1, 2, 5])
def test_packed_queries_attend_as_grouped_query_sdpa(paged: bool, queries: int) -> None:
    torch.manual_seed(queries)
    rows, heads, kv_heads, dim, block = 3, 8, 2, 16, 4
    lens = [11, 7, 13]  # keys per row after this step's writes (unequal: a mask)
    q = torch.randn(rows, queries, heads, dim)
    k, v = torch.randn(rows, queries, kv_heads, dim), torch.randn(rows, queries, kv_heads, dim)
    positions = torch.tensor([[n - queries + j for j in range(queries)] for n in lens])
    if paged:  # blocks handed out in an order of their own; the last block is scratch
        cache_shape, tables = (16, block, kv_heads, dim), torch.tensor(
            [[5, 2, 9, 15], [7, 1, 15, 15], [3, 11, 4, 0]])
        slots = torch.tensor([int(tables[r, p // block]) * block + p % block
                              for r in range(rows) for p in positions[r].tolist()])
    else:  # contiguous rows 1-3 of a 5-row cache
        cache_shape, tables = (5, 16, kv_heads, dim), None
        slots = torch.tensor([(1 + r) * 16 + p for r in range(rows)
                              for p in positions[r].tolist()])
    k_cache, v_cache = torch.randn(cache_shape), torch.randn(cache_shape)
    meta = build_attention_metadata(positions, slots, tables, lens, False, 1)
    want = paged_attention(q, k, v, k_cache.clone(), v_cache.clone(), meta)
    packed = dataclasses.replace(meta, packed_queries=True)
    got = paged_attention(q, k, v, k_cache, v_cache, packed)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
@pytest.mark.skipif(not compiler_available(), reason="TorchInductor needs a C++ compiler")
@pytest.mark.parametrize("kv_layout", ["contiguous", "paged"])
def test_drafted_steps_run_the_compiled_verify_graph(demo_dir: str, kv_layout: str) -> None:
    """Compiles an engine with a speculative config (its warm-up adds the verify graphs: tens of
    seconds here) and checks its drafted steps against plain compiled decoding, in either KV
    layout (the paged one reads K/V through block tables)."""
    from thinkgate import LLM

    spec_config = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4,
                   "prompt_lookup_min": 1}
    plain = LLM(model=demo_dir, max_num_seqs=8, enforce_eager=False, kv_layout=kv_layout)
    spec = LLM(model=demo_dir, max_num_seqs=8, enforce_eager=False, kv_layout=kv_layout,
               speculative_config=spec_config)
    runner: Any = spec.llm_engine.runner
    assert runner.contiguous == (kv_layout == "contiguous")
    assert runner.compiled_verify is not None and runner.compiled_verify.ready
    assert plain.llm_engine.runner.compiled_verify is None  # only with a speculative config
    spec.llm_engine.speculator.costs.ratio = (  # always worth a draft
        lambda rows, width, constrained=False: 1.0)
    prompts = ["1 2 3 4 5 6 7 8 9 10 1 2 3 4 5 6 7 8 9 10 1 2 3",
               "alpha beta gamma delta alpha beta gamma delta alpha beta"]
    params = SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)
    want = plain.generate(prompts, params, use_tqdm=False)
    got = spec.generate(prompts, params, use_tqdm=False)
    assert [o.outputs[0].token_ids for o in got] == [o.outputs[0].token_ids for o in want]
    assert runner.compiled_verify.num_steps > 0
    assert spec.llm_engine.stats()["spec_decode_num_accepted_tokens"] > 0
