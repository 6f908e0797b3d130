"""The bundled reasoning model: a small HF folder sharing the demo model's tokenizer, its template
with reasoning_effort, and its name (`thinkgate-reasoner`) accepted wherever a model is."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest
from thinkgate.engine.demo import (
    BUNDLED_MODELS,
    DEMO_MODEL_DIR,
    bundled_model_path,
    reasoner_model_path,
)
from thinkgate.engine.model.model_loader import resolve_model_path

MODEL_DIR = Path(reasoner_model_path())


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(MODEL_DIR)


def test_folder_is_a_small_hf_checkpoint() -> None:
    names = {p.name for p in MODEL_DIR.iterdir()}
    assert {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
            "tokenizer_config.json", "chat_template.jinja", "README.md"} <= names
    assert sum(p.stat().st_size for p in MODEL_DIR.iterdir()) < 15 * 2**20


def test_shares_the_demo_tokenizer(tokenizer) -> None:
    from transformers import AutoTokenizer

    demo = AutoTokenizer.from_pretrained(DEMO_MODEL_DIR)
    assert tokenizer.get_vocab() == demo.get_vocab()
    text = "<think>\nFirst, 12 + 7 = 19.\n</think>\n\n<tool_call>\n{}\n</tool_call>"
    assert tokenizer.encode(text) == demo.encode(text)


@pytest.mark.parametrize(("effort", "line"), [
    ("low", "Reasoning effort: low."), ("minimal", "Reasoning effort: low."),
    ("medium", None), ("high", "Reasoning effort: high."), ("xhigh", "Reasoning effort: high."),
])
def test_template_puts_reasoning_effort_in_the_system_turn(tokenizer, effort: str,
                                                           line: str | None) -> None:
    ask = [{"role": "user", "content": "What is 2 + 3?"}]
    text = tokenizer.apply_chat_template(ask, tokenize=False, add_generation_prompt=True,
                                         reasoning_effort=effort)
    if line is None:
        assert text == tokenizer.apply_chat_template(ask, tokenize=False,
                                                     add_generation_prompt=True)
        assert "Reasoning effort" not in text
    else:
        assert text.startswith(f"<|im_start|>system\n{line}<|im_end|>\n<|im_start|>user\n")
    assert text.endswith("<|im_start|>assistant\n")


def test_bundled_names_resolve_and_a_folder_of_that_name_wins(tmp_path: Path,
                                                              monkeypatch) -> None:
    assert set(BUNDLED_MODELS) == {"thinkgate-demo", "thinkgate-reasoner"}
    assert resolve_model_path("thinkgate-reasoner") == (MODEL_DIR, None)
    assert resolve_model_path("thinkgate-demo") == (DEMO_MODEL_DIR, None)
    assert bundled_model_path("thinkgate-nothing") is None
    with pytest.raises(FileNotFoundError, match="thinkgate-nothing"):
        resolve_model_path("thinkgate-nothing")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "thinkgate-reasoner").mkdir()
    (tmp_path / "thinkgate-reasoner" / "config.json").write_text("{}")
    folder, _ = resolve_model_path("thinkgate-reasoner")
    assert folder.resolve() == (tmp_path / "thinkgate-reasoner").resolve()


def test_serve_by_name_gets_the_demo_defaults() -> None:
    from thinkgate.api.cli_args import add_model_args, resolve_model_args

    parser = argparse.ArgumentParser()
    add_model_args(parser)
    ns = resolve_model_args(parser.parse_args(["thinkgate-reasoner"]))
    assert (ns.tool_call_parser, ns.reasoning_parser) == ("hermes", "qwen3")
    assert ns.enable_auto_tool_choice is True
    assert ns.served_model_name == ["thinkgate-reasoner"]
    assert resolve_model_path(ns.model)[0] == MODEL_DIR
    assert os.path.isfile(MODEL_DIR / "config.json")
