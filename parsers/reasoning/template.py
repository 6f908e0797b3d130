"""`hf` and `beam`: the thinking syntax read from the model's own files, not hard-coded.

Sources, in order: a `response_template` / `response_schema` in the tokenizer config, then the
chat template. The first known marker pair found in them is the format; the template decides
whether thinking is opened in the prompt (a start marker after `add_generation_prompt`) and
whether `enable_thinking` switches it. With no known pair, `<think>` tags that the model must
write itself (inert otherwise).
"""

from __future__ import annotations

import json
from typing import Any

from thinkgate.parsers.reasoning_format import ReasoningFormat, kwarg_switch
from thinkgate.parsers.registry import register_reasoning_parser

KNOWN_PAIRS: tuple[tuple[str, str], ...] = (
    ("<seed:think>", "</seed:think>"),
    ("<mm:think>", "</mm:think>"),
    ("<|START_THINKING|>", "<|END_THINKING|>"),
    ("<|plamo:begin_think:plamo|>", "<|plamo:end_think:plamo|>"),
    ("<|channel>", "<channel|>"),
    ("[THINK]", "[/THINK]"),
    ("<|content_thinking|>", "<|end_message|>"),
    ("<think>", "</think>"),
)


def template_sources(tokenizer: Any) -> tuple[str, str]:
    """(response template/schema text, chat template text) of a HF-like tokenizer."""
    init = getattr(tokenizer, "init_kwargs", None) or {}
    response = []
    for key in ("response_template", "response_schema"):
        value = getattr(tokenizer, key, None) or init.get(key)
        if value is not None:
            response.append(value if isinstance(value, str) else json.dumps(value))
    chat = getattr(tokenizer, "chat_template", None) or init.get("chat_template") or ""
    if isinstance(chat, dict):
        chat = "\n".join(str(v) for v in chat.values())
    elif isinstance(chat, list):
        chat = "\n".join(str(t.get("template", "")) for t in chat if isinstance(t, dict))
    return "\n".join(response), str(chat)


def format_from_tokenizer(name: str, tokenizer: Any) -> ReasoningFormat:
    if tokenizer is None:
        raise ValueError(f"reasoning parser {name!r} reads the format from the model's tokenizer "
                         "config and chat template; pass tokenizer=")
    response, chat = template_sources(tokenizer)
    start, end = KNOWN_PAIRS[-1]
    for pair in KNOWN_PAIRS:
        if any(pair[0] in src and pair[1] in src for src in (response, chat)):
            start, end = pair
            break
    gen = chat.rsplit("add_generation_prompt", 1)[-1] if "add_generation_prompt" in chat else ""
    prefilled = gen.rfind(start) > gen.rfind(end)  # opened, not opened-and-closed
    switch = kwarg_switch("enable_thinking") if "enable_thinking" in chat else None
    return ReasoningFormat(name=name, start=(start,), end=(end,), prefilled=prefilled,
                           switch=switch, content_drop=(end,),
                           description=f"from the model's files: {start}..{end}")


register_reasoning_parser("hf")(lambda tokenizer: format_from_tokenizer("hf", tokenizer))
register_reasoning_parser("beam")(lambda tokenizer: format_from_tokenizer("beam", tokenizer))
