"""`LLM.close()`: the weights and the KV cache are freed when it returns, not at the next full
garbage collection (the engine sits in reference cycles)."""

from __future__ import annotations

import gc
import weakref

import pytest
from thinkgate import LLM, SamplingParams


def test_close_frees_the_kv_cache_and_weights_and_aborts_running_requests(demo_dir: str) -> None:
    gc.disable()  # only close() itself may collect
    try:
        llm = LLM(model=demo_dir, max_num_seqs=4, enforce_eager=True)
        engine = llm.llm_engine
        out = llm.generate(["Hello"], SamplingParams(max_tokens=4, temperature=0), use_tqdm=False)
        assert len(out[0].outputs[0].token_ids) == 4
        engine.add_request("left-running", "Tell me a story", SamplingParams(max_tokens=64))
        engine.step()
        assert engine.has_unfinished_requests()
        kv_ref = weakref.ref(engine.kv_cache)
        model_ref = weakref.ref(engine.loaded)
        runner_ref = weakref.ref(engine.runner)
        llm.close()
        assert kv_ref() is None and model_ref() is None and runner_ref() is None
        assert not engine.has_unfinished_requests()
        llm.close()  # a second close is a no-op
        with pytest.raises(RuntimeError, match="closed"):
            llm.generate(["Hello"], SamplingParams(max_tokens=2), use_tqdm=False)
        assert "closed" in repr(engine)
    finally:
        gc.enable()


def test_with_block_closes_the_llm(demo_dir: str) -> None:
    with LLM(model=demo_dir, max_num_seqs=2, enforce_eager=True) as llm:
        text = llm.generate(["Hi"], SamplingParams(max_tokens=3, temperature=0),
                            use_tqdm=False)[0].outputs[0].text
        assert text
    assert llm.llm_engine.closed
