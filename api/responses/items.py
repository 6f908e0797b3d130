"""Responses items and settings → what the chat layer takes (messages, tools, tool_choice,
response_format).

Items of one assistant turn (a `reasoning` item, a `message`, its `function_call`s) fold into
one assistant message, so a conversation replayed as items renders as the chat template would
have rendered it. A bad item is a `ValueError` naming it (`input[2].content`); the router turns
it into a 400 with that `param`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

_TEXT_PARTS = ("input_text", "output_text", "text", "summary_text", "reasoning_text")


class ItemError(ValueError):
    """A bad input item or setting; `param` is the request field it is about."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(f"{param}: {message}")
        self.param = param


def input_messages(items: str | Sequence[Mapping[str, Any]], where: str = "input"
                   ) -> list[dict[str, Any]]:
    """Chat messages for a Responses `input` (a string is one user message)."""
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    messages: list[dict[str, Any]] = []
    for i, item in enumerate(items):
        param = f"{where}[{i}]"
        if not isinstance(item, Mapping):
            raise ItemError(f"each item must be an object, got {item!r}", param)
        _add_item(messages, item, param)
    return messages


def _add_item(messages: list[dict[str, Any]], item: Mapping[str, Any], param: str) -> None:
    kind = item.get("type", "message" if "role" in item else None)
    last = messages[-1] if messages and messages[-1]["role"] == "assistant" else None
    if kind == "message":
        role = item.get("role")
        if role not in ("user", "system", "developer", "assistant"):
            raise ItemError(f"role must be user, system, developer or assistant, got {role!r}",
                            f"{param}.role")
        text = _text(item.get("content"), f"{param}.content")
        if role == "assistant" and last is not None and last.get("content") is None:
            last["content"] = text
        else:
            messages.append({"role": role, "content": text})
    elif kind == "reasoning":
        if item.get("encrypted_content"):
            raise ItemError("encrypted reasoning content is not supported",
                            f"{param}.encrypted_content")
        parts = item.get("content") or item.get("summary") or []
        text = _text(parts, f"{param}.content")
        if last is not None and last.get("reasoning") is None and last.get("content") is None \
                and not last.get("tool_calls"):
            last["reasoning"] = text
        else:
            messages.append({"role": "assistant", "content": None, "reasoning": text})
    elif kind == "function_call":
        call = _function_call(item, param)
        if last is not None:
            last.setdefault("tool_calls", []).append(call)
        else:
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
    elif kind == "function_call_output":
        call_id = item.get("call_id")
        if not isinstance(call_id, str) or not call_id:
            raise ItemError(f"a function_call_output needs its call_id, got {call_id!r}",
                            f"{param}.call_id")
        output = item.get("output")
        text = output if isinstance(output, str) else _text(output, f"{param}.output")
        messages.append({"role": "tool", "tool_call_id": call_id, "content": text})
    else:
        raise ItemError(f"items of type {kind!r} are not supported (message, reasoning, "
                        "function_call, function_call_output are)", f"{param}.type")


def _function_call(item: Mapping[str, Any], param: str) -> dict[str, Any]:
    name, arguments = item.get("name"), item.get("arguments", "")
    if not isinstance(name, str) or not name:
        raise ItemError(f"a function_call needs a name, got {name!r}", f"{param}.name")
    if not isinstance(arguments, str):
        raise ItemError(f"arguments must be a JSON string, got {arguments!r}",
                        f"{param}.arguments")
    call_id = item.get("call_id") or item.get("id") or ""
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _text(content: Any, param: str) -> str:
    """The text of a string or of a list of text parts (input_text, output_text, ...)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise ItemError(f"must be a string or a list of text parts, got {content!r}", param)
    texts = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, Mapping) else None
        if kind in _TEXT_PARTS and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif kind == "refusal" and isinstance(part.get("refusal"), str):
            texts.append(part["refusal"])
        else:
            raise ItemError(f"only text parts are supported, got {part!r}", f"{param}[{j}]")
    return "".join(texts)


def chat_tools(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]] | None:
    """Responses function tools (flat: type, name, parameters, ...) as chat tools."""
    out = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, Mapping) or tool.get("type") != "function":
            kind = tool.get("type") if isinstance(tool, Mapping) else tool
            raise ItemError(f"only function tools are supported, got type {kind!r}",
                            f"tools[{i}]")
        name = tool.get("name")
        if not isinstance(name, str) or not name:
            raise ItemError(f"a function tool needs a name, got {name!r}", f"tools[{i}].name")
        fn = {k: tool[k] for k in ("name", "description", "parameters", "strict")
              if tool.get(k) is not None}
        out.append({"type": "function", "function": fn})
    return out or None


def chat_tool_choice(choice: str | Mapping[str, Any]) -> str | dict[str, Any]:
    """'auto' / 'none' / 'required' / {'type': 'function', 'name'} in the chat form."""
    if isinstance(choice, str):
        return choice
    if choice.get("type") == "function" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise ItemError(f"must be 'auto', 'none', 'required' or {{'type': 'function', 'name': ...}}, "
                    f"got {dict(choice)!r}", "tool_choice")


def response_format(fmt: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """`text.format` as a chat `response_format`."""
    if fmt is None:
        return None
    kind = fmt.get("type")
    if kind in ("text", "json_object"):
        return {"type": kind}
    if kind == "json_schema":
        schema = fmt.get("schema")
        if not isinstance(schema, Mapping):
            raise ItemError(f"a json_schema format needs `schema` (an object), got {schema!r}",
                            "text.format.schema")
        spec = {"name": fmt.get("name") or "response", "schema": dict(schema),
                "strict": fmt.get("strict")}
        return {"type": "json_schema", "json_schema": spec}
    raise ItemError(f"type must be 'text', 'json_object' or 'json_schema', got {kind!r}",
                    "text.format.type")


def output_messages(output: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A stored response's output items as the assistant messages of its turn."""
    return input_messages(list(output), "output")
