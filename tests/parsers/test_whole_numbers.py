"""A whole float written for a `number` property (`5.0`): vLLM 0.33's engine parsers write it as
an integer (`5`), its other parsers keep `5.0`. Each format's call is written by our renderer;
the expected value for each name was read from vLLM 0.33's own parser on the same output
(`parser_diff_vllm.vllm_parse`), parsed and streamed one character at a time."""

from __future__ import annotations

import json

import pytest
from thinkgate.parsers import get_parser
from thinkgate.parsers.tools.grammar import render_calls

TOOLS = [{"type": "function", "function": {"name": "configure", "parameters": {
    "type": "object", "properties": {"ratio": {"type": "number"}}}}}]
ENGINE = ("deepseek_v32", "deepseek_v4", "deepseek_v41", "dots", "glm45", "glm47", "granite",
          "inkling", "k2_horizon", "kimi_k2", "ling3", "mimo", "minimax_m2", "minimax_m3",
          "mistral", "plamo3", "qwen3_coder", "qwen3_xml", "seed_oss", "step3p5", "step5")
KEEPS = ("hermes", "hy_v3", "hy_v4", "step3", "kimi_k3", "poolside_v1", "llama3_json", "xlam")


def _args(name: str, text: str, streamed: bool) -> object:
    p = get_parser(tool_parser=name)
    if not streamed:
        return json.loads(p.parse(text, tools=TOOLS).tool_calls[0].arguments)["ratio"]
    s = p.stream(tools=TOOLS)
    deltas = [d for ch in text for d in s.feed(ch)] + s.finish()
    args = "".join(tc["function"].get("arguments") or ""
                   for d in deltas for tc in d.get("tool_calls", []))
    return json.loads(args)["ratio"]


@pytest.mark.parametrize("streamed", [False, True])
@pytest.mark.parametrize("name", ENGINE + KEEPS)
def test_whole_float_of_a_number_property(name: str, streamed: bool) -> None:
    text = render_calls(name, [("configure", {"ratio": 5.0})])
    assert "5.0" in text
    value = _args(name, text, streamed)
    if name in ENGINE:
        assert value == 5 and type(value) is int
    else:
        assert value == 5.0 and type(value) is float
