"""`PromptTokenizer` (api/prompt_tokens.py): piecewise prompt ids equal a fresh tokenization."""

from __future__ import annotations

import random

import pytest
from thinkgate.api.chat import ChatLayer
from thinkgate.api.prompt_tokens import PromptTokenizer
from thinkgate.benchmarks.bench_prefix import system_prompt, tool_list
from thinkgate.engine.demo import demo_model_path
from thinkgate.engine.demo_data import TOOLS
from thinkgate.engine.sampling_params import SamplingParams
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import AutoTokenizer, PreTrainedTokenizerFast


@pytest.fixture(scope="module")
def tok():
    return AutoTokenizer.from_pretrained(str(demo_model_path()))


def fresh(tok, text: str) -> list[int]:
    return list(tok.encode(text, add_special_tokens=False))


def test_demo_tokenizer_is_split_at_its_control_tokens(tok) -> None:
    pt = PromptTokenizer(tok)
    assert pt.enabled
    assert {"<|im_start|>", "<|im_end|>"} <= set(pt.separators)
    assert "<think>" not in pt.separators  # normalized added tokens stay inside pieces


def test_repeated_and_changed_prefixes_give_fresh_ids(tok) -> None:
    layer = ChatLayer(tok, reasoning_parser="qwen3", tool_call_parser="hermes")
    system = system_prompt("tokens")
    changed = system[:500] + "X" + system[501:]  # same length, one character differs
    cases = [(system, f"Question {i}?") for i in range(4)] + [(changed, "Question 0?"),
                                                              (system[:-7], "Question 0?")]
    for sys_text, user in cases:
        messages = [{"role": "system", "content": sys_text}, {"role": "user", "content": user}]
        prompt = layer.render(messages, None, {})
        assert layer.encode_prompt(prompt) == fresh(tok, prompt)
    pt = layer._prompt_tokenizer
    assert pt.hits >= 3  # the repeated system prompt was tokenized once
    assert pt.misses >= 3  # the changed and the shortened ones were not taken from the cache


def test_tools_and_template_kwargs_change_the_ids(tok) -> None:
    layer = ChatLayer(tok, reasoning_parser="qwen3", tool_call_parser="hermes")
    messages = [{"role": "system", "content": "Use the tools. " * 10},
                {"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": "Let me check."},
                {"role": "user", "content": "And in Rome?"}]
    seen = set()
    for tools in (None, [TOOLS["get_weather"]], tool_list("a"), tool_list("b")):
        for kwargs in ({}, {"enable_thinking": False}, {"enable_thinking": True}):
            req = layer.prepare(messages, SamplingParams(max_tokens=4), tools=tools,
                                tool_choice="auto" if tools else None,
                                chat_template_kwargs=kwargs)
            prompt = layer.render(messages, tools, kwargs)
            assert req.prompt == prompt
            assert req.prompt_token_ids == fresh(tok, prompt)
            seen.add(tuple(req.prompt_token_ids))
    assert len(seen) == 8  # every tool list changes the ids; enable_thinking=False changes them


def test_random_text_around_control_tokens(tok) -> None:
    pt = PromptTokenizer(tok)
    rng = random.Random(7)
    alphabet = list("ab xyz\n\t{}\":,0123456789éü漢🙂<|>/") + ["<think>", "</think>",
                                                          "<tool_call>", "im_start", "<|im"]
    seps = ["<|im_start|>", "<|im_end|>", "<|endoftext|>"]
    long_piece = " ".join(rng.choice(["alpha", "beta", "\n\n", "42", "  "]) for _ in range(80))
    for _ in range(300):
        parts = []
        for _ in range(rng.randint(1, 6)):
            if rng.random() < 0.3:
                parts.append(long_piece[: rng.randint(60, len(long_piece))])
            else:
                parts.append("".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12))))
            parts.append(rng.choice(seps))
        text = "".join(parts[: rng.randint(1, len(parts))])
        assert pt.encode(text) == fresh(tok, text), text
    assert pt.hits > 0


def _word_level(pre_tokenizer, **token_flags) -> PreTrainedTokenizerFast:
    vocab = {"[UNK]": 0, "<s>": 1, "hello": 2, "world": 3, "▁hello": 4, "▁world": 5}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizer
    fast = PreTrainedTokenizerFast(tokenizer_object=backend)
    from tokenizers import AddedToken

    fast.add_special_tokens({"additional_special_tokens": [
        AddedToken("<s>", normalized=False, **token_flags)]})
    return fast


def test_unsafe_tokenizers_are_tokenized_whole() -> None:
    # Metaspace marks only the first piece: splitting would change the ids
    meta = _word_level(pre_tokenizers.Metaspace(prepend_scheme="first"))
    text = "hello world<s>hello world"
    assert meta.encode("hello", add_special_tokens=False) != meta.encode(
        "<s>hello", add_special_tokens=False)[1:]  # the premise: position changes the ids
    pt = PromptTokenizer(meta)
    assert not pt.enabled
    assert pt.encode(text) == fresh(meta, text)
    # a separator that swallows the whitespace after it is not split at
    strip = _word_level(pre_tokenizers.WhitespaceSplit(), rstrip=True)
    assert "<s>" not in PromptTokenizer(strip).separators
    plain = _word_level(pre_tokenizers.WhitespaceSplit())
    assert PromptTokenizer(plain).separators == {"<s>": 1}


def test_overlapping_added_tokens_are_not_separators(tok) -> None:
    backend = Tokenizer.from_str(tok.backend_tokenizer.to_str())
    fast = PreTrainedTokenizerFast(tokenizer_object=backend)
    fast.add_special_tokens({"additional_special_tokens": ["<|im_start|>user"]})
    pt = PromptTokenizer(fast)
    assert "<|im_start|>" not in pt.separators
    text = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert pt.encode(text) == fresh(fast, text)
