"""`PromptTokenizer` (api/prompt_tokens.py): piecewise prompt ids equal a fresh tokenization."""

from __future__ import annotations

import random
from typing import Any

import pytest
from thinkgate.api.chat import ChatLayer
from thinkgate.api.prompt_tokens import (
    CHUNK_CHARS,
    WHOLE_CHARS_PER_TOKEN,
    PromptTokenizer,
    PromptTooLong,
    encode_bounded,
)
from thinkgate.benchmarks.bench_prefix import system_prompt, tool_list
from thinkgate.engine.demo import demo_model_path
from thinkgate.engine.demo.data import TOOLS
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


# ---- encode_bounded: a prompt far over the context is refused after about a context's worth

def _counting_encoder(tok) -> tuple[Any, list[int]]:
    seen = [0]

    def encode(text: str) -> list[int]:
        seen[0] += len(text)
        return fresh(tok, text)
    return encode, seen


def _awkward_texts(seed: int) -> list[str]:
    """Long texts whose tokens per character vary a lot: words, spaces, newline runs, control
    tokens written as text, digits, non-Latin scripts, and a random mix of those."""
    rng = random.Random(seed)
    parts = ["word ", " " * 37, "\n\n\n", "<|im_start|>", "<|im_end|>\n", "1234567890",
             "漢字🙂", "é", "\t-", "{\"k\": [1, 2]}", "<think>"]
    texts = [p * (200_000 // len(p)) for p in parts]
    texts.append("".join(rng.choice(parts) for _ in range(30_000)))
    return texts


@pytest.mark.parametrize("max_tokens", [64, 2048, 20_000])
def test_encode_bounded_refuses_only_what_is_too_long(tok, max_tokens: int) -> None:
    for text in _awkward_texts(max_tokens):
        encode, seen = _counting_encoder(tok)
        try:
            ids = encode_bounded(encode, text, max_tokens)
        except PromptTooLong as exc:
            whole = fresh(tok, text)
            assert len(whole) > max_tokens, (text[:40], len(whole))
            assert max_tokens < exc.at_least <= len(whole)
            # it stopped early: about one context's worth, never the whole text
            assert seen[0] <= max(WHOLE_CHARS_PER_TOKEN * max_tokens, 0) + 3 * CHUNK_CHARS
            assert seen[0] < len(text)
        else:
            assert ids == fresh(tok, text)


def test_encode_bounded_keeps_exact_ids_below_the_whole_threshold(tok) -> None:
    text = "word " * 400  # over a 256-token context, but short: tokenized whole, exactly
    assert encode_bounded(lambda t: fresh(tok, t), text, 256) == fresh(tok, text)
    assert encode_bounded(lambda t: fresh(tok, t), text, None) == fresh(tok, text)


def test_chat_layer_refuses_a_huge_prompt_early(tok) -> None:
    layer = ChatLayer(tok, reasoning_parser="qwen3", tool_call_parser="hermes",
                      max_prompt_tokens=2048)
    with pytest.raises(PromptTooLong) as info:
        layer.prepare([{"role": "user", "content": "word " * 4_000_000}],
                      SamplingParams(max_tokens=8))
    assert info.value.code == "context_length_exceeded" and "2048" in str(info.value)
    small = layer.prepare([{"role": "user", "content": "hi"}], SamplingParams(max_tokens=8))
    assert small.prompt_token_ids == fresh(tok, small.prompt)
