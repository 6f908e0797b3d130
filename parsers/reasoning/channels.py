"""Channel formats: a message header names the channel; analysis/`to=self` is reasoning.

Harmony (gpt-oss) read from text: `<|channel|>analysis<|message|>..<|end|>` is reasoning,
`<|start|>assistant<|channel|>final<|message|>..<|return|>` content. Headers are dropped;
`commentary to=functions.X` headers are left for the `openai` tool format.
"""

from __future__ import annotations

from thinkgate.parsers.markers import lit, seq_marker
from thinkgate.parsers.reasoning_format import ReasoningFormat
from thinkgate.parsers.registry import register_reasoning_parser

_HARMONY_DROP = (
    "<|start|>assistant", "<|channel|>final<|message|>", "<|channel|>commentary<|message|>",
    "<|end|>", "<|return|>", "<|call|>",
    "<|channel|>final <|constrain|>json<|message|>",  # an answer under a JSON constraint
)

register_reasoning_parser("openai_gptoss")(ReasoningFormat(
    name="openai_gptoss", start=("<|channel|>analysis<|message|>",), end=("<|end|>",),
    prefilled=False, content_drop=_HARMONY_DROP, whitespace="keep",
    partial_marker_drop=3,  # a header cut off at the end (`<|channel|>fin`) is not text
    description="gpt-oss Harmony: analysis channel is reasoning, final channel content"))

_ST = ("", "<|start|>assistant ", "<|start|>assistant")
_MSG = "<|message|>"
_NAME = (r"[A-Za-z0-9_.\-]+", r"[A-Za-z0-9_.\-]*", "")


def _headers(*recipients: str) -> tuple[str, ...]:
    return tuple(f"{st}to={r}{_MSG}" for r in recipients for st in _ST)


# A tool's channel (`to=weather.get`): ends reasoning; its `<atem:function_calls>` are calls.
_TOOL_CHANNEL = tuple(
    seq_marker("to=TOOL<|message|>", (*pieces, lit("to="), _NAME, lit(_MSG)), 96)
    for pieces in ((), (lit("<|start|>assistant"), (r"[^\S\n]*", r"[^\S\n]*", ""))))
_MUSE_ENDS = ("<|eom|>", "<|eot|>", "<|end|>", "<|return|>", *_headers("user", "commentary"))


def _muse(name: str, bare_is_reasoning: bool) -> ReasoningFormat:
    bare = ("<|start|>assistant<|message|>", _MSG)
    return ReasoningFormat(
        name=name, start=(*_headers("self"), *(bare if bare_is_reasoning else ())),
        end=_MUSE_ENDS, content_drop=_MUSE_ENDS + (() if bare_is_reasoning else bare),
        # text between messages (after `<|eom|>`/`<|eot|>`, before the next header) is framing,
        # dropped as vLLM's Muse parsers drop it
        discard=(*_headers("developer"), "<|eom|>", "<|eot|>"), prefilled=False, reopen=True,
        whitespace="keep",
        # the output's first header after the prompt's `<|start|>assistant`, space included
        leading_drop=(" to=user" + _MSG, " to=commentary" + _MSG),
        partial_marker_drop=3,  # a header cut off at the end (`<|start|>assi`) is not text
        patterns=_TOOL_CHANNEL, pattern_roles=("end",) * len(_TOOL_CHANNEL),
        description="Muse Spark: channel messages; `to=self` (and a bare `<|message|>`) is "
                    "reasoning, `to=user`/`to=commentary` content, `to=developer` dropped, "
                    "`to=TOOL` a tool channel")


register_reasoning_parser("muse")(_muse("muse", True))
register_reasoning_parser("musespark1x")(_muse("musespark1x", True))
# Glimmer: a message with no recipient is the answer, not reasoning
register_reasoning_parser("muse_glimmer")(_muse("muse_glimmer", False))
