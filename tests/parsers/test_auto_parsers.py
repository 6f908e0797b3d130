"""`auto` parser names from real chat templates (tests/parsers/templates/*.jinja, each from a
model's public template; the first line says where it comes from).

The expected names are the ones vLLM's docs and the model cards pass for each model
(`--tool-call-parser` / `--reasoning-parser`); None where vLLM has no parser for the model's output
(Gemma 2 writes no markers; Granite 3.3 and LFM2.5 only mention `<think>` in history/system text).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from thinkgate.parsers import list_parsers
from thinkgate.parsers.auto import choose_parsers, read_template_and_tokens, resolve_auto_parsers

TEMPLATES = Path(__file__).parent / "templates"

# file -> (tool parser, reasoning parser, special tokens the tokenizer adds beyond the template)
CASES: dict[str, tuple[str | None, str | None, tuple[str, ...]]] = {
    "qwen3.jinja": ("hermes", "qwen3", ()),
    "qwen3_5.jinja": ("qwen3_coder", "qwen3", ()),
    "qwq_32b.jinja": ("hermes", "deepseek_r1", ()),
    "qwen2_5.jinja": ("hermes", None, ()),
    "llama3_2.jinja": ("llama3_json", None, ("<|python_tag|>",)),
    "llama4.jinja": ("llama4_json", None, ()),
    "mistral_nemo_2407.jinja": ("mistral", None, ()),
    "mistral_small_3_2.jinja": ("mistral", None, ()),
    "ministral_3_reasoning.jinja": ("mistral", "mistral", ()),
    "deepseek_v3_1.jinja": ("deepseek_v31", "deepseek_v3", ()),
    "deepseek_r1_distill_qwen.jinja": ("deepseek_v3", "deepseek_r1", ()),
    "deepseek_v3_2.jinja": ("deepseek_v32", "deepseek_v3", ()),
    "glm_4_5.jinja": ("glm45", "glm45", ()),
    "kimi_k2_instruct.jinja": ("kimi_k2", None,
                               ("<|tool_calls_section_begin|>", "<|tool_call_begin|>",
                                "<|tool_call_argument_begin|>", "<|tool_call_end|>")),
    "kimi_k2_thinking.jinja": ("kimi_k2", "kimi_k2", ()),
    "gpt_oss_120b.jinja": ("openai", "openai_gptoss", ()),
    "granite_3_3.jinja": ("granite", None, ()),
    "hermes_3_llama_3_1.jinja": ("hermes", None, ()),
    "phi4_mini.jinja": ("phi4_mini_json", None, ()),
    "gemma_2.jinja": (None, None, ()),
    "gemma_4.jinja": ("gemma4", "gemma4", ()),
    "minimax_m2.jinja": ("minimax_m2", "minimax_m2", ()),
    "seed_oss.jinja": ("seed_oss", "seed_oss", ()),
    "lfm2_5.jinja": ("lfm2", None, ()),
}


def test_every_fixture_is_covered() -> None:
    assert sorted(p.name for p in TEMPLATES.glob("*.jinja")) == sorted(CASES)
    assert len(CASES) >= 20


@pytest.mark.parametrize("name", sorted(CASES))
def test_real_template_picks_vllm_names(name: str) -> None:
    tool, reasoning, tokens = CASES[name]
    choice = choose_parsers((TEMPLATES / name).read_text(encoding="utf-8"), tokens)
    assert (choice.tool_parser, choice.reasoning_parser) == (tool, reasoning)
    known = list_parsers()
    assert tool is None or tool in known["tool"]
    assert reasoning is None or reasoning in known["reasoning"]
    if tool is not None:  # the markers named in the log are in the template or the tokens
        text = (TEMPLATES / name).read_text(encoding="utf-8") + "".join(tokens)
        assert all(any(part in text for part in m.split("/")) for m in choice.tool_markers)


def test_instruct_template_that_strips_think_from_history_gets_no_reasoning() -> None:
    # A Qwen3-2507-Instruct-like template: `<think>` only in the history branch, no switch.
    template = ("{%- if '</think>' in content %}{%- set content = content.split('</think>')[-1] %}"
                "{%- endif %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
                "{%- endif %}")
    assert choose_parsers(template).reasoning_parser is None
    # the thinking variant opens `<think>` in the generation prompt
    thinking = template.replace("assistant\\n' }}", "assistant\\n<think>\\n' }}")
    assert choose_parsers(thinking).reasoning_parser == "deepseek_r1"


def test_special_tokens_alone_decide_only_distinctive_formats() -> None:
    assert choose_parsers(None, ["[TOOL_CALLS]", "[THINK]"]).tool_parser == "mistral"
    assert choose_parsers(None, ["[TOOL_CALLS]", "[THINK]"]).reasoning_parser == "mistral"
    # `<think>` / `<tool_call>` tokens sit in many vocabularies whose templates never use them
    assert choose_parsers(None, ["<think>", "</think>", "<tool_call>"]).tool_parser is None
    assert choose_parsers(None, ["<think>", "</think>"]).reasoning_parser is None


def test_demo_model_folder_picks_what_the_demo_uses() -> None:
    from thinkgate.api.cli_args import DEMO_REASONING_PARSER, DEMO_TOOL_PARSER
    from thinkgate.engine.demo import demo_model_path

    assert resolve_auto_parsers("auto", "auto", demo_model_path()) == (DEMO_TOOL_PARSER,
                                                                     DEMO_REASONING_PARSER)


def _model_folder(tmp_path: Path, template: object, added: list[str]) -> Path:
    config = {"chat_template": template,
              "added_tokens_decoder": {str(i): {"content": t, "special": True}
                                       for i, t in enumerate(added)}}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return tmp_path


def test_folder_reading_named_templates_and_tokens(tmp_path: Path) -> None:
    templates = [{"name": "default", "template": "{{ messages }}"},
                 {"name": "tool_use", "template": (TEMPLATES / "hermes_3_llama_3_1.jinja")
                  .read_text(encoding="utf-8")}]
    folder = _model_folder(tmp_path, templates, ["<|im_start|>", "[THINK]"])
    (folder / "tokenizer.json").write_text(json.dumps(
        {"added_tokens": [{"id": 5, "content": "<extra>"}]}), encoding="utf-8")
    text, tokens = read_template_and_tokens(folder)
    assert "<tool_call>" in text and "{{ messages }}" in text
    assert set(tokens) == {"<|im_start|>", "[THINK]", "<extra>"}
    assert resolve_auto_parsers("auto", "auto", folder) == ("hermes", "mistral")


def test_explicit_names_pass_through_and_override_template(tmp_path: Path) -> None:
    folder = _model_folder(tmp_path, (TEMPLATES / "qwen3.jinja").read_text(encoding="utf-8"), [])
    assert resolve_auto_parsers("mistral", None, folder) == ("mistral", None)
    assert resolve_auto_parsers("auto", "qwen3", folder) == ("hermes", "qwen3")
    gemma = (TEMPLATES / "gemma_4.jinja").read_text(encoding="utf-8")
    assert resolve_auto_parsers("auto", "auto", folder, chat_template=gemma) == ("gemma4",
                                                                                 "gemma4")


def test_no_format_found_warns_and_gives_none(tmp_path: Path,
                                              caplog: pytest.LogCaptureFixture) -> None:
    folder = _model_folder(tmp_path, (TEMPLATES / "gemma_2.jinja").read_text(encoding="utf-8"), [])
    with caplog.at_level(logging.INFO, logger="thinkgate.parsers.auto"):
        assert resolve_auto_parsers("auto", "auto", folder) == (None, None)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2 and "--tool-call-parser" in warnings[0].getMessage()
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="thinkgate.parsers.auto"):
        resolve_auto_parsers("auto", "auto", TEMPLATES.parent / "nowhere")
    assert any("no chat template found" in r.getMessage() for r in caplog.records)


def _serve_args(*argv: str) -> object:
    import argparse

    from thinkgate.api.cli_args import add_model_args, resolve_model_args

    parser = argparse.ArgumentParser()
    add_model_args(parser)
    return resolve_model_args(parser.parse_args(list(argv)))


@pytest.mark.parametrize("name", sorted(CASES))
def test_serve_flags_on_a_model_folder_default_to_auto(name: str, tmp_path: Path) -> None:
    tool, reasoning, tokens = CASES[name]
    (tmp_path / "config.json").write_text("{}", encoding="utf-8")
    (tmp_path / "chat_template.jinja").write_text(
        (TEMPLATES / name).read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / "tokenizer.json").write_text(
        json.dumps({"added_tokens": [{"content": t} for t in tokens]}), encoding="utf-8")
    ns = _serve_args(str(tmp_path))
    assert (ns.tool_call_parser, ns.reasoning_parser) == (tool, reasoning)
    assert ns.enable_auto_tool_choice is False  # vLLM's flag stays the user's choice
    ns = _serve_args(str(tmp_path), "--tool-call-parser", "pythonic")
    assert (ns.tool_call_parser, ns.reasoning_parser) == ("pythonic", reasoning)


def test_serve_without_a_model_keeps_the_demo_parsers() -> None:
    ns = _serve_args()
    assert (ns.tool_call_parser, ns.reasoning_parser) == ("hermes", "qwen3")
    ns = _serve_args("--tool-call-parser", "auto", "--reasoning-parser", "auto")
    assert (ns.tool_call_parser, ns.reasoning_parser) == ("hermes", "qwen3")


def test_llm_on_the_demo_folder_reads_its_template() -> None:
    from thinkgate import LLM
    from thinkgate.engine.demo import demo_model_path

    llm = LLM(model=demo_model_path(), max_num_seqs=2, max_model_len=64)
    assert llm.extra_args == {"reasoning_parser": "qwen3", "tool_call_parser": "hermes"}
    assert llm.llm_engine.config.reasoning_parser == "qwen3"
    plain = LLM(model=demo_model_path(), max_num_seqs=2, max_model_len=64,
                reasoning_parser=None, tool_call_parser=None)
    assert plain.extra_args == {"reasoning_parser": None, "tool_call_parser": None}
