"""Engine configuration: one frozen dataclass, validated at construction."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

_DTYPES = {
    "auto": None,
    "float32": torch.float32,
    "float": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "half": torch.float16,
    "fp16": torch.float16,
}


def cpu_has_native_bf16() -> bool:
    """True when this CPU runs bf16 matmuls natively (AVX512-BF16 or AMX) and oneDNN can use it.

    Asks torch first (it reads CPUID), then /proc/cpuinfo's flags where torch has no probe.
    """
    if not torch.backends.mkldnn.is_available():
        return False
    mkldnn_bf16 = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
    if mkldnn_bf16 is not None and not mkldnn_bf16():
        return False
    probes = [getattr(torch.cpu, name, None) for name in _BF16_PROBES]
    if any(probe is not None for probe in probes):
        return any(probe() for probe in probes if probe is not None)
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return bool(_BF16_FLAGS & set(cpuinfo.split()))


_BF16_PROBES = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
_BF16_FLAGS = {"avx512_bf16", "amx_bf16"}


def resolve_dtype(
    dtype: str | torch.dtype,
    checkpoint_dtype: str | None,
    device: str,
    native_bf16: bool | None = None,
) -> torch.dtype:
    """The dtype to compute in. An explicit `dtype` wins; `auto` takes the checkpoint's dtype on
    GPU; on CPU a half-precision checkpoint (bf16 or fp16) runs in bf16 where the CPU has native
    bf16 (`native_bf16`, probed when None) and in float32 elsewhere; float32 stays float32."""
    if isinstance(dtype, torch.dtype):
        if dtype not in (torch.float32, torch.bfloat16, torch.float16):
            raise ValueError(f"dtype {dtype} is not supported (float32, bfloat16, float16)")
        return dtype
    if dtype not in _DTYPES:
        raise ValueError(f"dtype {dtype!r} is not supported; use one of {sorted(_DTYPES)}")
    if dtype != "auto":
        return _DTYPES[dtype]  # type: ignore[return-value]
    stored = _DTYPES.get(str(checkpoint_dtype).replace("torch.", "")) or torch.float32
    if device != "cpu" or stored == torch.float32:
        return stored
    if native_bf16 is None:
        native_bf16 = cpu_has_native_bf16()
    return torch.bfloat16 if native_bf16 else torch.float32


ATTENTION_BACKENDS = (None, "TRITON_ATTN", "TORCH_SDPA")
# the structured-output room's choices (engine/structured/backend.py's BACKENDS; a test keeps
# the two equal): checked here so a bad name fails before anything loads
STRUCTURED_OUTPUTS_BACKENDS = ("auto", "xgrammar", "guidance")
SPECULATIVE_METHODS = ("ngram", "suffix")
MAX_SPECULATIVE_TOKENS = 16
# vLLM's suffix-decoding fields and defaults (read by the `suffix` method only)
SUFFIX_DEFAULTS = {"suffix_decoding_max_tree_depth": 24,
                   "suffix_decoding_max_cached_requests": 10000,
                   "suffix_decoding_max_spec_factor": 1.0,
                   "suffix_decoding_min_token_prob": 0.1}


@dataclass(frozen=True)
class SpeculativeConfig:
    """vLLM's `speculative_config` fields for the `ngram` and `suffix` methods."""

    method: str
    num_speculative_tokens: int
    prompt_lookup_max: int
    prompt_lookup_min: int
    suffix_decoding_max_tree_depth: int = 24
    suffix_decoding_max_cached_requests: int = 10000
    suffix_decoding_max_spec_factor: float = 1.0
    suffix_decoding_min_token_prob: float = 0.1

    @classmethod
    def parse(cls, value: Any) -> SpeculativeConfig | None:
        """From a dict (or its JSON text); None stays None. ValueError names the bad field."""
        if value is None:
            return None
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as exc:
                raise ValueError(f"speculative_config is not JSON: {exc}") from None
        if not isinstance(value, dict):
            raise ValueError(f"speculative_config must be an object, got {value!r}")
        unknown = set(value) - {"method", "num_speculative_tokens", "prompt_lookup_max",
                                "prompt_lookup_min", *SUFFIX_DEFAULTS}
        if unknown:
            raise ValueError(f"speculative_config: unknown fields {sorted(unknown)}")
        method = value.get("method", "ngram")
        method = "ngram" if method == "[ngram]" else method  # vLLM's older spelling
        if method not in SPECULATIVE_METHODS:
            raise ValueError(f"speculative_config.method {method!r} is not supported; this "
                             f"engine drafts with {list(SPECULATIVE_METHODS)}")
        suffix = {name: value.get(name, default) for name, default in SUFFIX_DEFAULTS.items()}
        for name, least in (("suffix_decoding_max_tree_depth", 1),
                            ("suffix_decoding_max_cached_requests", 0)):
            v = suffix[name]
            if isinstance(v, bool) or not isinstance(v, int) or v < least:
                raise ValueError(f"speculative_config.{name} must be an int >= {least}, "
                                 f"got {v!r}")
        for name, low, high in (("suffix_decoding_max_spec_factor", 0.0, None),
                                ("suffix_decoding_min_token_prob", 0.0, 1.0)):
            v = suffix[name]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (
                    low <= v and (high is None or v <= high)):
                raise ValueError(f"speculative_config.{name} must be a number in "
                                 f"[{low}, {high if high is not None else 'inf'}], got {v!r}")
        k = value.get("num_speculative_tokens")
        if k is None and method == "suffix":  # vLLM: the tree depth, here at most the cap
            k = min(suffix["suffix_decoding_max_tree_depth"], MAX_SPECULATIVE_TOKENS)
        # vLLM's defaults: 5 and 5 when neither is given, else the one given for both
        high, low = value.get("prompt_lookup_max"), value.get("prompt_lookup_min")
        if high is None and low is None:
            high = low = 5
        high = low if high is None else high
        low = high if low is None else low
        for name, v in (("num_speculative_tokens", k), ("prompt_lookup_max", high),
                        ("prompt_lookup_min", low)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"speculative_config.{name} must be an int >= 1, got {v!r}")
        if k > MAX_SPECULATIVE_TOKENS:
            raise ValueError(f"speculative_config.num_speculative_tokens must be at most "
                             f"{MAX_SPECULATIVE_TOKENS}, got {k}")
        if low > high:
            raise ValueError(f"speculative_config.prompt_lookup_min ({low}) exceeds "
                             f"prompt_lookup_max ({high})")
        return cls(method, k, high, low, **suffix)


@dataclass(frozen=True)
class EngineConfig:
    """Everything the engine needs to start; `model=None` means the bundled demo model."""

    model: str | None = None
    tokenizer: str | None = None
    dtype: str = "auto"
    device: str = "auto"
    seed: int = 0
    max_model_len: int | None = None
    max_num_seqs: int = 256
    max_num_batched_tokens: int | None = None
    block_size: int = 16
    num_kv_blocks: int | None = None
    kv_cache_memory_bytes: int | None = None  # default: 90% of free GPU memory, 512 MiB on CPU
    gpu_memory_utilization: float = 0.9
    kv_layout: str = "auto"  # "paged" | "contiguous" (CPU fast path) | "auto"
    trust_remote_code: bool = False
    reasoning_parser: str | None = None  # its end-of-thinking marker gates the grammar (issue 7)
    # decode steps a few new arrivals may wait to be prefilled together (see scheduler.py)
    prefill_delay_steps: int = 0
    # "TRITON_ATTN": paged Triton kernels read K/V in place; "TORCH_SDPA": gather + SDPA;
    # None: TRITON_ATTN on CUDA with the paged layout, TORCH_SDPA elsewhere (vLLM's names)
    attention_backend: str | None = None
    # vLLM's name: no torch.compile and no CUDA graphs (engine/model/compiled_decode.py); None: read
    # $THINKGATE_ENFORCE_EAGER ("1" = eager; the test suite sets it), else False
    enforce_eager: bool | None = None
    # write grammar-forced text in one forward (engine/structured/jump_forward.py); per request:
    # StructuredOutputsParams.jump_forward
    jump_forward: bool = True
    # structured outputs' defaults for requests that leave them None (sampling_params.py)
    bound_json_numbers: bool = True
    complete_before_max_tokens: bool = False
    # reuse the K/V of cached prompt prefixes (block_manager.py); vLLM's name and default
    enable_prefix_caching: bool = True
    # seconds a request's grammar may compile (off the step loop) before it fails alone
    structured_outputs_compile_timeout: float = 30.0
    # which grammar backend compiles constraints (vLLM's names): auto picks per constraint
    # (engine/structured/backend.py), xgrammar or guidance (llguidance) alone
    structured_outputs_backend: str = "auto"
    # vLLM's guidance option: objects take no properties beyond those their schema lists
    structured_outputs_disable_additional_properties: bool = False
    # vLLM's name: {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_max": ...,
    # "prompt_lookup_min": ...} (or its JSON text) drafts k tokens per step (speculative.py)
    speculative_config: dict[str, Any] | str | None = None

    def __post_init__(self) -> None:
        if self.dtype not in _DTYPES and not isinstance(self.dtype, torch.dtype):
            raise ValueError(f"dtype {self.dtype!r} is not supported; use one of {sorted(_DTYPES)}")
        if self.device not in ("auto", "cpu") and not str(self.device).startswith("cuda"):
            raise ValueError(f"device must be 'auto', 'cpu' or 'cuda[:N]', got {self.device!r}")
        positive = {
            "max_num_seqs": self.max_num_seqs,
            "block_size": self.block_size,
            "max_model_len": self.max_model_len,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "num_kv_blocks": self.num_kv_blocks,
            "kv_cache_memory_bytes": self.kv_cache_memory_bytes,
        }
        for name, value in positive.items():
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ValueError(
                f"gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}"
            )
        if self.kv_layout not in ("auto", "paged", "contiguous"):
            raise ValueError(
                f"kv_layout must be 'auto', 'paged' or 'contiguous', got {self.kv_layout!r}"
            )
        if not isinstance(self.prefill_delay_steps, int) or self.prefill_delay_steps < 0:
            raise ValueError(
                f"prefill_delay_steps must be an int >= 0, got {self.prefill_delay_steps!r}")
        if self.attention_backend not in ATTENTION_BACKENDS:
            raise ValueError(f"attention_backend must be one of {ATTENTION_BACKENDS}, got "
                             f"{self.attention_backend!r}")
        if self.enforce_eager is None:
            env = os.environ.get("THINKGATE_ENFORCE_EAGER", "").strip().lower()
            object.__setattr__(self, "enforce_eager", env not in ("", "0", "false", "no"))
        if not isinstance(self.enforce_eager, bool):
            raise ValueError(f"enforce_eager must be a bool, got {self.enforce_eager!r}")
        if self.structured_outputs_backend not in STRUCTURED_OUTPUTS_BACKENDS:
            raise ValueError("structured_outputs_backend must be one of "
                             f"{', '.join(STRUCTURED_OUTPUTS_BACKENDS)}; "
                             f"got {self.structured_outputs_backend!r}")
        for name in ("bound_json_numbers", "complete_before_max_tokens",
                     "structured_outputs_disable_additional_properties"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be a bool, got {getattr(self, name)!r}")
        timeout = self.structured_outputs_compile_timeout
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
            raise ValueError(
                f"structured_outputs_compile_timeout must be a number > 0, got {timeout!r}")
        if not isinstance(self.enable_prefix_caching, bool):
            raise ValueError(
                f"enable_prefix_caching must be a bool, got {self.enable_prefix_caching!r}")
        SpeculativeConfig.parse(self.speculative_config)  # ValueError names the bad field
        if not isinstance(self.seed, int):
            raise ValueError(f"seed must be an int, got {self.seed!r}")

    @property
    def resolved_device(self) -> str:
        if self.device == "auto":
            return "cuda" if torch.cuda.is_available() else "cpu"
        return self.device
