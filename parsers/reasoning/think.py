"""The `<think>`…`</think>` family: one spec, different data per model.

`prefilled` formats have their chat template open `<think>` in the prompt, so output starts in
reasoning and a `<think>` the model writes anyway is dropped. Output with no `</think>` (truncated)
stays reasoning. A stray `</think>` in content is dropped.
"""

from __future__ import annotations

from typing import Any

from thinkgate.parsers.reasoning_format import (
    ReasoningFormat,
    all_switches,
    any_kwarg_switch,
    effort_switch,
    kwarg_switch,
)
from thinkgate.parsers.registry import register_reasoning_parser
from thinkgate.parsers.text_filters import EscapedNewlines

QWEN_TURN = ("<|im_start|>",)


def think(name: str, **kw: Any) -> ReasoningFormat:
    kw.setdefault("content_drop", kw.get("end", ("</think>",)))
    fmt = ReasoningFormat(name=name, **kw)
    register_reasoning_parser(name)(fmt)
    return fmt


think("deepseek_r1", whitespace="keep", opening_ws_drop=True, content_drop=(), description="DeepSeek-R1 / QwQ / distills: thinking always on")
think("step5", whitespace="keep", opening_ws_drop=True, content_drop=(), description="Step-5: alias of deepseek_r1")
think("deepseek_v3", whitespace="keep", switch=kwarg_switch("thinking", "enable_thinking", default=False),
      description="DeepSeek-V3.1/3.2: thinking off unless `thinking`/`enable_thinking`")
think("holo2", whitespace="keep", opening_ws_drop=True, content_drop=(), switch=kwarg_switch("thinking", "enable_thinking", default=True),
      description="Holo2: deepseek_v3 with thinking on by default")
think("qwen3", engine="qwen3", whitespace="keep", switch=kwarg_switch("enable_thinking"), implicit_end=("<tool_call>",),
      turn_markers=QWEN_TURN, description="Qwen3 / Qwen3.5: `enable_thinking` (default on)")
think("step3p5", whitespace="trail", implicit_end=("<tool_call>",), turn_markers=QWEN_TURN,
      description="Step-3.5: template prefills `<think>`; always thinks")
think("mimo", engine="qwen3", whitespace="keep", switch=kwarg_switch("enable_thinking"), implicit_end=("<tool_call>",),
      description="Xiaomi MiMo")
think("nemotron_v3", engine="qwen3", whitespace="trail", switch=kwarg_switch("enable_thinking"), implicit_end=("<tool_call>",),
      force_content_kwarg="force_nonempty_content", description="NVIDIA Nemotron v3")
think("granite_thinking_parser", whitespace="trail", after_end_strip="\n",
      switch=kwarg_switch("enable_thinking"),
      implicit_end=("<tool_call>",), force_content_kwarg="force_nonempty_content",
      description="Granite with `<think>` tags")
think("kimi_k2", whitespace="trail", switch=any_kwarg_switch("thinking", "enable_thinking"),
      implicit_end=("<|tool_calls_section_begin|>",),
      description="Kimi K2 / K2.5: tool section ends thinking and is kept")
for _glm in ("glm45", "glm47"):
    think(_glm, whitespace="trail", switch=kwarg_switch("enable_thinking", "thinking"), reopen=True,
          implicit_end=("<tool_call>",), turn_markers=("<|assistant|>", "<|user|>"),
          description="GLM-4.5/4.6/4.7/5")
think("ling3", whitespace="trail", switch=kwarg_switch("enable_thinking", "thinking"), reopen=True,
      implicit_end=("<tool_call>",),
      description="Ling 3: GLM grammar")
think("minimax_m2", whitespace="trail", implicit_end=("<minimax:tool_call>",),
      description="MiniMax-M2: `<think>` is in the prompt, output closes it")
think("minimax_m2_append_think", start=(), end=("</think>",), prefilled=False,
      switch=lambda ckw: False, content_prefix="<think>", content_drop=(),
      description="MiniMax-M2: prepend `<think>`, everything is content")
# MiniMax-M3: the template opens `<mm:think>` when thinking_mode is "enabled"; a `</mm:think>` the
# answer starts with is dropped, one later on is text (as in vLLM)
think("minimax_m3", whitespace="keep", start=("<mm:think>",), end=("</mm:think>",), prefilled=False,
      prefill_switch=lambda ckw: ckw.get("thinking_mode") == "enabled", content_drop=(),
      leading_drop=("</mm:think>",), opening_ws_content=True,
      description="MiniMax-M3: explicit `<mm:think>`; a plain answer is content")
# vLLM keeps the text as written and unwraps `<response>..</response>`, dropping the newline
# (or two) between `</think>` and the wrapper and the one after it.
think("ernie45", whitespace="keep", opening_ws_drop=True,
      content_drop=("\n\n<response>", "\n<response>", "<response>", "</response>\n", "</response>"),
      description="ERNIE-4.5: answer may be wrapped in `<response>`")
think("olmo3", whitespace="keep", description="OLMo 3")
think("step3", start=(), whitespace="keep", content_drop=(), description="Step-3: only `</think>` in the output")
# DeepSeek-V4: on when `thinking` or `enable_thinking` is true or neither is given, and off
# for a reasoning_effort of "none" (vLLM's engine parser)
_DSV4_SWITCH = all_switches(any_kwarg_switch("thinking", "enable_thinking"), effort_switch())
# vLLM's engine parsers for these open thinking again at a later start marker (`a</think>b<think>c`)
think("deepseek_v4", whitespace="trail", switch=_DSV4_SWITCH, reopen=True,
      implicit_end=("<｜DSML｜tool_calls>",), description="DeepSeek-V4")
think("deepseek_v41", whitespace="trail", switch=_DSV4_SWITCH, reopen=True,
      implicit_end=("<｜DSML｜ calls>",), description="DeepSeek-V4.1")
# MiniCPM-V: its reserved marker tokens, `<|im_end|>` and a stray `</think>` (thinking off too)
# never reach the client (vLLM drops them)
_MINICPMV_DROP = ("</think>", "<|im_end|>",
                  *(f"<{p}reserved_{i}{p}>" for i in range(12, 16) for p in ("", "|")))
think("minicpmv", whitespace="keep", switch=kwarg_switch("enable_thinking"), drop=_MINICPMV_DROP,
      text_filter=EscapedNewlines, description="MiniCPM-V")
think("seed_oss", whitespace="keep", start=("<seed:think>",), end=("</seed:think>",),
      switch=kwarg_switch("enable_thinking"), implicit_end=("<seed:tool_call>",),
      description="ByteDance Seed-OSS")
# PLaMo's end-of-turn tag `<|plamo:tag|>` ends thinking too, and is dropped wherever it is (with
# thinking off as well), as vLLM's engine grammar for PLaMo 3 reads it
think("plamo3", start=("<|plamo:begin_think:plamo|>",),
      end=("<|plamo:end_think:plamo|>", "<|plamo:tag|>"),
      switch=kwarg_switch("enable_thinking"), reopen=True, whitespace="keep",
      content_drop=("<|plamo:end_think:plamo|>", "<|plamo:tag|>"), drop=("<|plamo:tag|>",),
      partial_marker_drop=len("<|plamo:") + 2,
      implicit_end=("<|plamo:begin_tool_requests:plamo|>",), description="PLaMo 3")
think("poolside_v1", whitespace="keep", switch=kwarg_switch("thinking", "enable_thinking", default=False),
      content_drop=(),
      description="Poolside: deepseek_v3 with thinking off unless `thinking`/`enable_thinking`")
