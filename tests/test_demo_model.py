"""The bundled demo model: loads offline, renders tools, and speaks qwen3 + hermes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from thinkgate.benchmarks.training.chats import heldout_chats
from thinkgate.engine.demo import demo_model_path
from thinkgate.engine.demo.data import TOOLS

MODEL_DIR = Path(demo_model_path())
# hermes calls after one thought, with or without newlines inside the tags (the forced-call
# grammar writes them without)
CALL_RE = re.compile(
    r"^<think>\n.+?\n</think>\n\n(?P<body>(?:<tool_call>.+?</tool_call>\n?)+)<\|im_end\|>$", re.S
)
BODY_RE = re.compile(r"<tool_call>\n?(.+?)\n?</tool_call>", re.S)


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(MODEL_DIR)


@pytest.fixture(scope="module")
def model():
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(MODEL_DIR).eval()


def test_folder_is_a_small_hf_checkpoint():
    names = {p.name for p in MODEL_DIR.iterdir()}
    assert {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
            "tokenizer_config.json", "chat_template.jinja"} <= names
    assert sum(p.stat().st_size for p in MODEL_DIR.iterdir()) < 10 * 2**20


def test_config_and_special_tokens(tokenizer):
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(MODEL_DIR)
    assert config.model_type == "qwen3" and config.tie_word_embeddings
    assert config.num_key_value_heads < config.num_attention_heads
    assert config.vocab_size % 64 == 0 and config.vocab_size >= len(tokenizer)
    for marker in ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>",
                   "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]:
        ids = tokenizer.encode(marker, add_special_tokens=False)
        assert len(ids) == 1 and tokenizer.convert_ids_to_tokens(ids[0]) == marker
    # think and tool markers are not "special": skip_special_tokens keeps them, like Qwen3
    ids = tokenizer.encode("<think>\nx\n</think>\n\n<|im_end|>", add_special_tokens=False)
    assert tokenizer.decode(ids, skip_special_tokens=True) == "<think>\nx\n</think>\n\n"


def test_xgrammar_reads_the_tokenizer(tokenizer):
    import xgrammar as xgr
    from transformers import AutoConfig

    vocab = AutoConfig.from_pretrained(MODEL_DIR).vocab_size
    info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab,
                                              stop_token_ids=[tokenizer.eos_token_id])
    assert info.vocab_size == vocab
    assert info.vocab_type == xgr.VocabType.BYTE_LEVEL


def test_template_renders_tools_tool_results_and_thinking_switch(tokenizer):
    weather = TOOLS["get_weather"]
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {
            "name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
        {"role": "tool", "content": '{"temp": 3}'},
    ]
    text = tokenizer.apply_chat_template(messages, tools=[weather], tokenize=False,
                                         add_generation_prompt=True)
    assert text.startswith("<|im_start|>system\nBe brief.\n\n# Tools\n")
    assert json.dumps(weather) in text
    assert ('<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": '
            '{"city": "Oslo"}}\n</tool_call><|im_end|>\n') in text
    assert '<|im_start|>user\n<tool_response>\n{"temp": 3}\n</tool_response><|im_end|>\n' in text
    assert text.endswith("<|im_start|>assistant\n")
    off = tokenizer.apply_chat_template(messages[:2], tokenize=False, add_generation_prompt=True,
                                        enable_thinking=False)
    assert off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert "# Tools" not in off


def test_greedy_answers_heldout_tool_requests_with_copied_values(tokenizer, model):
    """Held-out requests (values the model never saw): the call is in format, names the
    right tool and copies every argument value exactly (plain transformers, no grammar)."""
    import torch

    good = 0
    chats = heldout_chats("demo", "tool", 10)
    for chat in chats:
        prompt = tokenizer.apply_chat_template(chat.messages, tools=chat.tools, tokenize=False,
                                               add_generation_prompt=True, enable_thinking=True)
        ids = torch.tensor([tokenizer.encode(prompt, add_special_tokens=False)])
        with torch.inference_mode():
            out = model.generate(ids, max_new_tokens=120, do_sample=False)
        text = tokenizer.decode(out[0, ids.shape[1]:])
        match = CALL_RE.match(text)
        if match is None:
            continue
        try:
            calls = [json.loads(body) for body in BODY_RE.findall(match["body"])]
        except json.JSONDecodeError:
            continue
        good += [(c.get("name"), c.get("arguments")) for c in calls] == list(chat.task.calls)
    assert good >= 9, f"only {good}/10 held-out tool requests called with the question's values"
