"""The request's sampling fields → `SamplingParams` (the part both endpoints share)."""

from __future__ import annotations

from typing import Any

from thinkgate.api.errors import APIError
from thinkgate.api.protocol import StructuredOutputs, _SamplingFields
from thinkgate.engine.sampling_params import SamplingParams, StructuredOutputsParams


def structured_from_request(so: StructuredOutputs | None) -> StructuredOutputsParams | None:
    if so is None:
        return None
    fields = so.model_dump(by_alias=True, exclude_none=True)
    try:
        return StructuredOutputsParams(**fields)
    except ValueError as exc:
        raise APIError(str(exc), param="structured_outputs") from exc


def sampling_kwargs(req: _SamplingFields, max_tokens: int, logprobs: int | None) -> dict[str, Any]:
    """SamplingParams keyword arguments from the fields both endpoints share."""
    kwargs: dict[str, Any] = {
        "n": req.n,
        "max_tokens": max_tokens,
        "min_tokens": min(req.min_tokens, max_tokens),
        "seed": req.seed,
        "stop": req.stop,
        "stop_token_ids": req.stop_token_ids,
        "presence_penalty": req.presence_penalty,
        "frequency_penalty": req.frequency_penalty,
        "ignore_eos": req.ignore_eos,
        "skip_special_tokens": req.skip_special_tokens,
        "include_stop_str_in_output": req.include_stop_str_in_output,
        "logprobs": logprobs,
        "structured_outputs": structured_from_request(req.structured_outputs),
    }
    optional = {"temperature": req.temperature, "top_p": req.top_p, "top_k": req.top_k,
                "min_p": req.min_p, "repetition_penalty": req.repetition_penalty}
    kwargs.update({k: v for k, v in optional.items() if v is not None})
    if req.logit_bias:
        try:
            kwargs["logit_bias"] = {int(k): float(v) for k, v in req.logit_bias.items()}
        except ValueError as exc:
            raise APIError(f"logit_bias keys must be token ids, got {req.logit_bias}",
                           param="logit_bias") from exc
    return kwargs


def build_sampling_params(kwargs: dict[str, Any], vocab_size: int) -> SamplingParams:
    """Construct and check the params; a bad value is a 400 naming the field."""
    try:
        params = SamplingParams(**kwargs)
        params.check_vocab(vocab_size)
    except ValueError as exc:
        message = str(exc)
        param = message.split(" ", 1)[0] if message.split(" ", 1)[0] in kwargs else None
        raise APIError(message, param=param) from exc
    return params
