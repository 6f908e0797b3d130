"""OpenAI request bodies as pydantic models, with vLLM's extra fields.

Unknown top-level fields are rejected (OpenAI answers "Unrecognized request argument supplied"),
messages and tools keep unknown keys (clients echo back fields such as `refusal` or `annotations`).
Cross-field rules that need the request as a whole (a named tool_choice must name a tool in
`tools`, `tools: []`) are checked here so they become 400s with `param` filled in.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

MAX_TOP_LOGPROBS = 20


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class StreamOptions(_Strict):
    include_usage: bool = False
    continuous_usage_stats: bool = False


class FunctionDefinition(_Open):
    name: str = Field(min_length=1, max_length=64)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(_Open):
    type: Literal["function"] = "function"
    function: FunctionDefinition


class NamedFunction(_Strict):
    name: str


class NamedToolChoice(_Strict):
    type: Literal["function"] = "function"
    function: NamedFunction


class JsonSchemaFormat(_Open):
    name: str = "response"
    description: str | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None


class ResponseFormat(_Strict):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None

    @model_validator(mode="after")
    def _schema_given(self) -> ResponseFormat:
        if self.type == "json_schema" and self.json_schema is None:
            raise ValueError("response_format of type json_schema needs a `json_schema` object")
        return self


class StructuredOutputs(_Strict):
    """vLLM's `structured_outputs` request field: exactly one constraint."""

    json_: dict[str, Any] | str | None = Field(default=None, alias="json")
    json_object: bool | None = None
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None
    structural_tag: dict[str, Any] | str | None = None
    disable_any_whitespace: bool = True
    enable_in_reasoning: bool = False
    jump_forward: bool = True  # ours: False decodes grammar-forced text token by token
    bound_numbers: bool | None = None
    complete_before_max_tokens: bool | None = None
    best_effort: bool = False


class ThinkgateOptions(_Strict):
    """thinkgate's own chat extension, `"thinkgate": {...}` in the body (absent: no effect).

    trace: stream, per generated token, what the grammar and the reasoning gate did
    (`choices[i].thinkgate.trace`; api/token_trace.py)."""

    trace: bool = False


class ChatMessage(_Open):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    reasoning: str | None = None
    reasoning_content: str | None = None

    @model_validator(mode="after")
    def _content_required(self) -> ChatMessage:
        if self.role in ("user", "system", "developer", "tool") and self.content is None:
            raise ValueError(f"a {self.role} message needs `content`")
        if self.role == "tool" and not self.tool_call_id:
            raise ValueError("a tool message needs `tool_call_id`")
        return self


class _SamplingFields(_Strict):
    """The fields both endpoints share (OpenAI's and vLLM's names)."""

    model: str | None = None
    n: int = Field(default=1, ge=1, le=128)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=-1)
    min_p: float | None = Field(default=None, ge=0.0, le=1.0)
    seed: int | None = None
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    presence_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    frequency_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    repetition_penalty: float | None = Field(default=None, gt=0.0)
    logit_bias: dict[str, float] | None = None
    min_tokens: int = Field(default=0, ge=0)
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = None
    request_id: str | None = None
    structured_outputs: StructuredOutputs | None = None

    @field_validator("stop")
    @classmethod
    def _stop_list(cls, value: str | list[str] | None) -> list[str] | None:
        if value is None:
            return None
        stops = [value] if isinstance(value, str) else value
        if len(stops) > 4 or any(not s for s in stops):
            raise ValueError("stop takes up to 4 non-empty strings")
        return stops

    @model_validator(mode="after")
    def _stream_options_need_stream(self) -> _SamplingFields:
        if self.stream_options is not None and not self.stream:
            raise ValueError("stream_options is only allowed when `stream` is true")
        return self


class ChatCompletionRequest(_SamplingFields):
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=MAX_TOP_LOGPROBS)
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None
    response_format: ResponseFormat | None = None
    chat_template: str | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    include_reasoning: bool = True
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = None
    thinking_token_budget: int | None = Field(default=None, ge=0)
    thinkgate: ThinkgateOptions | None = None
    # Accepted for OpenAI compatibility and ignored (no effect on a local model).
    store: bool | None = None
    metadata: dict[str, str] | None = None
    service_tier: str | None = None
    modalities: list[str] | None = None
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None

    @model_validator(mode="after")
    def _tool_rules(self) -> ChatCompletionRequest:
        if self.tools is not None and len(self.tools) == 0:
            raise _ParamError("`tools` must not be empty; leave it out instead", "tools")
        if self.top_logprobs is not None and not self.logprobs:
            raise _ParamError("top_logprobs needs `logprobs: true`", "top_logprobs")
        choice = self.tool_choice
        if isinstance(choice, NamedToolChoice):
            names = [t.function.name for t in self.tools or []]
            if choice.function.name not in names:
                raise _ParamError(
                    f"tool_choice names function {choice.function.name!r}, which does not match "
                    f"any of the specified `tools` ({names})",
                    "tool_choice",
                )
        elif choice == "required" and not self.tools:
            raise _ParamError("tool_choice 'required' needs `tools`", "tool_choice")
        return self

    def completion_limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


class CompletionRequest(_SamplingFields):
    prompt: str | list[str] | list[int] | list[list[int]]
    max_tokens: int | None = Field(default=16, ge=1)
    logprobs: int | None = Field(default=None, ge=0, le=5)
    echo: bool = False
    suffix: str | None = None
    best_of: int | None = Field(default=None, ge=1)

    @field_validator("prompt")
    @classmethod
    def _prompt_nonempty(cls, value: Any) -> Any:
        if isinstance(value, list) and len(value) == 0:
            raise ValueError("prompt must not be an empty list")
        return value

    @model_validator(mode="after")
    def _unsupported(self) -> CompletionRequest:
        if self.suffix:
            raise _ParamError("suffix is not supported by this model", "suffix")
        if self.best_of is not None and self.best_of != self.n:
            raise _ParamError("best_of other than n is not supported", "best_of")
        return self


class TokenizeRequest(_Strict):
    model: str | None = None
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    tools: list[Tool] | None = None
    add_special_tokens: bool = True
    add_generation_prompt: bool = True
    chat_template_kwargs: dict[str, Any] | None = None
    return_token_strs: bool = False

    @model_validator(mode="after")
    def _one_input(self) -> TokenizeRequest:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("give exactly one of `prompt` or `messages`")
        return self


class DetokenizeRequest(_Strict):
    model: str | None = None
    tokens: list[int]


class _ParamError(ValueError):
    """A validation failure that knows which request field it is about."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param
