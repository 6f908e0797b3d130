"""Anthropic Messages request bodies (`POST /v1/messages`, `/v1/messages/count_tokens`).

Field names and shapes are the `anthropic` package's (`MessageCreateParams`). As vLLM's models
do, unknown top-level fields are ignored (agent clients send newer ones such as
`context_management`) and content blocks keep unknown keys (`cache_control`, `citations`);
what a block means is checked by the translator (`translate.py`), which names the
block in its error.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class ContentBlock(_Open):
    """Any input block: text, thinking, redacted_thinking, tool_use, tool_result (others are
    rejected by the translator with the block's position)."""

    type: str
    text: str | None = None
    thinking: str | None = None
    signature: str | None = None
    id: str | None = None
    name: str | None = None
    input: dict[str, Any] | None = None
    tool_use_id: str | None = None
    content: str | list[dict[str, Any]] | None = None
    is_error: bool | None = None


class InputMessage(_Open):
    role: Literal["user", "assistant", "system"]  # "system" inside messages: as vLLM accepts
    content: str | list[ContentBlock]


class Tool(_Open):
    type: Literal["custom"] | None = None  # first: a server tool is told it is not supported
    name: str = Field(min_length=1, max_length=128)
    description: str | None = None
    input_schema: dict[str, Any]
    strict: bool | None = None


class ToolChoice(_Open):
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = None
    disable_parallel_tool_use: bool | None = None

    @model_validator(mode="after")
    def _name_for_tool(self) -> ToolChoice:
        if self.type == "tool" and not self.name:
            raise ValueError("tool_choice of type 'tool' needs `name`")
        return self


class Thinking(_Open):
    """`enabled` (with `budget_tokens`), `disabled`, `adaptive` or `between_tools`."""

    type: Literal["enabled", "disabled", "adaptive", "between_tools"]
    budget_tokens: int | None = Field(default=None, ge=1)
    display: Literal["summarized", "omitted"] | None = None

    @model_validator(mode="after")
    def _budget_for_enabled(self) -> Thinking:
        if self.type == "enabled" and self.budget_tokens is None:
            raise ValueError("thinking of type 'enabled' needs `budget_tokens`")
        return self


class OutputFormat(_Open):
    type: Literal["json_schema"]
    schema_: dict[str, Any] = Field(alias="schema")


class OutputConfig(_Open):
    effort: Literal["low", "medium", "high", "xhigh", "max"] | None = None
    format: OutputFormat | None = None


class CountTokensRequest(BaseModel):
    """What decides the prompt: the fields `count_tokens` takes (and `create` shares)."""

    model: str = Field(min_length=1)
    messages: list[InputMessage] = Field(min_length=1)
    system: str | list[ContentBlock] | None = None
    tools: list[Tool] | None = None
    tool_choice: ToolChoice | None = None
    thinking: Thinking | None = None
    output_config: OutputConfig | None = None
    chat_template_kwargs: dict[str, Any] | None = None  # vLLM's extra field


class MessagesRequest(CountTokensRequest):
    max_tokens: int = Field(ge=1)
    stop_sequences: list[str] | None = None
    stream: bool = False
    temperature: float | None = Field(default=None, ge=0.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=-1)
    metadata: dict[str, Any] | None = None  # accepted, no effect on a local model

    @field_validator("stop_sequences")
    @classmethod
    def _non_empty(cls, value: list[str] | None) -> list[str] | None:
        if value and not all(value):
            raise ValueError(f"stop_sequences must be non-empty strings, got {value!r}")
        return value
