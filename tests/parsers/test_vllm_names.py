"""Every parser name vLLM 0.33 registers resolves here, and we register no other (issue 28).

The lists are the keys of `_TOOL_PARSERS_TO_REGISTER` in `vllm/tool_parsers/__init__.py` and of
`_REASONING_PARSERS_TO_REGISTER` in `vllm/reasoning/__init__.py` of the vLLM 0.33.0 wheel
(vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl), in their order there. vLLM 0.33 has a
NemotronV3 tool adapter (`vllm/parser/engine/registered_adapters.py`) but registers no
`nemotron_v3` tool parser name: Nemotron 3's tools are read with `qwen3_coder`."""

from __future__ import annotations

import pytest
from thinkgate.parsers import get_parser, list_parsers
from thinkgate.parsers.reasoning import REASONING_MODULES
from thinkgate.parsers.tools import TOOL_MODULES

VLLM_033_TOOL_PARSERS = (
    "dots", "deepseek_v3", "deepseek_v31", "deepseek_v32", "deepseek_v4", "deepseek_v41",
    "cohere_command3", "cohere_command4", "ernie45", "glm45", "glm47", "ling3", "granite-20b-fc",
    "granite", "granite4", "hermes", "hf", "beam", "poolside_v1", "hunyuan_a13b", "hy_v3",
    "hy_v4", "internlm", "jamba", "lfm2", "kimi_k2", "kimi_k3", "k2_horizon", "llama3_json",
    "llama4_json", "llama4_pythonic", "longcat", "mimo", "minimax_m2", "minimax_m3", "minicpm5",
    "mistral", "olmo3", "plamo3", "muse", "muse_glimmer", "musespark1x", "openai",
    "phi4_mini_json", "pythonic", "qwen3_coder", "qwen3_json", "qwen3_xml", "seed_oss", "step3",
    "step3p5", "step5", "inkling", "xlam", "gigachat3", "functiongemma", "gemma4", "apertus",
)
VLLM_033_REASONING_PARSERS = (
    "deepseek_r1", "deepseek_v3", "deepseek_v4", "deepseek_v41", "poolside_v1",
    "cohere_command3", "cohere_command4", "ernie45", "gemma4", "glm45", "glm47", "ling3",
    "openai_gptoss", "granite", "granite_thinking_parser", "hf", "beam", "holo2", "hunyuan_a13b",
    "hy_v3", "hy_v4", "kimi_k2", "kimi_k3", "k2_horizon", "mimo", "minicpmv", "minimax_m2",
    "minimax_m2_append_think", "minimax_m3", "mistral", "nemotron_v3", "olmo3", "plamo3", "muse",
    "muse_glimmer", "musespark1x", "qwen3", "seed_oss", "step3", "step3p5", "step5", "inkling",
)


def test_the_lists_are_vllm_033s() -> None:
    assert (len(VLLM_033_TOOL_PARSERS), len(set(VLLM_033_TOOL_PARSERS))) == (58, 58)
    assert (len(VLLM_033_REASONING_PARSERS), len(set(VLLM_033_REASONING_PARSERS))) == (42, 42)


def test_our_names_are_vllm_033s() -> None:
    """The built-in name tables (other tests register plugin names in this process)."""
    assert sorted(TOOL_MODULES) == sorted(VLLM_033_TOOL_PARSERS)
    assert sorted(REASONING_MODULES) == sorted(VLLM_033_REASONING_PARSERS)
    names = list_parsers()
    assert set(VLLM_033_TOOL_PARSERS) <= set(names["tool"])
    assert set(VLLM_033_REASONING_PARSERS) <= set(names["reasoning"])


@pytest.mark.parametrize("name", VLLM_033_TOOL_PARSERS)
def test_tool_name_resolves(name: str) -> None:
    m = get_parser(tool_parser=name).parse("hello")
    # Cohere Command 4's tool parser splits its thinking itself, and the output starts in it
    assert (m.reasoning if name == "cohere_command4" else m.content) == "hello"


@pytest.mark.parametrize("name", VLLM_033_REASONING_PARSERS)
def test_reasoning_name_resolves(name: str) -> None:
    assert get_parser(reasoning_parser=name) is not None
