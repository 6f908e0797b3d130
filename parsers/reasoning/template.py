"""`hf` and `beam`: the thinking syntax read from the model's own files, not hard-coded.

vLLM 0.33 reads these names from the checkpoint's `response_template` metadata (a dict in the
tokenizer config: `fields.thinking` with `open`/`close` literals). Sources here, in order: that
dict's thinking literals; a `response_template` / `response_schema` string and then the chat
template, searched for the first known marker pair. The template decides whether thinking is
opened in the prompt (a start marker after `add_generation_prompt`, or a thinking field with no
`open`) and whether `enable_thinking` switches it. With no known pair, or no tokenizer (the name
still resolves, as vLLM's does before a tokenizer is loaded), `<think>` tags that the model must
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
            response.append(value if isinstance(value, str) else json.dumps(value, ensure_ascii=False))
    chat = getattr(tokenizer, "chat_template", None) or init.get("chat_template") or ""
    if isinstance(chat, dict):
        chat = "\n".join(str(v) for v in chat.values())
    elif isinstance(chat, list):
        chat = "\n".join(str(t.get("template", "")) for t in chat if isinstance(t, dict))
    return "\n".join(response), str(chat)


def _literals(field: dict[str, Any], key: str) -> tuple[str, ...] | None:
    """A response_template field's `open`/`close` literals (a string or a list); None when the
    anchor is missing or a pattern."""
    raw = field.get(key)
    if isinstance(raw, str) and raw:
        return (raw,)
    if isinstance(raw, list) and raw and all(isinstance(x, str) and x for x in raw):
        return tuple(dict.fromkeys(raw))
    return None


def thinking_field(tokenizer: Any) -> dict[str, Any] | None:
    """`fields.thinking` of the tokenizer's `response_template` dict, if it has one."""
    init = getattr(tokenizer, "init_kwargs", None) or {}
    template = getattr(tokenizer, "response_template", None) or init.get("response_template")
    fields = template.get("fields") if isinstance(template, dict) else None
    thinking = fields.get("thinking") if isinstance(fields, dict) else None
    return thinking if isinstance(thinking, dict) else None


def format_from_tokenizer(name: str, tokenizer: Any) -> ReasoningFormat:
    response, chat = template_sources(tokenizer) if tokenizer is not None else ("", "")
    start, end = KNOWN_PAIRS[-1][:1], KNOWN_PAIRS[-1][1:]
    for pair in KNOWN_PAIRS:
        if any(pair[0] in src and pair[1] in src for src in (response, chat)):
            start, end = pair[:1], pair[1:]
            break
    gen = chat.rsplit("add_generation_prompt", 1)[-1] if "add_generation_prompt" in chat else ""
    field = thinking_field(tokenizer) if tokenizer is not None else None
    closes = _literals(field, "close") if field is not None else None
    if closes is not None:
        opens = _literals(field, "open")
        start, end = opens or (), closes
        # no opener: thinking is the implicit region the output starts in
        prefilled = not opens or gen.rfind(start[0]) > max(gen.rfind(e) for e in end)
    else:
        prefilled = gen.rfind(start[0]) > gen.rfind(end[0])  # opened, not opened-and-closed
    switch = kwarg_switch("enable_thinking") if "enable_thinking" in chat else None
    return ReasoningFormat(name=name, start=start, end=end, prefilled=prefilled,
                           switch=switch, content_drop=end,
                           description=f"from the model's files: {'/'.join(start)}..{end[0]}")


register_reasoning_parser("hf")(lambda tokenizer: format_from_tokenizer("hf", tokenizer))
register_reasoning_parser("beam")(lambda tokenizer: format_from_tokenizer("beam", tokenizer))
