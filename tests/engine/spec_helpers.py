"""What the speculative-decoding tests share: the draft config, a draft policy that always
drafts, and the check that speculation leaves every output as plain decoding's."""

from __future__ import annotations

from typing import Any

from thinkgate import LLM, SamplingParams

SPEC = {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4,
        "prompt_lookup_min": 1}


def always_draft(llm: LLM) -> LLM:
    """Verify steps priced as plain ones: every draft worth proposing runs, whatever this
    machine's step timings (draft_policy.py; its choices are tested in test_draft_policy.py)."""
    llm.llm_engine.speculator.costs.ratio = lambda rows, width, constrained=False: 1.0
    return llm


def accepted(llm: LLM) -> int:
    return llm.llm_engine.stats()["spec_decode_num_accepted_tokens"]


def same(base: LLM, spec: LLM, prompts: list[Any], params: SamplingParams) -> list[Any]:
    want = base.generate(prompts, params, use_tqdm=False)
    got = spec.generate(prompts, params, use_tqdm=False)
    for a, b in zip(want, got):
        assert [o.token_ids for o in b.outputs] == [o.token_ids for o in a.outputs]
        assert [o.text for o in b.outputs] == [o.text for o in a.outputs]
        assert [o.finish_reason for o in b.outputs] == [o.finish_reason for o in a.outputs]
    return got
