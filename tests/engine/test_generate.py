"""LLM.generate on the demo model: sampling parameters, stops, n, logprobs, batching."""

from __future__ import annotations

import dataclasses
import os
from types import SimpleNamespace

import pytest
import torch
from thinkgate import LLM, SamplingParams

PROMPTS = [
    "What is the weather in Paris?",
    "hello",
    "Tell me a story about a fox and a dog that live in a small town by the sea.",
    "1 2 3",
]


def greedy(max_tokens: int = 24, **kw: object) -> SamplingParams:
    return SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True, **kw)


def tokens(llm: LLM, prompts: list, params: SamplingParams | list) -> list[list[int]]:
    return [o.outputs[0].token_ids for o in llm.generate(prompts, params, use_tqdm=False)]


def test_greedy_is_deterministic_and_batch_independent(llm: LLM) -> None:
    batched = tokens(llm, PROMPTS, greedy())
    assert batched == tokens(llm, PROMPTS, greedy())
    alone = [tokens(llm, [p], greedy())[0] for p in PROMPTS]
    assert batched == alone
    assert all(len(t) == 24 for t in batched)


@pytest.mark.parametrize("interpret", ["0", os.environ.get("TRITON_INTERPRET", "")],
                         ids=["cpu-path", "caller-path"])
def test_seeded_sampling_is_independent_of_the_batch(
    llm: LLM, interpret: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On the CPU sampling path and on the Triton one (interpreted under TRITON_INTERPRET=1)."""
    monkeypatch.setenv("TRITON_INTERPRET", interpret)
    seeded = SamplingParams(temperature=1.0, top_p=0.9, seed=7, max_tokens=20, ignore_eos=True)
    alone = tokens(llm, [PROMPTS[0]], seeded)[0]
    others = [greedy(), SamplingParams(temperature=0.8, seed=1, max_tokens=30), seeded, greedy(5)]
    mixed = tokens(llm, [PROMPTS[1], PROMPTS[2], PROMPTS[0], PROMPTS[3]], others)
    assert mixed[2] == alone
    assert tokens(llm, [PROMPTS[0]] * 3, seeded) == [alone] * 3
    reseeded = dataclasses.replace(seeded, seed=8)
    assert tokens(llm, [PROMPTS[0]], reseeded)[0] != alone


def test_unseeded_sampling_follows_the_llm_seed(demo_dir: str) -> None:
    params = SamplingParams(temperature=1.0, max_tokens=8, ignore_eos=True)

    def run(seed: int) -> list[list[int]]:
        return tokens(
            LLM(model=demo_dir, seed=seed, max_num_seqs=4, max_model_len=128), PROMPTS[:2], params
        )

    first = run(3)
    assert first == run(3)
    assert first != run(4)


def test_stop_strings_end_the_text_and_never_leak(llm: LLM) -> None:
    base = llm.generate(PROMPTS[2], greedy(32), use_tqdm=False)[0].outputs[0]
    stop = base.text[len(base.text) // 2 : len(base.text) // 2 + 3]
    assert len(stop) == 3 and stop.strip()
    cut = base.text.index(stop)
    out = llm.generate(PROMPTS[2], greedy(32, stop=[stop, "\x00never"]), use_tqdm=False)[0]
    assert out.outputs[0].text == base.text[:cut]
    assert (out.outputs[0].finish_reason, out.outputs[0].stop_reason) == ("stop", stop)
    kept = greedy(32, stop=stop, include_stop_str_in_output=True)
    assert (
        llm.generate(PROMPTS[2], kept, use_tqdm=False)[0].outputs[0].text
        == base.text[: cut + len(stop)]
    )


def test_stop_token_ids_min_tokens_and_ignore_eos(llm: LLM) -> None:
    base = tokens(llm, [PROMPTS[0]], greedy(20))[0]
    stop_id = base[4]
    first = base.index(stop_id)
    out = llm.generate(PROMPTS[0], greedy(20, stop_token_ids=[stop_id]), use_tqdm=False)[0]
    assert out.outputs[0].token_ids == base[: first + 1]
    assert (out.outputs[0].finish_reason, out.outputs[0].stop_reason) == ("stop", stop_id)
    late = greedy(20, stop_token_ids=[stop_id], min_tokens=first + 3)
    got = tokens(llm, [PROMPTS[0]], late)[0]
    assert len(got) >= first + 3 and stop_id not in got[: first + 3]
    eos = sorted(llm.llm_engine.eos_token_ids)
    forced = SamplingParams(temperature=0, max_tokens=6, logit_bias={eos[0]: 100.0})
    out = llm.generate(PROMPTS[0], forced, use_tqdm=False)[0].outputs[0]
    assert (out.token_ids, out.finish_reason, out.text) == ([eos[0]], "stop", "")
    ignored = dataclasses.replace(forced, ignore_eos=True)
    out = llm.generate(PROMPTS[0], ignored, use_tqdm=False)[0].outputs[0]
    assert (out.token_ids, out.finish_reason) == ([eos[0]] * 6, "length")
    held = dataclasses.replace(forced, min_tokens=3)
    out = llm.generate(PROMPTS[0], held, use_tqdm=False)[0].outputs[0]
    assert (
        len(out.token_ids) == 4 and out.token_ids[3] == eos[0] and eos[0] not in out.token_ids[:3]
    )


def test_n_samples(llm: LLM) -> None:
    params = SamplingParams(n=3, temperature=1.0, seed=11, max_tokens=16, ignore_eos=True)
    # a raw prompt unlike the chats the demo model learned: its next tokens spread at T = 1
    # (after the story prompt v5 writes "g." almost surely; after "hello", v3 "hello")
    out = llm.generate(PROMPTS[3], params, use_tqdm=False)[0]
    assert [c.index for c in out.outputs] == [0, 1, 2]
    assert len({tuple(c.token_ids) for c in out.outputs}) == 3
    same = llm.generate(PROMPTS[1], greedy(8, n=2), use_tqdm=False)[0].outputs
    assert same[0].token_ids == same[1].token_ids and len(same[0].token_ids) == 8


def test_logprobs(llm: LLM) -> None:
    out = llm.generate(PROMPTS[0], greedy(8, logprobs=3), use_tqdm=False)[0].outputs[0]
    assert len(out.logprobs) == 8
    total = 0.0
    for token, entry in zip(out.token_ids, out.logprobs):
        assert token in entry and entry[token].rank == 1  # greedy picks the top raw token
        assert len(entry) == 3
        top = sorted(entry.values(), key=lambda lp: lp.rank)
        assert all(a.logprob >= b.logprob for a, b in zip(top, top[1:]))
        assert all(lp.logprob <= 0 and lp.decoded_token is not None for lp in entry.values())
        total += entry[token].logprob
    assert out.cumulative_logprob == pytest.approx(total, abs=1e-4)
    none = llm.generate(PROMPTS[0], greedy(4), use_tqdm=False)[0].outputs[0]
    assert none.logprobs is None and none.cumulative_logprob is None


def test_logit_bias_forces_a_token(llm: LLM) -> None:
    token = llm.get_tokenizer().encode(" Paris")[0]
    out = tokens(llm, [PROMPTS[1]], greedy(5, logit_bias={token: 100.0}))[0]
    assert out == [token] * 5


def test_penalties_follow_vllm_semantics() -> None:
    from thinkgate.engine.core.sampler import _apply_penalties

    row = torch.tensor([2.0, -2.0, 1.0, 4.0, 0.5])
    counts = torch.tensor([0, 2, 1, 0, 0], dtype=torch.int32)
    prompt = torch.tensor([True, False, False, False, False])
    params = SamplingParams(repetition_penalty=2.0, presence_penalty=0.5, frequency_penalty=0.25)
    seq = SimpleNamespace(params=params, output_counts=counts, prompt_mask=prompt)
    _apply_penalties(row, seq)
    # token 0: prompt only → repetition (2/2); 1: seen twice → -2*2 - 0.5 - 0.5; 2: once.
    expected = torch.tensor([1.0, -4.0 - 0.5 - 0.5, 0.5 - 0.5 - 0.25, 4.0, 0.5])
    assert torch.allclose(row, expected)


def test_penalties_change_generation(llm: LLM) -> None:
    base = tokens(llm, [PROMPTS[1]], greedy(24))[0]
    assert len(set(base)) < len(base)  # the demo model repeats itself when forced to go on
    penalized = tokens(llm, [PROMPTS[1]], greedy(24, presence_penalty=2.0, frequency_penalty=2.0))
    assert len(set(penalized[0])) > len(set(base))
    rep = tokens(llm, [PROMPTS[1]], greedy(24, repetition_penalty=3.0))[0]
    assert rep != base


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"n": 0}, "n"),
        ({"temperature": -1}, "temperature"),
        ({"top_p": 0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
        ({"top_k": -2}, "top_k"),
        ({"min_p": 2}, "min_p"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"min_tokens": -1}, "min_tokens"),
        ({"min_tokens": 5, "max_tokens": 2}, "min_tokens"),
        ({"stop": [""]}, "stop"),
        ({"stop_token_ids": [-1]}, "stop_token_ids"),
        ({"logprobs": -1}, "logprobs"),
        ({"presence_penalty": 3}, "presence_penalty"),
        ({"frequency_penalty": -3}, "frequency_penalty"),
        ({"repetition_penalty": 0}, "repetition_penalty"),
        ({"logit_bias": {"x": 1}}, "logit_bias"),
        ({"logit_bias": {1: 500}}, "logit_bias"),
        ({"seed": "a"}, "seed"),
        ({"thinking_token_budget": -1}, "thinking_token_budget"),
        ({"output_kind": "nope"}, "output_kind"),
    ],
)
def test_bad_sampling_params_name_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        SamplingParams(**kwargs)


def test_structured_outputs_params_validation() -> None:
    from thinkgate import StructuredOutputsParams

    assert StructuredOutputsParams(json={"type": "object"}).kind == "json"
    assert StructuredOutputsParams(choice=("a", "b")).choice == ["a", "b"]
    with pytest.raises(ValueError, match="exactly one"):
        StructuredOutputsParams()
    with pytest.raises(ValueError, match="exactly one"):
        StructuredOutputsParams(regex="a+", grammar="root ::= 'a'")
    with pytest.raises(ValueError, match="choice"):
        StructuredOutputsParams(choice=[])
    with pytest.raises(ValueError, match="regex"):
        StructuredOutputsParams(regex="")


def test_bad_requests_fail_clearly_and_leave_the_engine_usable(llm: LLM) -> None:
    vocab = llm.llm_engine.vocab_size
    with pytest.raises(ValueError, match="outside the vocab"):
        llm.generate([[1, vocab + 5]], greedy(2))
    with pytest.raises(ValueError, match="stop_token_ids"):
        llm.generate("hi", greedy(2, stop_token_ids=[vocab]))
    with pytest.raises(ValueError, match="max_model_len"):
        llm.generate([[1] * llm.llm_engine.max_model_len], greedy(2))
    with pytest.raises(ValueError, match="empty"):
        llm.generate([[]], greedy(2))
    with pytest.raises(ValueError, match="2 entries for 3 prompts"):
        llm.generate(["a", "b", "c"], [greedy(2), greedy(2)])
    assert not llm.llm_engine.has_unfinished_requests()
    assert len(tokens(llm, ["hi"], greedy(3))[0]) == 3


def test_token_id_prompts_and_request_output_fields(llm: LLM) -> None:
    ids = llm.get_tokenizer().encode(PROMPTS[0])
    by_text, by_ids = llm.generate([PROMPTS[0], ids], greedy(6), use_tqdm=False)
    assert by_text.prompt == PROMPTS[0] and by_ids.prompt is None
    assert by_text.prompt_token_ids == by_ids.prompt_token_ids == ids
    assert by_text.outputs[0].token_ids == by_ids.outputs[0].token_ids
    assert by_text.finished and by_text.request_id != by_ids.request_id
    decoded = llm.get_tokenizer().decode(by_text.outputs[0].token_ids, skip_special_tokens=True)
    assert by_text.outputs[0].text == decoded


def test_vllm_prompt_dicts_run_as_their_text_or_ids(llm: LLM) -> None:
    params = SamplingParams(temperature=0, max_tokens=6, ignore_eos=True)
    plain = llm.generate(["The capital", [5, 6, 7, 8]], params, use_tqdm=False)
    dicts = llm.generate([{"prompt": "The capital"}, {"prompt_token_ids": [5, 6, 7, 8]}],
                         params, use_tqdm=False)
    assert [o.outputs[0].token_ids for o in dicts] == [o.outputs[0].token_ids for o in plain]
    assert dicts[0].prompt == "The capital" and dicts[1].prompt_token_ids == [5, 6, 7, 8]
    one = llm.generate({"prompt_token_ids": [5, 6, 7, 8]}, params, use_tqdm=False)
    assert len(one) == 1 and one[0].outputs[0].token_ids == plain[1].outputs[0].token_ids
    with pytest.raises(ValueError, match="multi_modal_data"):
        llm.generate([{"prompt": "x", "multi_modal_data": {"image": None}}], params)
    with pytest.raises(ValueError, match="exactly one"):
        llm.generate([{"prompt": "x", "prompt_token_ids": [1]}], params)
    with pytest.raises(ValueError, match="prompt_token_ids"):
        llm.generate([{"prompt_token_ids": "1 2 3"}], params)
    assert llm.generate(["ok"], params, use_tqdm=False)[0].outputs[0].token_ids


def test_skip_special_tokens(llm: LLM) -> None:
    eos = sorted(llm.llm_engine.eos_token_ids)[0]
    bias = {eos: 100.0}
    kept = llm.generate("hi", greedy(3, logit_bias=bias, skip_special_tokens=False))[0].outputs[0]
    skipped = llm.generate("hi", greedy(3, logit_bias=bias))[0].outputs[0]
    assert kept.token_ids == skipped.token_ids == [eos] * 3
    assert kept.text == llm.get_tokenizer().decode([eos] * 3) and kept.text
    assert skipped.text == ""
