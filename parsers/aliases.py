"""SGLang's parser names for formats vLLM names otherwise (`--tool-call-parser` /
`--reasoning-parser` accept both).

Source: SGLang's `FunctionCallParser.ToolCallParserEnum`
(python/sglang/srt/function_call/function_call_parser.py) and `ReasoningParser.DetectorMap`
(python/sglang/srt/parser/reasoning_parser.py), sgl-project/sglang main, read 2026-12-05. Only
names whose SGLang detector reads the same format as the vLLM parser named here; an SGLang name
that is also a vLLM name stays the vLLM one (SGLang's `muse` is vLLM's `muse_glimmer`, but
`muse` here is vLLM's). The aliases are not in `list_parsers()` (vLLM's names).
"""

from __future__ import annotations

TOOL_ALIASES: dict[str, str] = {
    "apertus2509": "apertus",
    "deepseekv3": "deepseek_v3",
    "deepseekv31": "deepseek_v31",
    "deepseekv32": "deepseek_v32",
    "deepseekv4": "deepseek_v4",
    "glm": "glm45",
    "gpt-oss": "openai",
    "llama3": "llama3_json",
    "minimax-m2": "minimax_m2",
    "minimax-m3": "minimax_m3",
    "qwen": "hermes",
    "qwen25": "hermes",
}

REASONING_ALIASES: dict[str, str] = {
    "deepseek-r1": "deepseek_r1",
    "deepseek-v3": "deepseek_v3",
    "deepseek-v4": "deepseek_v4",
    "gpt-oss": "openai_gptoss",
    "minimax": "minimax_m2",
    "minimax-append-think": "minimax_m2_append_think",
    "minimax-m3": "minimax_m3",
    "nemotron_3": "nemotron_v3",
    "qwen3-thinking": "deepseek_r1",  # always thinks: vLLM reads Qwen3 *-Thinking with deepseek_r1
}
