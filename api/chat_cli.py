"""`thinkgate chat`: an interactive terminal chat against a running server.

Streams each answer: reasoning dimmed, content plain, tool calls as `→ name(arguments)`. Tool
calls get a canned "(no tool result in chat mode)" reply so the conversation can continue.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

_DIM, _RESET, _CYAN = "\033[2m", "\033[0m", "\033[36m"


def _tools(ns: argparse.Namespace) -> list[dict[str, Any]] | None:
    if ns.no_tools:
        return None
    if ns.tools:
        with open(ns.tools, encoding="utf-8") as f:
            return json.load(f)
    from thinkgate.engine.demo.data import TOOLS

    return list(TOOLS.values())


def _stream_turn(client: Any, model: str, messages: list[dict[str, Any]],
                 ns: argparse.Namespace, tools: list[dict[str, Any]] | None) -> dict[str, Any]:
    """Send the conversation, print the streamed answer, return the assistant message."""
    extra = {"chat_template_kwargs": {"enable_thinking": False}} if ns.no_thinking else {}
    kwargs: dict[str, Any] = {"tools": tools} if tools else {}
    stream = client.chat.completions.create(model=model, messages=messages, stream=True,
                                            max_tokens=ns.max_tokens, extra_body=extra, **kwargs)
    content, reasoning, calls = [], [], {}
    in_reasoning = False
    for chunk in stream:
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        think = getattr(delta, "reasoning", None) or getattr(delta, "reasoning_content", None)
        if think:
            if not in_reasoning:
                print(_DIM + "[thinking] ", end="")
                in_reasoning = True
            print(think, end="", flush=True)
            reasoning.append(think)
        if delta.content:
            if in_reasoning:
                print(_RESET)
                in_reasoning = False
            print(delta.content, end="", flush=True)
            content.append(delta.content)
        for tc in delta.tool_calls or []:
            call = calls.setdefault(tc.index, {"id": tc.id, "type": "function",
                                               "function": {"name": "", "arguments": ""}})
            if tc.function and tc.function.name:
                call["function"]["name"] = tc.function.name
            if tc.function and tc.function.arguments:
                call["function"]["arguments"] += tc.function.arguments
    if in_reasoning:
        print(_RESET, end="")
    for call in calls.values():
        print(f"\n{_CYAN}→ {call['function']['name']}({call['function']['arguments']}){_RESET}",
              end="")
    print()
    message: dict[str, Any] = {"role": "assistant", "content": "".join(content) or None}
    if reasoning:
        message["reasoning"] = "".join(reasoning)
    if calls:
        message["tool_calls"] = list(calls.values())
    return message


def run_chat(ns: argparse.Namespace) -> None:
    from openai import OpenAI

    client = OpenAI(base_url=ns.url, api_key=ns.api_key)
    model = ns.model or client.models.list().data[0].id
    tools = _tools(ns)
    messages: list[dict[str, Any]] = []
    if ns.system:
        messages.append({"role": "system", "content": ns.system})
    print(f"thinkgate chat with {model!r} at {ns.url} (Ctrl-D to quit)")
    while True:
        if ns.quick is not None:
            text = ns.quick
        else:
            try:
                text = input("> ")
            except (EOFError, KeyboardInterrupt):
                print()
                return
        if not text.strip():
            continue
        messages.append({"role": "user", "content": text})
        reply = _stream_turn(client, model, messages, ns, tools)
        messages.append(reply)
        for call in reply.get("tool_calls", []):
            messages.append({"role": "tool", "tool_call_id": call["id"],
                             "content": "(no tool result in chat mode)"})
        if ns.quick is not None:
            sys.stdout.flush()
            return
