"""The shared chat layer: messages in, OpenAI assistant messages and delta chunks out.

The HTTP server, the batch runner and `LLM.chat` all go through `ChatLayer`:

    layer = ChatLayer(tokenizer, reasoning_parser="qwen3", tool_call_parser="hermes")
    req = layer.prepare(messages, sampling_params, tools=tools, tool_choice="required")
    # ... the engine generates from req.prompt_token_ids with req.sampling_params ...
    stream = layer.stream(req)                  # one per choice
    deltas = stream.feed(delta_text, token_ids)  # OpenAI `delta` dicts, as the model writes
    deltas, finish_reason = stream.finish(engine_finish_reason)
    # non-streaming: layer.choice(req, completion_output) feeds the whole output once

Non-streamed messages are streamed deltas folded together, so the two cannot disagree.
`finish_reason` is "tool_calls" when the parser completed a call and the model stopped by itself,
"length" when cut off, else the engine's reason.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from thinkgate.api.prompt_tokens import PromptTokenizer, encode_bounded
from thinkgate.engine.outputs import CompletionOutput, RequestOutput
from thinkgate.engine.sampling_params import SamplingParams
from thinkgate.engine.structured.constrained import install_constrained_decoding
from thinkgate.engine.structured.tool_constraints import (
    ToolChoice,
    best_effort_report,
    chat_constraint,
    normalize_tool_choice,
)
from thinkgate.parsers import Parser, StreamParser, collect, get_parser

Message = Mapping[str, Any]


@dataclass
class ChatRequest:
    """A rendered chat request, ready for the engine."""

    prompt: str
    prompt_token_ids: list[int]
    sampling_params: SamplingParams
    tools: list[dict[str, Any]] | None
    tool_choice: str  # "none" | "auto" | "required" | a function name
    chat_template_kwargs: dict[str, Any]
    # best_effort: the schema keywords the grammar does not enforce ("<keyword> at <path>")
    unenforced_keywords: list[str] = field(default_factory=list)


@dataclass
class ChatChoice:
    index: int
    message: dict[str, Any]  # {"role", "content", "reasoning", "tool_calls"}
    finish_reason: str | None
    num_tokens: int
    num_reasoning_tokens: int


@dataclass
class ChatOutput:
    """What `LLM.chat` returns per conversation; `.message` / `.finish_reason` are choice 0's."""

    request_id: str
    prompt: str
    prompt_token_ids: list[int]
    choices: list[ChatChoice]
    output: RequestOutput = field(repr=False)

    @property
    def message(self) -> dict[str, Any]:
        return self.choices[0].message

    @property
    def finish_reason(self) -> str | None:
        return self.choices[0].finish_reason

    @property
    def usage(self) -> dict[str, Any]:
        completion = sum(c.num_tokens for c in self.choices)
        return {"prompt_tokens": len(self.prompt_token_ids), "completion_tokens": completion,
                "total_tokens": len(self.prompt_token_ids) + completion,
                "completion_tokens_details": {
                    "reasoning_tokens": sum(c.num_reasoning_tokens for c in self.choices)}}


class ChatStream:
    """One choice's output turned into OpenAI deltas, incrementally (O(delta) per feed)."""

    def __init__(self, parser: StreamParser) -> None:
        self._parser = parser
        self.finish_reason: str | None = None

    def feed(self, delta_text: str, token_ids: Sequence[int] = ()) -> list[dict[str, Any]]:
        if not delta_text and not token_ids:
            return []
        return self._parser.feed(delta_text, token_ids)

    def finish(self, engine_finish_reason: str | None) -> tuple[list[dict[str, Any]], str | None]:
        """Flush held-back text; the OpenAI finish_reason for the engine's."""
        deltas = self._parser.finish()
        reason = engine_finish_reason
        if reason == "stop" and self._parser.num_completed_calls > 0:
            reason = "tool_calls"
        self.finish_reason = reason
        return deltas, reason


class ChatLayer:
    """Chat template + parsers + constraints for one model (see the module docstring).

    enable_auto_tool_choice: whether `tool_choice="auto"` with tools is allowed (vLLM's flag);
    None means "when a tool-call parser is set". exclude_tools_when_tool_choice_none: leave the
    tools out of the prompt under `tool_choice="none"` (vLLM's flag; by default the template
    sees them, as in vLLM). default_chat_template_kwargs are merged under each request's own.
    """

    def __init__(self, tokenizer: Any, *, reasoning_parser: str | None = None,
                 tool_call_parser: str | None = None,
                 enable_auto_tool_choice: bool | None = None, chat_template: str | None = None,
                 default_chat_template_kwargs: Mapping[str, Any] | None = None,
                 max_prompt_tokens: int | None = None,
                 exclude_tools_when_tool_choice_none: bool = False) -> None:
        self.tokenizer = tokenizer
        self.max_prompt_tokens = max_prompt_tokens  # longer prompts: PromptTooLong, found early
        self.reasoning_parser = reasoning_parser
        self.tool_call_parser = tool_call_parser
        self.enable_auto_tool_choice = (tool_call_parser is not None
                                        if enable_auto_tool_choice is None
                                        else enable_auto_tool_choice)
        self.exclude_tools_when_tool_choice_none = exclude_tools_when_tool_choice_none
        self.chat_template = chat_template
        self.default_chat_template_kwargs = dict(default_chat_template_kwargs or {})
        self._with_tools: Parser = get_parser(tool_call_parser, reasoning_parser, tokenizer)
        self._without_tools: Parser = get_parser(None, reasoning_parser, tokenizer)
        self._prompt_tokenizer: PromptTokenizer | None = None  # built on first use

    @property
    def reasoning_format(self) -> Any:
        return self._with_tools.reasoning

    # ---- requests ----
    def prepare(self, messages: Sequence[Message], sampling_params: SamplingParams | None = None,
                *, tools: Sequence[Mapping[str, Any]] | None = None,
                tool_choice: ToolChoice = None,
                response_format: Mapping[str, Any] | None = None,
                chat_template_kwargs: Mapping[str, Any] | None = None,
                reasoning_effort: str | None = None, thinking_token_budget: int | None = None,
                parallel_tool_calls: bool = True, add_generation_prompt: bool = True,
                chat_template: str | None = None) -> ChatRequest:
        """Render the template and build the request's SamplingParams; ValueError naming any
        bad field (messages, tools, tool_choice, response_format, template)."""
        choice = normalize_tool_choice(tool_choice, tools)
        tool_list = [dict(t) for t in tools] if tools else None
        if choice == "auto" and tool_list and not self.enable_auto_tool_choice:
            raise ValueError('tool_choice "auto" needs a tool-call parser and auto tool choice '
                             "enabled (--enable-auto-tool-choice --tool-call-parser NAME)")
        ckw = {**self.default_chat_template_kwargs, **(chat_template_kwargs or {})}
        if reasoning_effort is not None:
            ckw.setdefault("reasoning_effort", reasoning_effort)
            if reasoning_effort == "none":  # as vLLM: no thinking (explicit kwargs win)
                ckw.setdefault("enable_thinking", False)
        rendered_tools = (None if choice == "none" and self.exclude_tools_when_tool_choice_none
                          else tool_list)
        prompt = self.render(messages, rendered_tools, ckw, add_generation_prompt, chat_template)
        ids = self.encode_prompt(prompt)
        params = self._params(sampling_params, tool_list, choice, response_format, ckw,
                              thinking_token_budget, parallel_tool_calls)
        return ChatRequest(prompt, ids, params, tool_list, choice, ckw,
                           best_effort_report(params.structured_outputs, tool_list, choice,
                                              response_format))

    def encode_prompt(self, prompt: str) -> list[int]:
        """`tokenizer.encode(prompt, add_special_tokens=False)`, reusing the ids of prompt pieces
        seen before (a repeated system prompt or tool list; api/prompt_tokens.py)."""
        if self._prompt_tokenizer is None:
            self._prompt_tokenizer = PromptTokenizer(self.tokenizer)
        return encode_bounded(self._prompt_tokenizer.encode, prompt, self.max_prompt_tokens,
                              encode_chunk=self._encode_plain)

    def _encode_plain(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def render(self, messages: Sequence[Message], tools: list[dict[str, Any]] | None,
               chat_template_kwargs: Mapping[str, Any], add_generation_prompt: bool = True,
               chat_template: str | None = None) -> str:
        """The prompt text of `messages` under the model's (or the given) chat template."""
        template = chat_template or self.chat_template
        if template is None and not getattr(self.tokenizer, "chat_template", None):
            raise ValueError("the tokenizer has no chat template; pass chat_template")
        try:
            return self.tokenizer.apply_chat_template(
                normalize_messages(messages), tools=tools, tokenize=False,
                add_generation_prompt=add_generation_prompt, chat_template=template,
                **chat_template_kwargs)
        except (TypeError, KeyError, AttributeError, IndexError) as err:
            raise ValueError(f"the chat template could not render these messages: {err}") from None
        except Exception as err:  # jinja2's TemplateError family, raised by template code
            if type(err).__module__.startswith("jinja2"):
                raise ValueError(f"the chat template failed: {err}") from None
            raise

    def _params(self, params: SamplingParams | None, tools: list[dict[str, Any]] | None,
                choice: str, response_format: Mapping[str, Any] | None, ckw: dict[str, Any],
                budget: int | None, parallel: bool) -> SamplingParams:
        params = params or SamplingParams(max_tokens=None)
        given = params.structured_outputs
        options = given.options() if given is not None and given.is_options_only else None
        constraint = chat_constraint(self.tool_call_parser, tools, choice, response_format,
                                     parallel, options)
        updates: dict[str, Any] = {}
        if constraint is None and options is not None:
            updates["structured_outputs"] = None  # options with nothing to apply them to
        if constraint is not None:
            if given is not None and options is None:
                raise ValueError("structured_outputs in sampling_params cannot be combined with "
                                 f"tool_choice {choice!r} / response_format {response_format!r}")
            fmt = self.reasoning_format
            if fmt is not None and not fmt.thinking_enabled(ckw):
                # thinking is off but the template may not close it in the prompt
                constraint = dataclasses.replace(constraint, enable_in_reasoning=True)
            updates["structured_outputs"] = constraint
        if budget is not None:
            updates["thinking_token_budget"] = budget
        return dataclasses.replace(params, **updates) if updates else params

    # ---- outputs ----
    def stream(self, request: ChatRequest) -> ChatStream:
        parser = self._without_tools if request.tool_choice == "none" else self._with_tools
        return ChatStream(parser.stream(request.tools, request.chat_template_kwargs,
                                        prompt_token_ids=request.prompt_token_ids))

    def choice(self, request: ChatRequest, output: CompletionOutput) -> ChatChoice:
        """A finished completion as an OpenAI choice: the stream path fed once."""
        stream = self.stream(request)
        deltas = stream.feed(output.text, output.token_ids)
        more, reason = stream.finish(output.finish_reason)
        return ChatChoice(output.index, assistant_message(deltas + more), reason,
                          len(output.token_ids), self.reasoning_tokens(request, output.token_ids))

    def reasoning_tokens(self, request: ChatRequest, token_ids: Sequence[int]) -> int:
        """Output tokens spent thinking (markers excluded), for usage."""
        fmt = self.reasoning_format
        if fmt is None:
            return 0
        ckw = request.chat_template_kwargs
        ended = fmt.is_reasoning_end(request.prompt_token_ids, self.tokenizer, ckw)
        return fmt.count_reasoning_tokens(token_ids, self.tokenizer, ckw, prompt_ended=ended)

    def chat_output(self, request: ChatRequest, output: RequestOutput) -> ChatOutput:
        return ChatOutput(output.request_id, request.prompt, request.prompt_token_ids,
                          [self.choice(request, o) for o in output.outputs], output)


def assistant_message(deltas: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """OpenAI deltas folded into an assistant message with OpenAI-shaped tool calls."""
    parsed = collect(deltas)
    return {
        "role": "assistant",
        "content": parsed.content,
        "reasoning": parsed.reasoning,
        "tool_calls": [{"id": c.id, "type": "function",
                        "function": {"name": c.name, "arguments": c.arguments}}
                       for c in parsed.tool_calls],
    }


def normalize_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Messages as chat templates expect them: text parts joined, tool-call arguments as dicts
    (kept as the raw string when they are not valid JSON), `reasoning_content` aliased."""
    if isinstance(messages, Mapping) or not isinstance(messages, Sequence) or not messages:
        raise ValueError(f"messages must be a non-empty list of messages, got {messages!r}")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping) or not isinstance(m.get("role"), str):
            raise ValueError(f"messages[{i}] must be an object with a role, got {m!r}")
        msg = dict(m)
        msg["content"] = _text(msg.get("content"), i)
        if msg.get("reasoning") is None and msg.get("reasoning_content") is not None:
            msg["reasoning"] = msg["reasoning_content"]
        if msg.get("tool_calls"):
            msg["tool_calls"] = [_template_call(c) for c in msg["tool_calls"]]
        out.append(msg)
    return out


def _text(content: Any, i: int) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, Mapping) and part.get("type") == "text":
                parts.append(str(part.get("text", "")))
            else:
                raise ValueError(f"messages[{i}].content: only text parts are supported, "
                                 f"got {part!r}")
        return "".join(parts)
    raise ValueError(f"messages[{i}].content must be a string or a list of text parts, "
                     f"got {content!r}")


def _template_call(call: Any) -> Any:
    if not isinstance(call, Mapping):
        return call
    call = dict(call)
    fn = call.get("function")
    if isinstance(fn, Mapping) and isinstance(fn.get("arguments"), str):
        try:
            args = json.loads(fn["arguments"])
        except ValueError:
            args = None
        if isinstance(args, dict):
            call["function"] = {**fn, "arguments": args}
    return call


DEMO_PARSERS = {"reasoning_parser": "qwen3", "tool_call_parser": "hermes"}


def chat_layer_for(llm: Any) -> ChatLayer:
    """The `ChatLayer` of an `LLM` (built once): its parsers, or the demo model's by default."""
    layer = getattr(llm, "_chat_layer", None)
    if layer is None:
        engine = llm.llm_engine
        options = {k: v for k, v in getattr(llm, "extra_args", {}).items()
                   if k in ("reasoning_parser", "tool_call_parser",
                            "exclude_tools_when_tool_choice_none")}
        if engine.config.model is None:
            options = {**DEMO_PARSERS, **options}
        install_constrained_decoding(engine, options.get("reasoning_parser"))
        layer = ChatLayer(engine.tokenizer, **options, max_prompt_tokens=engine.max_model_len)
        llm._chat_layer = layer
    return layer


def llm_chat(llm: Any, messages: Sequence[Message] | Sequence[Sequence[Message]],
             sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
             use_tqdm: bool = True, *, tools: Sequence[Mapping[str, Any]] | None = None,
             tool_choice: ToolChoice = "auto", chat_template_kwargs: Mapping[str, Any] | None = None,
             response_format: Mapping[str, Any] | None = None, chat_template: str | None = None,
             add_generation_prompt: bool = True, reasoning_effort: str | None = None,
             thinking_token_budget: int | None = None, parallel_tool_calls: bool = True
             ) -> list[ChatOutput]:
    """`LLM.chat`: one conversation (a list of messages) or a list of them -> ChatOutputs."""
    layer = chat_layer_for(llm)
    conversations = _conversations(messages)
    if sampling_params is None or isinstance(sampling_params, SamplingParams):
        params_list = [sampling_params] * len(conversations)
    else:
        params_list = list(sampling_params)
        if len(params_list) != len(conversations):
            raise ValueError(f"sampling_params has {len(params_list)} entries for "
                             f"{len(conversations)} conversations")
    requests = [layer.prepare(conv, params, tools=tools, tool_choice=tool_choice,
                              response_format=response_format,
                              chat_template_kwargs=chat_template_kwargs,
                              reasoning_effort=reasoning_effort,
                              thinking_token_budget=thinking_token_budget,
                              parallel_tool_calls=parallel_tool_calls,
                              add_generation_prompt=add_generation_prompt,
                              chat_template=chat_template)
                for conv, params in zip(conversations, params_list)]
    outputs = llm.generate([r.prompt_token_ids for r in requests],
                           [r.sampling_params for r in requests], use_tqdm=use_tqdm)
    return [layer.chat_output(r, o) for r, o in zip(requests, outputs)]


def _conversations(messages: Any) -> list[Sequence[Message]]:
    if isinstance(messages, Sequence) and messages and not isinstance(messages, str):
        first = messages[0]
        if isinstance(first, Mapping):
            return [messages]
        if isinstance(first, Sequence) and not isinstance(first, str):
            return list(messages)
    raise ValueError("messages must be a list of messages or a list of conversations, got "
                     f"{messages!r}")
