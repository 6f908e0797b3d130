"""`parser_diff_vllm`'s generated outputs: a seeded model output per format and seed.

`generate(tool, reasoning, seed)` writes what the model would: reasoning before the calls (for
half the outputs of a format with a thinking switch, `chat_template_kwargs` that flip its
default), 0-3 calls in the format's canonical syntax (`tools.grammar.render_calls`) with unicode,
escapes, nested and typed arguments and long strings, text around them, the answer in the
format's wrapper, and some cut off mid-output or with a character dropped. `TOOLS` is the tool
list both parsers read them with.
"""

from __future__ import annotations

import random
from typing import Any

from thinkgate.benchmarks.parser_diff_formats import (
    ANSWER_WRAP,
    CALL_FRAME,
    CALLS_ONLY,
    ENDS_AT_CALL,
    FIXED_WS,
    HARMONY,
    MAX_CALLS,
    PROMPT_PREFIX,
    TEXT_FRAME,
    harmony_text,
    thinking_kwargs,
)
from thinkgate.parsers import get_parser

TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                                         "detail": {"type": "object"}}}}},
    {"type": "function", "function": {"name": "ping", "parameters": {
        "type": "object", "properties": {}}}},
    {"type": "function", "function": {"name": "write", "parameters": {
        "type": "object", "properties": {"text": {"type": "string"}}}}},
]
SKIP = {"hf", "beam"}  # read their syntax from a model's template: no text-only run
WORDS = ["Paris", "Oslo", "東京", "naïve", "emoji 🙂", 'a "quote"', "back\\slash", "tab\there",
         "line\nbreak", "x < y", "{braces}", "[list]"]


def random_calls(rng: random.Random, max_calls: int = 3) -> list[tuple[str, dict[str, Any]]]:
    calls: list[tuple[str, dict[str, Any]]] = []
    for _ in range(min(max_calls, rng.choice([0, 1, 1, 1, 2, 3]))):
        kind = rng.choice(["get_weather", "ping", "write"])
        if kind == "get_weather":
            args: dict[str, Any] = {"city": rng.choice(WORDS)}
            if rng.random() < 0.6:
                args["days"] = rng.randint(1, 14)
            if rng.random() < 0.4:
                args["detail"] = {"hourly": rng.random() < 0.5, "list": [1, 2.5, None],
                                  "deep": {"a": rng.choice(WORDS)}}
        elif kind == "ping":
            args = {}
        else:
            args = {"text": " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 60)))}
        calls.append((kind, args))
    return calls


def generate(tool: str | None, reasoning: str | None, seed: int) -> tuple[str, dict]:
    """One output and the chat_template_kwargs it is read with."""
    from thinkgate.parsers.tools.grammar import render_calls

    rng = random.Random(f"{tool}/{reasoning}/{seed}")
    parts: list[str] = []
    p = get_parser(tool_parser=tool, reasoning_parser=reasoning)
    name = tool or reasoning or ""
    after_start, after_end = FIXED_WS.get(name, ("", None))
    thought = None
    ckw = thinking_kwargs(p.reasoning, f"ckw/{name}/{seed}")
    if p.reasoning is not None and p.reasoning.thinking_enabled(ckw):
        r = p.reasoning
        thought = "Let me think about " + rng.choice(WORDS) + "."
        if name not in HARMONY and r.start and (not r.prefilled or rng.random() < 0.3):
            parts.append(r.start[0] + after_start)
        parts.append(thought + "\n")
        if r.end and rng.random() < 0.9 and name not in HARMONY:
            parts.append(r.end[0] + (after_end if after_end is not None
                                     else rng.choice(["", "\n", "\n\n"])))
    (bo, bc), (ao, ac) = TEXT_FRAME.get(tool or "", (("", ""), ("", "")))
    calls = random_calls(rng, MAX_CALLS.get(name, 3)) if tool is not None else []
    alone = bool(calls) and tool in CALLS_ONLY
    before = after = ""
    if rng.random() < 0.5 and not alone:
        before = bo + rng.choice(["I'll check. ", "Sure.\n", "Here: ", "Okay"]) + bc
    calls_text = ""
    if calls:
        co, cc = CALL_FRAME.get(name, ("", ""))
        calls_text = co.replace("{name}", calls[0][0]) + render_calls(tool, calls) + cc
    if rng.random() < 0.3 and not alone and not (calls and tool in ENDS_AT_CALL):
        after = ao + rng.choice(["\nDone.", " That is all.", "\n"]) + ac
    if name in HARMONY:  # a call ends a Harmony turn: text after it is never written
        text = harmony_text(tool, reasoning, thought, before + ("" if calls else after),
                            calls_text)
    else:
        answer = [before, calls_text, after]
        wrap = ANSWER_WRAP.get(name) if tool is None else None
        if wrap and rng.random() < wrap[2]:
            answer = [wrap[0], *answer, wrap[1]]
        text = "".join(parts + answer)
        prefix = PROMPT_PREFIX.get(tool or "", "")
        if prefix and text.startswith(prefix):
            text = text[len(prefix):]
    roll = rng.random()
    if roll < 0.12 and len(text) > 4:  # cut off mid-output (max_tokens)
        text = text[: rng.randint(len(text) // 2, len(text) - 1)]
    elif roll < 0.2 and calls and len(text) > 4:  # one character dropped (a malformed call)
        i = rng.randrange(len(text))
        text = text[:i] + text[i + 1:]
    return text, ckw
