"""Seeded requests on the CPU sampling path: the same seed and prompt give the same tokens
alone, repeated, or in any batch, whichever sampling route (plain, top-k, top-p, min-p, their
mixes, greedy neighbours) each row of the batch takes."""

from __future__ import annotations

import dataclasses

import pytest
from thinkgate import LLM, SamplingParams

PROMPTS = [
    "What is the weather in Paris?",
    "hello",
    "Tell me a story about a fox and a dog that live in a small town by the sea.",
    "1 2 3",
    "Write a haiku about the sea.",
]

SEEDED = {
    "T=1": {"temperature": 1.0},
    "top_k": {"temperature": 0.8, "top_k": 20},
    "top_p": {"temperature": 0.7, "top_p": 0.9},
    "min_p": {"temperature": 1.0, "min_p": 0.05},
    "tiny top_p": {"temperature": 1.0, "top_p": 0.02},  # the exact-floor fallback
    "all filters": {"temperature": 0.6, "top_k": 30, "top_p": 0.95, "min_p": 0.01},
}


def _params(seed: int, max_tokens: int = 16, **kw: object) -> SamplingParams:
    return SamplingParams(seed=seed, max_tokens=max_tokens, ignore_eos=True, **kw)


def _tokens(llm: LLM, prompts: list[str], params: SamplingParams | list[SamplingParams]
            ) -> list[list[int]]:
    return [o.outputs[0].token_ids for o in llm.generate(prompts, params, use_tqdm=False)]


@pytest.fixture
def cpu_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "0")  # CPU tensors take kernels/cpu/sample.py


@pytest.mark.parametrize("name", list(SEEDED))
def test_a_seeded_request_gets_its_tokens_in_any_batch(llm: LLM, name: str,
                                                        cpu_path: None) -> None:
    seeded = _params(7, **SEEDED[name])
    alone = _tokens(llm, [PROMPTS[0]], seeded)[0]
    assert len(alone) == 16
    assert _tokens(llm, [PROMPTS[0]], seeded)[0] == alone  # again, alone
    others = [_params(100 + i, 12 + 3 * i, **kw) for i, kw in enumerate(SEEDED.values())]
    others[1] = _params(0, 9, temperature=0.0)  # a greedy neighbour
    batch = [PROMPTS[1 + i % 4] for i in range(len(others))]
    for at in (0, len(others)):  # first and last of the batch
        prompts = batch[:at] + [PROMPTS[0]] + batch[at:]
        params = others[:at] + [seeded] + others[at:]
        assert _tokens(llm, prompts, params)[at] == alone, (name, at)
    assert _tokens(llm, [PROMPTS[0]] * 3, seeded) == [alone] * 3  # copies of itself
    if name != "tiny top_p":  # that one keeps about one token per step: the seed hardly matters
        reseeded = dataclasses.replace(seeded, seed=8)
        assert _tokens(llm, [PROMPTS[0]], reseeded)[0] != alone


def test_neighbours_keep_their_tokens_when_a_request_joins(llm: LLM, cpu_path: None) -> None:
    """Every seeded row of a batch is unchanged by a request that joins it, whatever its
    settings; a request that ends early (short max_tokens) does not shift the others."""
    params = [_params(40 + i, **kw) for i, kw in enumerate(SEEDED.values())]
    prompts = [PROMPTS[i % len(PROMPTS)] for i in range(len(params))]
    before = _tokens(llm, prompts, params)
    joined = _tokens(llm, [PROMPTS[2]] + prompts, [_params(3, 4, temperature=1.5)] + params)
    assert joined[1:] == before  # the joiner sits first, then leaves after 4 tokens
    assert len(set(map(tuple, before))) == len(before)  # the settings differ in their tokens
