"""Reasoning formats, one small data file per family; names resolve lazily through this table."""

from __future__ import annotations

_THINK = "thinkgate.parsers.reasoning.think"
_TAGGED = "thinkgate.parsers.reasoning.tagged"
_CHANNELS = "thinkgate.parsers.reasoning.channels"
_TEMPLATE = "thinkgate.parsers.reasoning.template"

REASONING_MODULES: dict[str, str] = {
    **dict.fromkeys((
        "deepseek_r1", "step5", "deepseek_v3", "holo2", "qwen3", "step3p5", "mimo",
        "nemotron_v3", "granite_thinking_parser", "kimi_k2", "glm45", "glm47", "ling3",
        "minimax_m2", "minimax_m2_append_think", "minimax_m3", "ernie45", "olmo3", "step3",
        "deepseek_v4", "deepseek_v41", "minicpmv", "seed_oss", "plamo3", "poolside_v1",
    ), _THINK),
    **dict.fromkeys((
        "hunyuan_a13b", "hy_v3", "hy_v4", "granite", "gemma4", "mistral", "cohere_command3",
        "cohere_command4", "kimi_k3", "k2_horizon", "inkling",
    ), _TAGGED),
    **dict.fromkeys(("openai_gptoss", "muse", "musespark1x", "muse_glimmer"), _CHANNELS),
    **dict.fromkeys(("hf", "beam"), _TEMPLATE),
}
