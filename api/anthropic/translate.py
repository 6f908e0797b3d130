"""An Anthropic Messages request as the chat layer's arguments (vLLM's mapping).

    system (string or text blocks) + role "system" messages → one system message, joined
    user text blocks → a user message; tool_result blocks → tool messages (before the user text)
    assistant text / thinking / tool_use blocks → content / reasoning / tool_calls
    tools[].input_schema → function tools; tool_choice auto / any / tool / none →
    "auto" / "required" / the named function / "none" (tools without tool_choice: "auto");
    disable_parallel_tool_use → parallel_tool_calls=False
    thinking enabled (budget_tokens) / disabled → the template's thinking switch on / off and
    the thinking-token budget; adaptive / between_tools → the template's default
    output_config.format → response_format json_schema; output_config.effort → reasoning_effort

A block this text-only server cannot use (image, document, server tools) is a ValueError naming
its position, which the route answers as a 400.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from thinkgate.api.anthropic.protocol import ContentBlock, CountTokensRequest, InputMessage

# The template kwargs that switch thinking on or off (Qwen3-style and DeepSeek-style templates).
THINKING_KWARGS = ("enable_thinking", "thinking")


@dataclass
class ChatArgs:
    """What `ChatLayer.prepare` takes, from one Anthropic request."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None
    parallel_tool_calls: bool = True
    response_format: dict[str, Any] | None = None
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    reasoning_effort: str | None = None
    thinking_token_budget: int | None = None

    def prepare_kwargs(self) -> dict[str, Any]:
        return {"tools": self.tools, "tool_choice": self.tool_choice,
                "parallel_tool_calls": self.parallel_tool_calls,
                "response_format": self.response_format,
                "chat_template_kwargs": self.chat_template_kwargs,
                "reasoning_effort": self.reasoning_effort,
                "thinking_token_budget": self.thinking_token_budget}


def chat_args(req: CountTokensRequest) -> ChatArgs:
    """The chat layer's arguments for `req`; ValueError naming a block it cannot take."""
    args = ChatArgs(messages=chat_messages(req))
    if req.tools:
        args.tools = [_function_tool(t.model_dump(exclude_none=True)) for t in req.tools]
    args.tool_choice, args.parallel_tool_calls = _tool_choice(req)
    thinking = req.thinking
    if thinking is not None and thinking.type in ("enabled", "disabled"):
        on = thinking.type == "enabled"
        args.chat_template_kwargs = dict.fromkeys(THINKING_KWARGS, on)
        args.thinking_token_budget = thinking.budget_tokens if on else None
    args.chat_template_kwargs.update(req.chat_template_kwargs or {})
    config = req.output_config
    if config is not None:
        args.reasoning_effort = config.effort
        if config.format is not None:
            args.response_format = {"type": "json_schema", "json_schema": {
                "name": "output", "schema": config.format.schema_}}
    return args


def chat_messages(req: CountTokensRequest) -> list[dict[str, Any]]:
    system = _system_text(req)
    out: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for i, message in enumerate(req.messages):
        if message.role == "user":
            out += _user_messages(i, message)
        elif message.role == "assistant":
            out.append(_assistant_message(i, message))
    return out


def _system_text(req: CountTokensRequest) -> str:
    parts: list[str] = []
    sources: list[tuple[str, Any]] = [("system", req.system)]
    sources += [(f"messages[{i}].content", m.content) for i, m in enumerate(req.messages)
                if m.role == "system"]
    for where, content in sources:
        if isinstance(content, str):
            parts.append(content)
        elif content:
            parts += [_text_of(f"{where}[{j}]", b) for j, b in enumerate(content)]
    return "".join(parts)


def _blocks(message: InputMessage) -> list[ContentBlock]:
    if isinstance(message.content, str):
        return [ContentBlock(type="text", text=message.content)]
    return message.content


def _user_messages(i: int, message: InputMessage) -> list[dict[str, Any]]:
    tool_messages: list[dict[str, Any]] = []
    texts: list[str] = []
    blocks = _blocks(message)
    if not blocks:
        raise ValueError(f"messages[{i}].content must not be an empty list")
    for j, block in enumerate(blocks):
        where = f"messages[{i}].content[{j}]"
        if block.type == "tool_result":
            if not block.tool_use_id:
                raise ValueError(f"{where}: a tool_result block needs `tool_use_id`")
            tool_messages.append({"role": "tool", "tool_call_id": block.tool_use_id,
                                  "content": _tool_result_text(where, block.content)})
        else:
            texts.append(_text_of(where, block))
    text = "".join(texts)
    if text or not tool_messages:
        return [*tool_messages, {"role": "user", "content": text}]
    return tool_messages


def _assistant_message(i: int, message: InputMessage) -> dict[str, Any]:
    texts: list[str] = []
    reasoning: list[str] = []
    calls: list[dict[str, Any]] = []
    for j, block in enumerate(_blocks(message)):
        where = f"messages[{i}].content[{j}]"
        if block.type == "thinking":
            reasoning.append(block.thinking or "")
        elif block.type == "redacted_thinking":
            continue  # opaque data from another server: nothing a template can show
        elif block.type == "tool_use":
            if not block.id or not block.name:
                raise ValueError(f"{where}: a tool_use block needs `id` and `name`")
            calls.append({"id": block.id, "type": "function", "function": {
                "name": block.name, "arguments": json.dumps(block.input or {})}})
        else:
            texts.append(_text_of(where, block))
    out: dict[str, Any] = {"role": "assistant", "content": "".join(texts)}
    if reasoning:
        out["reasoning"] = "".join(reasoning)
    if calls:
        out["tool_calls"] = calls
    return out


def _text_of(where: str, block: ContentBlock) -> str:
    if block.type != "text":
        raise ValueError(f"{where}: content blocks of type {block.type!r} are not supported "
                         "here (text, thinking, tool_use and tool_result are)")
    if block.text is None:
        raise ValueError(f"{where}: a text block needs `text`")
    return block.text


def _tool_result_text(where: str, content: str | list[dict[str, Any]] | None) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    parts = []
    for k, item in enumerate(content):
        parts.append(_text_of(f"{where}.content[{k}]", ContentBlock.model_validate(item)))
    return "\n".join(parts)


def _function_tool(tool: dict[str, Any]) -> dict[str, Any]:
    # OpenAI's key order (name, description, parameters): templates print tools as JSON
    fn: dict[str, Any] = {"name": tool["name"]}
    if "description" in tool:
        fn["description"] = tool["description"]
    schema = tool["input_schema"]
    fn["parameters"] = schema if "type" in schema else {"type": "object", **schema}
    if "strict" in tool:
        fn["strict"] = tool["strict"]
    return {"type": "function", "function": fn}


def _tool_choice(req: CountTokensRequest) -> tuple[Any, bool]:
    choice = req.tool_choice
    if choice is None:
        return ("auto" if req.tools else None), True
    if choice.type in ("any", "tool") and not req.tools:
        raise ValueError(f"tool_choice of type {choice.type!r} needs `tools`")
    parallel = not choice.disable_parallel_tool_use
    if choice.type == "tool":
        return {"type": "function", "function": {"name": choice.name}}, parallel
    return {"auto": "auto", "any": "required", "none": "none"}[choice.type], parallel
