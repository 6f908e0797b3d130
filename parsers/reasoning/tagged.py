"""Families whose output starts as content and an explicit marker opens thinking.

Each is data: its own markers, what wraps the answer, what ends thinking implicitly.
"""

from __future__ import annotations

from thinkgate.parsers.markers import tag_marker
from thinkgate.parsers.reasoning_format import (
    ReasoningFormat,
    effort_given_switch,
    effort_switch,
    kwarg_switch,
)
from thinkgate.parsers.registry import register_reasoning_parser
from thinkgate.parsers.text_filters import CohereCitations


def tagged(name: str, start: tuple[str, ...], end: tuple[str, ...], **kw: object) -> None:
    kw.setdefault("content_drop", end)
    register_reasoning_parser(name)(
        ReasoningFormat(name=name, start=start, end=end, prefilled=False, **kw))


# vLLM reads the template's exact layout, `<think>\n..\n</think>\n<answer>\n..\n</answer>`: one
# newline beside each tag belongs to the tag, every other character is kept. (The bare tags come
# first: they are the canonical spellings the engine takes token ids from.)
tagged("hunyuan_a13b", ("<think>", "<think>\n"), ("</think>", "\n</think>\n", "\n</think>"),
       content_drop=("\n</think>\n", "</think>", "<answer>\n", "<answer>", "\n</answer>",
                     "</answer>"), whitespace="keep",
       description="Hunyuan-A13B: `<think>..</think>` then `<answer>..</answer>`")
# Tags may carry a `:suffix` (`<think:high>`), matched as pattern markers.
_HY_TAGS = (tag_marker("think"), tag_marker("think", closing=True))
# Hunyuan 3 thinks only when a `reasoning_effort` (other than no_think) is given; the template
# then opens `<think>` in the prompt, and vLLM splits the text as written.
register_reasoning_parser("hy_v3")(ReasoningFormat(
    name="hy_v3", start=("<think>",), end=("</think>",), prefilled=True, reopen=True,
    patterns=_HY_TAGS, pattern_roles=("start", "end"), switch=effort_given_switch(),
    implicit_end=("<tool_calls>",), whitespace="keep", content_drop=("</think>",),
    description="Hunyuan 3: `<think>` tags (optional `:type` suffixes), on with reasoning_effort"))
# Hunyuan 4's template opens `<think>` in the prompt unless reasoning_effort is `no_think`.
register_reasoning_parser("hy_v4")(ReasoningFormat(
    name="hy_v4", start=("<think>",), end=("</think>",), prefilled=True, reopen=True,
    whitespace="keep", patterns=_HY_TAGS, pattern_roles=("start", "end"), opening_ws_drop=True,
    switch=effort_switch(("no_think",)), implicit_end=("<tool_calls>",),
    content_drop=("</think>",),
    description="Hunyuan 4: `<think>` tags with optional `:type` suffixes"))
tagged("granite", ("Here's my thought process:", "Here is my thought process:"),
       ("Here's my response:", "Here is my response:"), whitespace="keep",
       content_drop=(),  # a response phrase outside thinking is text (as vLLM reads it)
       description="Granite 3.2: phrase markers, not tokens")
tagged("gemma4", ("<|channel>",), ("<channel|>",), reasoning_head=("thought",), whitespace="trail",
       implicit_end=("<|tool_call>",), opening_ws_content=True,
       description="Gemma 4: `<|channel>thought\\n..<channel|>`; `thought` is dropped")
tagged("mistral", ("[THINK]", "<think>"), ("[/THINK]", "</think>"), whitespace="trail",
       implicit_end=("[TOOL_CALLS]",), opening_ws_content=True,
       description="Mistral/Magistral: `[THINK]` special tokens (v13+) or `<think>` text (v11)")
# vLLM runs Cohere's own filter (cohere_melody): see whitespace "rstrip"; citation tags are
# dropped (`<co>..</co: 0:[1]>`, CohereCitations). Command 4 starts in
# thinking and also unwraps `<|START_TEXT|>`; Command 3 starts as the answer.
_COHERE_ANSWER = ("<|START_RESPONSE|>", "<|END_RESPONSE|>")
tagged("cohere_command3", ("<|START_THINKING|>",), ("<|END_THINKING|>",), whitespace="rstrip",
       content_drop=("<|END_THINKING|>", *_COHERE_ANSWER), text_filter=CohereCitations,
       implicit_end=("<|START_ACTION|>", "<|START_RESPONSE|>"),
       description="Cohere Command A/R: answer inside `<|START_RESPONSE|>`")
register_reasoning_parser("cohere_command4")(ReasoningFormat(
    name="cohere_command4", start=("<|START_THINKING|>",), end=("<|END_THINKING|>",),
    prefilled=True, reopen=True, whitespace="rstrip",
    implicit_end=("<|START_ACTION|>", "<|START_RESPONSE|>", "<|START_TEXT|>"),
    content_drop=("<|END_THINKING|>", *_COHERE_ANSWER, "<|START_TEXT|>", "<|END_TEXT|>"),
    text_filter=CohereCitations,
    description="Cohere Command A Reasoning: thinking first; answer inside `<|START_TEXT|>`"))
# Kimi K3's template ends the prompt with `<|open|>think<|sep|>` unless thinking is off
register_reasoning_parser("kimi_k3")(ReasoningFormat(
    name="kimi_k3", start=("<|open|>think<|sep|>",), end=("<|close|>think<|sep|>",),
    prefilled=True, reopen=True, switch=kwarg_switch("thinking", "enable_thinking"),
    drop=("<|open|>response<|sep|>", "<|close|>response<|sep|>"),  # thinking off too
    implicit_end=("<|open|>tools<|sep|>",), whitespace="keep", opening_ws_drop=True,
    description="Kimi K3: XTML `think` and `response` elements"))
tagged("inkling", ("<|content_thinking|>",), ("<|end_message|>", "<|content_model_end_sampling|>"),
       content_drop=("<|end_message|>", "<|message_model|>", "<|content_text|>",
                     "<|content_model_end_sampling|>", "<|content_invoke_tool_text|>",
                     "<|content_tool_error|>"), whitespace="trail",
       implicit_end=("<|content_invoke_tool_json|>", "<|content_invoke_tool_text|>"),
       description="Inkling: `<|content_thinking|>` part of a model message")

_K2H = ("", "_fast", "_faster")
register_reasoning_parser("k2_horizon")(ReasoningFormat(
    name="k2_horizon", start=tuple(f"<ifm|think{s}>" for s in _K2H),
    end=tuple(f"</ifm|think{s}>" for s in _K2H),
    content_drop=(), whitespace="keep",
    switch=kwarg_switch("enable_thinking", default=True), implicit_end=("<ifm|tool_calls>",),
    description="K2-Horizon: `<ifm|think>` (or `_fast`/`_faster` by reasoning_effort)"))
