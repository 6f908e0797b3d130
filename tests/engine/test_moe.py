"""Mixture-of-experts decoders (engine/model/layers/moe.py): Mixtral, Qwen2-MoE and Qwen3-MoE run
natively and match transformers; the grouped expert mix matches a token-by-token sum."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from checkpoints import make_checkpoint
from test_models import PROMPT, _check_against_transformers, _hf_reference
from thinkgate import LLM, SamplingParams
from thinkgate.engine.model.layers.moe import MoeSpec, route
from thinkgate.kernels.moe import fused_moe_ref


def _token_by_token(x: torch.Tensor, weights: torch.Tensor, experts: torch.Tensor,
                    gate_up: torch.Tensor, down: torch.Tensor) -> torch.Tensor:
    out = torch.zeros_like(x)
    for n in range(x.shape[0]):
        for w, e in zip(weights[n].tolist(), experts[n].tolist()):
            gate, up = (gate_up[e] @ x[n]).chunk(2)
            out[n] += w * (down[e] @ (F.silu(gate) * up))
    return out


@pytest.mark.parametrize("tokens", [1, 3, 37])
def test_the_grouped_twin_equals_the_per_token_sum(tokens: int) -> None:
    gen = torch.Generator().manual_seed(tokens)
    e, h, i, k = 8, 16, 12, 3
    x = torch.randn(tokens, h, generator=gen)
    gate_up = torch.randn(e, 2 * i, h, generator=gen)
    down = torch.randn(e, h, i, generator=gen)
    weights, experts = route(torch.randn(tokens, e, generator=gen), k, renormalize=True)
    assert torch.allclose(weights.sum(-1), torch.ones(tokens))
    got = fused_moe_ref(x, weights, experts, gate_up, down)
    want = _token_by_token(x, weights, experts, gate_up, down)
    assert torch.allclose(got, want, atol=1e-4, rtol=1e-4)
    if tokens == 1:  # most experts got no row: only the chosen ones count
        assert len(set(experts[0].tolist())) == k


def test_routing_without_renormalizing_keeps_the_softmax_weights() -> None:
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    weights, experts = route(logits, 2, renormalize=False)
    probs = torch.softmax(logits, -1)
    assert experts.tolist() == [[0, 1]]
    assert torch.allclose(weights, probs[:, :2])
    assert weights.sum() < 1


@pytest.mark.parametrize("arch", ["qwen3_moe", "qwen2_moe", "mixtral"])
def test_moe_architectures_match_transformers(tmp_path: Path, arch: str) -> None:
    make_checkpoint(tmp_path, arch).save_pretrained(tmp_path)
    llm = LLM(model=str(tmp_path), max_num_seqs=4)
    loaded = llm.llm_engine.loaded
    assert loaded.native and loaded.arch.moe is not None
    sparse = [layer.moe is not None for layer in loaded.model.layers]
    assert sparse == ([False, True] if arch == "qwen3_moe" else [True, True])
    _check_against_transformers(llm, tmp_path)


def test_a_moe_model_batches_on_the_paged_layout(tmp_path: Path) -> None:
    """Several prompts at once (rows routed to different experts in one step) on the paged KV
    layout give each prompt transformers' greedy tokens."""
    make_checkpoint(tmp_path, "mixtral").save_pretrained(tmp_path)
    llm = LLM(model=str(tmp_path), max_num_seqs=4, kv_layout="paged")
    prompts = [PROMPT, "hello world, the weather", "Numbers: 0 1 2 3"]
    outs = llm.generate(prompts, SamplingParams(temperature=0, max_tokens=8, min_tokens=8),
                        use_tqdm=False)
    for prompt, out in zip(prompts, outs):
        assert out.outputs[0].token_ids == _hf_reference(tmp_path, prompt, 8)[0]


def test_a_config_without_experts_is_refused_with_its_name() -> None:
    with pytest.raises(ValueError, match="num_experts"):
        MoeSpec.from_hf("Qwen3MoeForCausalLM", {"moe_intermediate_size": 8})
    with pytest.raises(ValueError, match="num_experts_per_tok 9"):
        MoeSpec.from_hf("MixtralForCausalLM", {"num_local_experts": 4, "num_experts_per_tok": 9,
                                               "intermediate_size": 8})


def test_a_moe_model_serves_from_the_engine_process(tmp_path: Path) -> None:
    """The server's engine core (its own process, its thread count) gives the in-process
    engine's tokens for a sparse model."""
    import asyncio

    from thinkgate.engine.config import EngineConfig
    from thinkgate.engine.process.engine_client import EngineProcessClient

    make_checkpoint(tmp_path, "qwen3_moe").save_pretrained(tmp_path)
    prompts = [[5, 6, 7, 8], [100, 200, 300, 17, 4]]
    params = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    expected = [o.outputs[0].token_ids for o in
                LLM(model=str(tmp_path)).generate(prompts, params, use_tqdm=False)]
    client = EngineProcessClient(EngineConfig(model=str(tmp_path), max_num_seqs=4), None)
    try:
        async def run(prompt: list[int], rid: str) -> list[int]:
            outs = [o async for o in client.generate(prompt, params, rid)]
            return outs[-1].outputs[0].token_ids

        async def both() -> list[list[int]]:
            return list(await asyncio.gather(*(run(p, f"r{i}") for i, p in enumerate(prompts))))

        assert asyncio.run(both()) == expected
    finally:
        client.shutdown()
