"""Sampling parameters with vLLM's names and meanings, validated at construction.

`SamplingParams` is a frozen dataclass: a bad value raises `ValueError` naming the field.
`StructuredOutputsParams` carries the grammar a request must follow (applied by the grammar
layer; the engine core only stores it and calls its hooks).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

_GREEDY_EPS = 1e-5


class RequestOutputKind(str, Enum):
    """What each output of a request carries (vLLM's `RequestOutputKind`)."""

    CUMULATIVE = "cumulative"  # every output holds all text so far
    DELTA = "delta"  # every output holds only the new text and tokens
    FINAL_ONLY = "final_only"  # one output, when the request finishes


@dataclass(frozen=True)
class StructuredOutputsParams:
    """Exactly one constraint: json / json_object / regex / choice / grammar / structural_tag,
    and options (all but the constraint are options).

    bound_numbers: JSON numbers get at most 16 integer, 16 fraction and 3 exponent digits
    (None: the engine's default, on). complete_before_max_tokens: when the tokens left only fit
    the shortest valid completion, write it (JSON and tool-call constraints; None: the engine's
    default, off); finish_reason stays "length", stop_reason is "completed_at_max_tokens".
    best_effort: accept JSON-schema keywords the grammar does not enforce (else ValueError).
    Options alone (no constraint) are only meaningful to the chat layer, which merges them into
    the constraint of response_format / tool_choice.
    """

    json: str | dict[str, Any] | None = None
    json_object: bool | None = None
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None
    structural_tag: str | dict[str, Any] | None = None
    disable_any_whitespace: bool = True
    enable_in_reasoning: bool = False
    jump_forward: bool = True  # write grammar-forced text in one forward (engine/structured/jump_forward.py)
    bound_numbers: bool | None = None
    complete_before_max_tokens: bool | None = None
    best_effort: bool = False

    def __post_init__(self) -> None:
        given = [name for name in self.kinds() if self._is_set(name)]
        for name in ("bound_numbers", "complete_before_max_tokens"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, bool):
                raise ValueError(f"structured_outputs.{name} must be a bool or None, got {value!r}")
        if not isinstance(self.best_effort, bool):
            raise ValueError(f"structured_outputs.best_effort must be a bool, got "
                             f"{self.best_effort!r}")
        if not given and self.is_options_only:
            return
        if len(given) != 1:
            raise ValueError(
                "structured_outputs needs exactly one of json, json_object, regex, choice, "
                f"grammar, structural_tag; got {given or 'none'}"
            )
        if self.json is not None and not isinstance(self.json, str | dict):
            raise ValueError(f"structured_outputs.json must be a dict or str, got {self.json!r}")
        if self.json_object is not None and self.json_object is not True:
            raise ValueError(f"structured_outputs.json_object must be True, got {self.json_object}")
        for name in ("regex", "grammar"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise ValueError(
                    f"structured_outputs.{name} must be a non-empty str, got {value!r}"
                )
        if self.choice is not None:
            ok = isinstance(self.choice, list | tuple) and self.choice
            if not ok or not all(isinstance(c, str) for c in self.choice):
                raise ValueError(
                    "structured_outputs.choice must be a non-empty list of str, "
                    f"got {self.choice!r}"
                )
            object.__setattr__(self, "choice", list(self.choice))
        tag = self.structural_tag
        if tag is not None and not isinstance(tag, str | dict):
            raise ValueError(
                f"structured_outputs.structural_tag must be a dict or str, got {tag!r}"
            )

    @staticmethod
    def kinds() -> tuple[str, ...]:
        return ("json", "json_object", "regex", "choice", "grammar", "structural_tag")

    def _is_set(self, name: str) -> bool:
        value = getattr(self, name)
        return value is not None and value is not False

    @property
    def is_options_only(self) -> bool:
        """No constraint, only options (bound_numbers, complete_before_max_tokens, best_effort)
        for the chat layer to merge into its constraint."""
        if any(self._is_set(name) for name in self.kinds()):
            return False
        return (self.bound_numbers is not None or self.complete_before_max_tokens is not None
                or self.best_effort)

    def options(self) -> dict[str, Any]:
        """The options that were set, as keyword arguments for `dataclasses.replace`."""
        out: dict[str, Any] = {k: getattr(self, k) for k in ("bound_numbers",
                               "complete_before_max_tokens") if getattr(self, k) is not None}
        if self.best_effort:
            out["best_effort"] = True
        return out

    @property
    def kind(self) -> str:
        """The name of the one constraint that is set."""
        return next(name for name in self.kinds() if self._is_set(name))


@dataclass(frozen=True)
class SamplingParams:
    """How to sample one request (vLLM's names; temperature 0 means greedy)."""

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 or -1: off
    min_p: float = 0.0
    seed: int | None = None
    max_tokens: int | None = 16
    min_tokens: int = 0
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    include_stop_str_in_output: bool = False
    ignore_eos: bool = False
    logprobs: int | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logit_bias: dict[int, float] | None = None
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    structured_outputs: StructuredOutputsParams | None = None
    thinking_token_budget: int | None = None
    output_kind: RequestOutputKind = RequestOutputKind.CUMULATIVE
    extra_args: dict[str, Any] | None = field(default=None, compare=False)
    # thinkgate's own: record per token what the grammar and the reasoning gate did
    # (engine/core/token_trace.py; `CompletionOutput.trace`)
    token_trace: bool = False

    def __post_init__(self) -> None:
        self._check_ints()
        self._check_floats()
        self._normalize_lists()
        if self.structured_outputs is not None and not isinstance(
            self.structured_outputs, StructuredOutputsParams
        ):
            raise ValueError(
                "structured_outputs must be a StructuredOutputsParams, got "
                f"{type(self.structured_outputs).__name__}"
            )
        if not isinstance(self.token_trace, bool):
            raise ValueError(f"token_trace must be a bool, got {self.token_trace!r}")
        if not isinstance(self.output_kind, RequestOutputKind):
            try:
                object.__setattr__(self, "output_kind", RequestOutputKind(self.output_kind))
            except ValueError:
                raise ValueError(
                    f"output_kind must be a RequestOutputKind, got {self.output_kind!r}"
                ) from None

    def _check_ints(self) -> None:
        def is_int(v: object) -> bool:
            return isinstance(v, int) and not isinstance(v, bool)

        if not is_int(self.n) or self.n < 1:
            raise ValueError(f"n must be an int >= 1, got {self.n!r}")
        if self.max_tokens is not None and (not is_int(self.max_tokens) or self.max_tokens < 1):
            raise ValueError(f"max_tokens must be an int >= 1 or None, got {self.max_tokens!r}")
        if not is_int(self.min_tokens) or self.min_tokens < 0:
            raise ValueError(f"min_tokens must be an int >= 0, got {self.min_tokens!r}")
        if self.max_tokens is not None and self.min_tokens > self.max_tokens:
            raise ValueError(
                f"min_tokens ({self.min_tokens}) must be <= max_tokens ({self.max_tokens})"
            )
        if not is_int(self.top_k) or self.top_k < -1:
            raise ValueError(f"top_k must be -1, 0 (off) or a positive int, got {self.top_k!r}")
        if self.top_k == -1:
            object.__setattr__(self, "top_k", 0)
        if self.seed is not None and not is_int(self.seed):
            raise ValueError(f"seed must be an int or None, got {self.seed!r}")
        if self.logprobs is not None and (not is_int(self.logprobs) or self.logprobs < 0):
            raise ValueError(f"logprobs must be an int >= 0 or None, got {self.logprobs!r}")
        budget = self.thinking_token_budget
        if budget is not None and (not is_int(budget) or budget < 0):
            raise ValueError(f"thinking_token_budget must be an int >= 0 or None, got {budget!r}")

    def _check_floats(self) -> None:
        checks = [
            ("temperature", self.temperature >= 0.0, "must be >= 0"),
            ("top_p", 0.0 < self.top_p <= 1.0, "must be in (0, 1]"),
            ("min_p", 0.0 <= self.min_p <= 1.0, "must be in [0, 1]"),
            ("presence_penalty", -2.0 <= self.presence_penalty <= 2.0, "must be in [-2, 2]"),
            ("frequency_penalty", -2.0 <= self.frequency_penalty <= 2.0, "must be in [-2, 2]"),
            ("repetition_penalty", self.repetition_penalty > 0.0, "must be > 0"),
        ]
        for name, ok, rule in checks:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
                raise ValueError(f"{name} must be a number, got {value!r}")
            if not ok:
                raise ValueError(f"{name} {rule}, got {value!r}")

    def _normalize_lists(self) -> None:
        stop = self.stop
        if stop is None:
            stop = []
        elif isinstance(stop, str):
            stop = [stop]
        if not isinstance(stop, Sequence) or not all(isinstance(s, str) and s for s in stop):
            raise ValueError(f"stop must be a str or a list of non-empty str, got {self.stop!r}")
        object.__setattr__(self, "stop", list(stop))
        ids = self.stop_token_ids or []
        if not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in ids):
            raise ValueError(f"stop_token_ids must be a list of ints >= 0, got {ids!r}")
        object.__setattr__(self, "stop_token_ids", list(ids))
        if self.logit_bias is not None:
            if not isinstance(self.logit_bias, Mapping):
                raise ValueError(f"logit_bias must be a dict, got {self.logit_bias!r}")
            bias: dict[int, float] = {}
            for key, value in self.logit_bias.items():
                try:
                    token, amount = int(key), float(value)
                except (TypeError, ValueError):
                    raise ValueError(
                        f"logit_bias entries must be int: float, got {key!r}: {value!r}"
                    ) from None
                if token < 0 or not -100.0 <= amount <= 100.0:
                    raise ValueError(f"logit_bias[{key!r}] = {value!r} is out of range")
                bias[token] = amount
            object.__setattr__(self, "logit_bias", bias)

    @property
    def greedy(self) -> bool:
        return self.temperature < _GREEDY_EPS

    @property
    def has_penalties(self) -> bool:
        return (
            self.presence_penalty != 0.0
            or self.frequency_penalty != 0.0
            or self.repetition_penalty != 1.0
        )

    def check_vocab(self, vocab_size: int) -> None:
        """Token ids in the params must fit the model's vocabulary."""
        for token in self.stop_token_ids or []:
            if token >= vocab_size:
                raise ValueError(f"stop_token_ids has {token}, outside the vocab ({vocab_size})")
        for token in self.logit_bias or {}:
            if token >= vocab_size:
                raise ValueError(f"logit_bias has token {token}, outside the vocab ({vocab_size})")
