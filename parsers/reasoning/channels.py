"""Channel formats: a message header names the channel; analysis/`to=self` is reasoning.

Harmony (gpt-oss) read from text: `<|channel|>analysis<|message|>..<|end|>` is reasoning,
`<|start|>assistant<|channel|>final<|message|>..<|return|>` content. Headers are dropped;
`commentary to=functions.X` headers are left for the `openai` tool format.
"""

from __future__ import annotations

from thinkgate.parsers.reasoning_format import ReasoningFormat
from thinkgate.parsers.registry import register_reasoning_parser

_HARMONY_DROP = (
    "<|start|>assistant", "<|channel|>final<|message|>", "<|channel|>commentary<|message|>",
    "<|end|>", "<|return|>", "<|call|>",
)

register_reasoning_parser("openai_gptoss")(ReasoningFormat(
    name="openai_gptoss", start=("<|channel|>analysis<|message|>",), end=("<|end|>",),
    prefilled=False, content_drop=_HARMONY_DROP,
    description="gpt-oss Harmony: analysis channel is reasoning, final channel content"))

_MUSE_DROP = ("<|start|>assistant<|message|>", "<|start|>assistant", "<|message|>",
              "<|eom|>", "<|end|>", "<|return|>")
for _name in ("muse", "musespark1x", "muse_glimmer"):
    register_reasoning_parser(_name)(ReasoningFormat(
        name=_name, start=("<|start|>assistant to=self<|message|>", "to=self<|message|>"),
        end=("<|eom|>",), prefilled=False, content_drop=_MUSE_DROP,
        description="Muse Spark: harmony-like; a message `to=self` is reasoning"))
