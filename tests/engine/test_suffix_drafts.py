"""Suffix drafts (engine/core/suffix_drafts.py, vLLM's `suffix` method): what the proposer drafts
from earlier outputs and the row's own tokens, vLLM's config names and defaults, and on the
demo model the same tokens as plain decoding with drafts kept from earlier requests."""

from __future__ import annotations

from typing import Any

import pytest
from spec_helpers import accepted, always_draft, same
from thinkgate import LLM, SamplingParams
from thinkgate.engine.config import SpeculativeConfig
from thinkgate.engine.core.suffix_drafts import SuffixProposer
from thinkgate.engine.sequence import Sequence


def _seq(tokens: list[int]) -> Sequence:
    return Sequence("r", 0, tokens, SamplingParams(), 0, None, 1 << 20)  # type: ignore[arg-type]


def _proposer(k: int = 8, depth: int = 24, cached: int = 100, factor: float = 1.0,
              min_prob: float = 0.1) -> SuffixProposer:
    return SuffixProposer(k, depth, cached, factor, min_prob)


def test_an_earlier_output_is_drafted_after_a_matching_tail() -> None:
    p = _proposer()
    p.add_output([9, 1, 2, 3, 4, 5, 6, 7, 8])
    # the row's last four tokens (1 2 3 4) ran in that output: its continuation, as long as the
    # match (4 tokens, spec factor 1)
    assert p.propose(_seq([50, 51, 1, 2, 3, 4]), 16) == [5, 6, 7, 8]
    # a longer match earns more, up to k
    assert p.propose(_seq([9, 1, 2, 3, 4]), 16) == [5, 6, 7, 8]
    assert p.propose(_seq([9, 1, 2, 3, 4]), 2) == [5, 6]  # the room the caller gives
    assert p.propose(_seq([70, 71, 72]), 16) == []  # nothing matches


def test_the_row_s_own_tokens_are_drafted_too() -> None:
    p = _proposer()  # nothing cached: prompt lookup over the row's own tokens
    assert p.propose(_seq([1, 2, 3, 4, 5, 6, 9, 1, 2, 3, 4]), 16) == [5, 6, 9, 1]


def test_the_walk_follows_the_most_common_continuation_while_it_is_likely() -> None:
    p = _proposer(min_prob=0.5)
    for _ in range(3):
        p.add_output([1, 2, 3, 4, 5, 6, 7, 8])
    p.add_output([1, 2, 3, 4, 5, 60, 70, 80])
    # 3 of 4 continue 5 6 ..., so the draft takes that branch (0.75 >= 0.5) and stays on it
    assert p.propose(_seq([0, 1, 2, 3, 4]), 16) == [5, 6, 7, 8]
    q = _proposer(min_prob=0.6)
    q.add_output([1, 2, 3, 4, 5, 6, 7])
    q.add_output([1, 2, 3, 4, 5, 60, 70])
    assert q.propose(_seq([0, 1, 2, 3, 4]), 16) == [5]  # after 5 the two part: 0.5 < 0.6


def test_spec_factor_and_depth_bound_the_draft_by_the_match() -> None:
    p = _proposer(factor=0.5)
    p.add_output([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12])
    assert p.propose(_seq([0, 1, 2, 3, 4]), 16) == [5, 6]  # a 4-token match: 2 ids
    shallow = _proposer(depth=2)
    shallow.add_output([1, 2, 3, 4, 5, 6, 7, 8, 9, 10])
    assert shallow.propose(_seq([1, 2, 3, 4]), 16) == [5, 6]  # matches count to depth 2


def test_the_oldest_outputs_are_dropped_beyond_the_cache_size() -> None:
    p = _proposer(cached=2)
    p.add_output([1, 2, 3, 4, 5, 6])
    p.add_output([20, 21, 22, 23, 24])
    p.add_output([30, 31, 32, 33, 34])
    assert p.num_cached == 2
    assert p.propose(_seq([0, 1, 2, 3, 4]), 16) == []  # the first output is gone
    assert p.propose(_seq([0, 30, 31, 32]), 16) == [33, 34]
    for i in range(40):  # the index is rebuilt once dropped entries outnumber live ones
        p.add_output([100 + i, 200, 201, 202])
    assert p.propose(_seq([5, 200, 201]), 16) == [202]
    off = _proposer(cached=0)
    off.add_output([1, 2, 3, 4, 5])
    assert off.num_cached == 0


def test_config_follows_vllm_names_and_defaults() -> None:
    parsed = SpeculativeConfig.parse({"method": "suffix"})
    assert parsed is not None and parsed.method == "suffix"
    assert parsed.num_speculative_tokens == 16  # vLLM: the tree depth (24), capped here at 16
    assert (parsed.suffix_decoding_max_tree_depth, parsed.suffix_decoding_max_cached_requests,
            parsed.suffix_decoding_max_spec_factor,
            parsed.suffix_decoding_min_token_prob) == (24, 10000, 1.0, 0.1)
    parsed = SpeculativeConfig.parse({"method": "suffix", "suffix_decoding_max_tree_depth": 8,
                                      "suffix_decoding_min_token_prob": 0.3})
    assert parsed is not None
    assert (parsed.num_speculative_tokens, parsed.suffix_decoding_min_token_prob) == (8, 0.3)
    for bad, message in (
            ({"method": "suffix", "suffix_decoding_max_tree_depth": 0}, "max_tree_depth"),
            ({"method": "suffix", "suffix_decoding_max_cached_requests": -1}, "cached_requests"),
            ({"method": "suffix", "suffix_decoding_min_token_prob": 1.5}, "min_token_prob"),
            ({"method": "suffix", "suffix_decoding_max_spec_factor": "x"}, "spec_factor"),
            ({"method": "suffix", "num_speculative_tokens": 17}, "at most 16")):
        with pytest.raises(ValueError, match=message):
            SpeculativeConfig.parse(bad)


def _tool_chats(n: int) -> list[Any]:
    from thinkgate.benchmarks.training.chats import heldout_demo_tool_chats

    return [c for c in heldout_demo_tool_chats(4 * n)
            if c.template_kwargs["enable_thinking"]][:n]


def _chat(llm: LLM, chats: list[Any], params: SamplingParams) -> list[list[int]]:
    outs = llm.chat([c.messages for c in chats], params, use_tqdm=False, tools=chats[0].tools,
                    tool_choice="required", chat_template_kwargs={"enable_thinking": True})
    return [list(o.output.outputs[0].token_ids) for o in outs]


def test_later_requests_draft_earlier_answers_and_decode_as_plain(demo_dir: str,
                                                                  llm: LLM) -> None:
    """The demo model's tool requests (thinking on): its thinking and its call repeat their
    shape across requests, which the ngram method cannot draft and this one does; greedy ids
    equal plain decoding's, one request at a time and eight at once."""
    spec = always_draft(LLM(model=demo_dir, max_num_seqs=64,
                            speculative_config={"method": "suffix"}))
    chats = _tool_chats(12)
    params = SamplingParams(temperature=0, max_tokens=96)
    want = _chat(llm, chats, params)
    first = [_chat(spec, [c], params)[0] for c in chats[:4]]
    assert first == want[:4]
    kept_before = accepted(spec)
    assert spec.llm_engine.speculator.proposer.num_cached == 4
    assert _chat(spec, chats[4:], params) == want[4:]
    assert accepted(spec) - kept_before > sum(len(ids) for ids in want[4:]) // 4
    same(llm, spec, ["The user wants", "I will call"],
         SamplingParams(temperature=1.0, seed=3, max_tokens=24))


def test_a_draft_through_the_grammar_s_end_is_verified(demo_dir: str, llm: LLM) -> None:
    """The second request drafts the first one's whole answer, the stop id that ends its
    grammar included: the draft's masks stop there (no jump-forward text is looked up past the
    end of a grammar), and the answer is plain decoding's."""
    from thinkgate import StructuredOutputsParams

    schema = {"type": "object", "properties": {"city": {"type": "string"}},
              "required": ["city"], "additionalProperties": False}
    prompt = ("<|im_start|>user\nWhat's the weather in Paris? Answer as JSON.<|im_end|>\n"
              "<|im_start|>assistant\n<think>\n\n</think>\n\n")
    spec = always_draft(LLM(model=demo_dir, speculative_config={"method": "suffix"}))
    params = SamplingParams(temperature=0, max_tokens=40,
                            structured_outputs=StructuredOutputsParams(json=schema))
    first = same(llm, spec, [prompt], params)
    kept = accepted(spec)
    again = same(llm, spec, [prompt], params)
    assert again[0].outputs[0].token_ids == first[0].outputs[0].token_ids
    assert accepted(spec) > kept
