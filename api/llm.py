"""`LLM`: the offline Python API (vLLM's names). `LLM().generate(...)` runs the demo model."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Sequence
from typing import Any

from thinkgate.engine.config import EngineConfig
from thinkgate.engine.core.llm_engine import LLMEngine
from thinkgate.engine.core.requests import PromptType
from thinkgate.engine.model.model_loader import resolve_model_path
from thinkgate.engine.outputs import RequestOutput
from thinkgate.engine.sampling_params import RequestOutputKind, SamplingParams
from thinkgate.parsers.auto import AUTO, resolve_auto_parsers

logger = logging.getLogger(__name__)

_PROGRESS_MIN_PROMPTS = 8  # fewer prompts than this: no progress bar even with use_tqdm


class LLM:
    """A model plus its engine. `model=None` loads the bundled demo model."""

    def __init__(
        self,
        model: str | None = None,
        tokenizer: str | None = None,
        dtype: str = "auto",
        max_model_len: int | None = None,
        max_num_seqs: int = 256,
        seed: int = 0,
        device: str = "auto",
        max_num_batched_tokens: int | None = None,
        block_size: int = 16,
        num_kv_blocks: int | None = None,
        kv_cache_memory_bytes: int | None = None,
        gpu_memory_utilization: float = 0.9,
        kv_layout: str = "auto",
        enforce_eager: bool | None = None,
        attention_backend: str | None = None,
        jump_forward: bool = True,
        enable_prefix_caching: bool = True,
        **kwargs: Any,
    ) -> None:
        unknown = set(kwargs) - {"reasoning_parser", "tool_call_parser", "trust_remote_code",
                                 "bound_json_numbers", "complete_before_max_tokens",
                                 "structured_outputs_compile_timeout",
                                 "structured_outputs_backend",
                                 "structured_outputs_disable_additional_properties",
                                 "speculative_config",
                                 "exclude_tools_when_tool_choice_none"}
        if unknown:
            raise ValueError(f"unknown LLM arguments: {sorted(unknown)}")
        if model is None:  # the demo model thinks in qwen3's format and calls tools as hermes
            kwargs = {"reasoning_parser": "qwen3", "tool_call_parser": "hermes", **kwargs}
        else:  # a model folder: names read off its chat template unless given
            kwargs = {"reasoning_parser": AUTO, "tool_call_parser": AUTO, **kwargs}
        if AUTO in (kwargs["reasoning_parser"], kwargs["tool_call_parser"]):
            kwargs["tool_call_parser"], kwargs["reasoning_parser"] = resolve_auto_parsers(
                kwargs["tool_call_parser"], kwargs["reasoning_parser"],
                tokenizer or str(resolve_model_path(model)[0]))
        self.extra_args = dict(kwargs)  # reasoning_parser, tool_call_parser (api/chat.py)
        config = EngineConfig(
            model=model,
            tokenizer=tokenizer,
            dtype=dtype,
            device=device,
            seed=seed,
            max_model_len=max_model_len,
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens,
            block_size=block_size,
            num_kv_blocks=num_kv_blocks,
            kv_cache_memory_bytes=kv_cache_memory_bytes,
            gpu_memory_utilization=gpu_memory_utilization,
            kv_layout=kv_layout,
            enforce_eager=enforce_eager,
            attention_backend=attention_backend,
            jump_forward=jump_forward,
            enable_prefix_caching=enable_prefix_caching,
            trust_remote_code=bool(kwargs.get("trust_remote_code", False)),
            reasoning_parser=kwargs.get("reasoning_parser"),
            bound_json_numbers=kwargs.pop("bound_json_numbers", True),
            complete_before_max_tokens=kwargs.pop("complete_before_max_tokens", False),
            structured_outputs_compile_timeout=kwargs.pop("structured_outputs_compile_timeout",
                                                          30.0),
            structured_outputs_backend=kwargs.pop("structured_outputs_backend", "auto"),
            structured_outputs_disable_additional_properties=kwargs.pop(
                "structured_outputs_disable_additional_properties", False),
            speculative_config=kwargs.pop("speculative_config", None),
        )
        self.llm_engine = LLMEngine(config)
        self._counter = itertools.count()

    def close(self) -> None:
        """Free the model's weights, KV cache and threads now (requests still running are
        aborted); the object cannot generate afterwards. `with LLM(...) as llm:` calls it."""
        self.llm_engine.close()

    def __enter__(self) -> LLM:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def get_tokenizer(self) -> Any:
        return self.llm_engine.tokenizer

    def reset_prefix_cache(self) -> None:
        """Forget every cached prompt prefix (blocks no running request holds)."""
        self.llm_engine.reset_prefix_cache()

    def chat(
        self, messages: Any, sampling_params: Any = None, use_tqdm: bool = True, **kwargs: Any
    ) -> list[Any]:
        """Chat turns -> `ChatOutput`s (`.message`, `.finish_reason`); see `api/chat.py`.

        kwargs: tools, tool_choice, chat_template_kwargs, response_format, chat_template,
        add_generation_prompt, reasoning_effort, thinking_token_budget, parallel_tool_calls."""
        from thinkgate.api.chat import llm_chat

        return llm_chat(self, messages, sampling_params, use_tqdm, **kwargs)

    def generate(
        self,
        prompts: PromptType | Sequence[PromptType],
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
        use_tqdm: bool = True,
    ) -> list[RequestOutput]:
        """Run every prompt (text or token ids) to completion; outputs in prompt order."""
        prompt_list = _as_prompt_list(prompts)
        params_list = _as_params_list(sampling_params, len(prompt_list))
        ids = []
        try:
            for prompt, params in zip(prompt_list, params_list):
                request_id = str(next(self._counter))
                final = _final_only(params)
                self.llm_engine.add_request(request_id, prompt, final)
                ids.append(request_id)
            return self._run(ids, use_tqdm)
        except BaseException:
            for request_id in ids:
                self.llm_engine.abort_request(request_id)
            raise

    def _run(self, request_ids: list[str], use_tqdm: bool) -> list[RequestOutput]:
        results: dict[str, RequestOutput] = {}
        bar = None
        if use_tqdm and len(request_ids) >= _PROGRESS_MIN_PROMPTS:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(request_ids), desc="Processed prompts", dynamic_ncols=True)
        engine = self.llm_engine
        while engine.has_unfinished_requests():
            outputs = engine.step()
            rejected = engine.take_rejected()  # a grammar failed to compile (or in time)
            if rejected:
                raise rejected[0][1]
            for output in outputs:
                if output.finished:
                    results[output.request_id] = output
                    if bar is not None:
                        bar.update(1)
        if bar is not None:
            bar.close()
        return [results[request_id] for request_id in request_ids]


def _as_prompt_list(prompts: PromptType | Sequence[PromptType]) -> list[PromptType]:
    if isinstance(prompts, str | dict):
        return [prompts]
    if isinstance(prompts, list | tuple) and prompts and all(isinstance(t, int) for t in prompts):
        return [list(prompts)]  # one prompt given as token ids
    if not isinstance(prompts, list | tuple):
        raise ValueError(
            f"prompts must be a str, token ids, a prompt dict, or a list of them; "
            f"got {type(prompts).__name__}"
        )
    return list(prompts)


def _as_params_list(
    params: SamplingParams | Sequence[SamplingParams] | None, count: int
) -> list[SamplingParams]:
    if params is None:
        return [SamplingParams()] * count
    if isinstance(params, SamplingParams):
        return [params] * count
    params = list(params)
    if len(params) != count:
        raise ValueError(f"sampling_params has {len(params)} entries for {count} prompts")
    return params


def _final_only(params: SamplingParams) -> SamplingParams:
    if params.output_kind is RequestOutputKind.FINAL_ONLY:
        return params
    import dataclasses

    return dataclasses.replace(params, output_kind=RequestOutputKind.FINAL_ONLY)
