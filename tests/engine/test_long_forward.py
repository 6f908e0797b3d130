"""Long eager forwards (engine/model/long_forward.py): every core, and oneDNN's fast fp32 path only
where it keeps fp32 accuracy."""

from __future__ import annotations

import pytest
import torch
from thinkgate import LLM, SamplingParams
from thinkgate.engine.model.long_forward import (
    FP32_TOLERANCE,
    PREFILL_TOKENS,
    fast_fp32,
    fast_fp32_keeps_accuracy,
    wide_forward,
)

KNOB = torch.backends.mkldnn.matmul


def test_wide_forward_restores_threads_and_precision() -> None:
    steady, before = torch.get_num_threads(), KNOB.fp32_precision
    seen = wide_forward(lambda x: (torch.get_num_threads(), KNOB.fp32_precision, x),
                        steady + 1, True, "x")
    assert seen == (steady + 1, "bf16", "x")
    assert (torch.get_num_threads(), KNOB.fp32_precision) == (steady, before)
    assert wide_forward(lambda: KNOB.fp32_precision, None, False) == before

    def fails() -> None:
        raise RuntimeError("forward failed")

    with pytest.raises(RuntimeError, match="forward failed"):
        wide_forward(fails, steady + 1, True)
    assert (torch.get_num_threads(), KNOB.fp32_precision) == (steady, before)


def test_the_accuracy_bound_tells_fp32_from_bf16_rounding() -> None:
    """The bound `fast_fp32_keeps_accuracy` applies passes the default fp32 path and fails a
    product of bf16-rounded inputs, so a CPU whose fast path rounds to bf16 keeps the default."""
    gen = torch.Generator().manual_seed(1)
    x, w = torch.randn(256, 576, generator=gen), torch.randn(512, 576, generator=gen)
    exact = x.double() @ w.double().t()
    scale = exact.abs().max()
    default = (torch.nn.functional.linear(x, w).double() - exact).abs().max()
    rounded = (torch.nn.functional.linear(x.bfloat16().float(), w.bfloat16().float()).double()
               - exact).abs().max()
    assert default <= FP32_TOLERANCE * scale < rounded
    if fast_fp32_keeps_accuracy():
        with fast_fp32(True):
            fast = (torch.nn.functional.linear(x, w).double() - exact).abs().max()
        assert fast <= FP32_TOLERANCE * scale


def test_a_long_prefill_on_the_fast_path_keeps_the_default_paths_logprobs(llm: LLM) -> None:
    runner = llm.llm_engine.runner
    assert runner.fast_fp32 == fast_fp32_keeps_accuracy()
    prompt = [(i * 53) % 3900 + 100 for i in range(PREFILL_TOKENS + 300)]  # ids < 4000
    params = SamplingParams(temperature=0, max_tokens=1, logprobs=8)
    seen = {}
    for fast in (True, False):
        runner.fast_fp32 = fast and fast_fp32_keeps_accuracy()
        llm.reset_prefix_cache()  # each run prefills the whole prompt
        try:
            seen[fast] = llm.generate([prompt], params, use_tqdm=False)[0].outputs[0]
        finally:
            runner.fast_fp32 = fast_fp32_keeps_accuracy()
    assert seen[True].token_ids == seen[False].token_ids
    fast_lp, default_lp = seen[True].logprobs[0], seen[False].logprobs[0]
    assert sorted(fast_lp) == sorted(default_lp)
    for token, entry in fast_lp.items():
        assert entry.logprob == pytest.approx(default_lp[token].logprob, abs=1e-4)
