"""The body of `POST /v1/responses` (OpenAI's Responses fields + vLLM's extras) as pydantic.

Unknown top-level fields are rejected, like every other body here. Input items and tools stay
plain dicts: `items.py` reads them and names the bad one (`input[2].content`) itself.
Fields OpenAI defines that have no effect on a local model (metadata, service_tier, truncation,
prompt_cache_key, ...) are accepted and echoed.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from thinkgate.api.protocol import StructuredOutputs, _ParamError

MAX_TOP_LOGPROBS = 20
Effort = Literal["none", "minimal", "low", "medium", "high", "xhigh"]


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class Reasoning(_Open):
    effort: Effort | None = None
    summary: str | None = None
    generate_summary: str | None = None


class TextConfig(_Open):
    format: dict[str, Any] | None = None
    verbosity: Literal["low", "medium", "high"] | None = None


class ResponsesRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # OpenAI's fields (https://platform.openai.com/docs/api-reference/responses/create)
    input: str | list[dict[str, Any]]
    model: str | None = None
    instructions: str | None = None
    background: bool = False
    include: list[str] | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    max_tool_calls: int | None = Field(default=None, ge=1)
    metadata: dict[str, str] | None = None
    parallel_tool_calls: bool = True
    previous_response_id: str | None = None
    reasoning: Reasoning | None = None
    store: bool = True
    stream: bool = False
    stream_options: dict[str, Any] | None = None
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    text: TextConfig | None = None
    tool_choice: str | dict[str, Any] = "auto"
    tools: list[dict[str, Any]] = Field(default_factory=list)
    top_logprobs: int | None = Field(default=None, ge=0, le=MAX_TOP_LOGPROBS)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    truncation: Literal["auto", "disabled"] | None = None
    user: str | None = None
    service_tier: str | None = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: str | None = None
    safety_identifier: str | None = None
    # vLLM's extras
    request_id: str | None = None
    top_k: int | None = Field(default=None, ge=-1)
    min_p: float | None = Field(default=None, ge=0.0, le=1.0)
    repetition_penalty: float | None = Field(default=None, gt=0.0)
    seed: int | None = None
    stop: str | list[str] | None = None
    ignore_eos: bool = False
    logit_bias: dict[str, float] | None = None
    skip_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    structured_outputs: StructuredOutputs | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    thinking_token_budget: int | None = Field(default=None, ge=0)

    # What `sampling.sampling_kwargs` reads that the Responses API does not have.
    n: ClassVar[int] = 1
    min_tokens: ClassVar[int] = 0
    stop_token_ids: ClassVar[None] = None
    presence_penalty: ClassVar[float] = 0.0
    frequency_penalty: ClassVar[float] = 0.0

    @field_validator("input")
    @classmethod
    def _input_nonempty(cls, value: Any) -> Any:
        if isinstance(value, list) and not value:
            raise ValueError("input must be a string or a non-empty list of items")
        return value

    @model_validator(mode="after")
    def _rules(self) -> ResponsesRequest:
        if self.background and not self.store:
            raise _ParamError("background responses need `store: true`", "background")
        if self.structured_outputs is not None and self.text is not None \
                and (self.text.format or {}).get("type", "text") != "text":
            raise _ParamError("Cannot specify both structured_outputs and text.format",
                              "structured_outputs")
        return self

    def wants_logprobs(self) -> bool:
        return "message.output_text.logprobs" in (self.include or ())

    def reasoning_effort(self) -> str | None:
        return self.reasoning.effort if self.reasoning is not None else None

