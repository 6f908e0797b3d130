"""A GGUF file → the native Llama-family decoder, its quantized projections kept quantized.

Dense Llama, Mistral, Qwen2 and Qwen3 files are read here with `gguf.GGUFReader` (the config
through transformers' GGUF metadata parser). The projections (q, k, v, o, gate, up, down) of
types Q4_0, Q4_1, Q4_K and Q8_0 become `QuantLinear`s (quant_linear.py: int4 codes, no float
copy) on a CPU computing in bf16 (torch's int4 kernel) and on a GPU in any dtype (the Triton
kernel of kernels/int4_matmul.py); every other tensor, and every tensor on a CPU computing in
float32 or with `THINKGATE_GGUF_DEQUANTIZE=1`, is dequantized exactly (gguf_blocks.py) and
loaded like a safetensors weight. A 4-bit token embedding (Q4_0, Q4_1, Q4_K) stays 4-bit
too and serves as the tied lm_head (`QuantEmbedding`, layers/quant_embedding.py); a Q8_0 one is
dequantized once, at load.

llama.cpp stores a "llama" file's q and k rows permuted (its RoPE pairs neighbours); the rows
are put back in Hugging Face order, quantized or not (rows are independent in every format).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import torch
from thinkgate.engine.model.layers.gguf_blocks import PACKED_TYPES, Int4Groups, dequantize, unpack
from thinkgate.engine.model.layers.quant_embedding import QuantEmbedding, cpu_layout_ok
from thinkgate.engine.model.layers.quant_linear import QuantLinear, int4_backend
from thinkgate.engine.model.llama import (
    ArchConfig,
    LlamaFamilyForCausalLM,
    hf_name_to_ours,
    materialize,
    rope_inv_freq,
)
from torch import nn

logger = logging.getLogger(__name__)

DENSE_ARCHITECTURES = (
    "LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM",
)
DEQUANTIZE_ENV = "THINKGATE_GGUF_DEQUANTIZE"  # "1": every tensor dequantized (the old path)

_TOP = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
_LAYER = {
    "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_SKIPPED = ("rope_freqs.weight",)  # llama3 RoPE factors: config.json's rope_scaling has them
_PROJECTIONS = ("qkv", "o", "gate_up", "down")
_PART_ORDER = {"qkv": ("q", "k", "v"), "gate_up": ("gate", "up")}


def gguf_hf_config(path: Path, reader: Any) -> dict[str, Any]:
    """The Hugging Face config of a GGUF file: transformers' reading of its metadata, with
    `head_dim` from `attention.key_length` where the file has one (transformers 5 skips it for
    qwen2/qwen3 files and keeps its default of 128)."""
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    config = AutoConfig.from_pretrained(str(path.parent), gguf_file=path.name).to_dict()
    if not config.get("architectures"):
        name = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(config.get("model_type", ""))
        config["architectures"] = [name] if name else None
    key_length = _field(reader, f"{_field(reader, 'general.architecture')}.attention.key_length")
    if key_length is not None:
        config["head_dim"] = int(key_length)
    return config


def _field(reader: Any, key: str) -> Any:
    """A scalar or string metadata value of the file, or None."""
    field = reader.fields.get(key)
    if field is None or not field.data:
        return None
    value = field.parts[field.data[0]]
    return bytes(value).decode() if value.dtype == "uint8" else value[0]


def open_gguf(path: Path) -> Any:
    """The file's `gguf.GGUFReader` (parsing its metadata takes seconds for a big vocabulary)."""
    import gguf

    return gguf.GGUFReader(str(path))


def reads_natively(reader: Any, hf_config: dict[str, Any]) -> bool:
    """Whether this loader reads the file: a dense native architecture (no expert tensors)."""
    arch = (hf_config.get("architectures") or [None])[0]
    return arch in DENSE_ARCHITECTURES and not any("_exps" in t.name for t in reader.tensors)


def hf_name(gguf_name: str) -> str | None:
    """A GGUF tensor name → its Hugging Face name (None: not a weight we load)."""
    if gguf_name in _SKIPPED:
        return None
    base, _, kind = gguf_name.rpartition(".")
    if base in _TOP:
        return f"{_TOP[base]}.{kind}"
    parts = base.split(".")
    if len(parts) == 3 and parts[0] == "blk" and parts[2] in _LAYER:
        return f"model.layers.{parts[1]}.{_LAYER[parts[2]]}.{kind}"
    raise ValueError(f"GGUF tensor {gguf_name!r} is not a weight of a dense Llama-family model")


def _unpermute_index(rows: int, heads: int) -> torch.Tensor:
    """Row order undoing llama.cpp's q/k permutation (per head: pairs → halves)."""
    return torch.arange(rows).view(heads, 2, rows // heads // 2).transpose(1, 2).reshape(-1)


class _Tensors:
    """The file's tensors by Hugging Face name: GGUF type, shape ((out, in) or (n,)), values."""

    def __init__(self, reader: Any, arch: ArchConfig) -> None:
        self.arch = arch
        self.permuted = _field(reader, "general.architecture") == "llama"
        self.by_name = {}
        for t in reader.tensors:
            name = hf_name(t.name)
            if name is not None:
                self.by_name[name] = t

    def qtype(self, name: str) -> str:
        return self.by_name[name].tensor_type.name

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(int(n) for n in reversed(self.by_name[name].shape.tolist()))

    def _order(self, name: str, rows: int) -> torch.Tensor | None:
        """The row order undoing llama.cpp's q/k permutation, where `name` has one."""
        heads = {"q_proj": self.arch.num_heads, "k_proj": self.arch.num_kv_heads}
        module = name.split(".")[-2]
        if not self.permuted or module not in heads:
            return None
        return torch.arange(rows).view(heads[module], -1, 2).transpose(1, 2).reshape(-1)

    def dense(self, name: str) -> torch.Tensor:
        """The tensor in float32, rows in Hugging Face order."""
        shape = self.shape(name)
        values = dequantize(self.by_name[name].data, self.qtype(name), shape)
        order = self._order(name, shape[0])
        return values if order is None else values[order]

    def part(self, name: str) -> Int4Groups | torch.Tensor:
        """A projection's weight: `Int4Groups` for a packed type, else float32."""
        qtype, shape = self.qtype(name), self.shape(name)
        if qtype not in PACKED_TYPES:
            return self.dense(name)
        groups = unpack(self.by_name[name].data, qtype, (shape[0], shape[1]))
        order = self._order(name, shape[0])
        return groups if order is None else groups.rows(order)


def load_gguf_model(path: Path, reader: Any, arch: ArchConfig, dtype: torch.dtype,
                    device: str) -> LlamaFamilyForCausalLM:
    """The native model of a dense GGUF file (`reader` is its `open_gguf`); projections int4
    where `int4_backend` names a kernel (torch's CPU int4 kernel, or the Triton one on CUDA)."""
    tensors = _Tensors(reader, arch)
    backend = int4_backend(device, dtype)
    pack = backend is not None and os.environ.get(DEQUANTIZE_ENV, "") != "1"
    with torch.device("meta"):
        net = LlamaFamilyForCausalLM(arch)
    quantized = _quantized_modules(tensors) if pack else {}
    for module in quantized:
        parent, child = module.rsplit(".", 1)
        setattr(net.get_submodule(parent), child, nn.Identity())  # not allocated in float
    embed = _EMBED if pack and _packs_embedding(tensors, backend) else None
    if embed:
        net.embed = nn.Identity()
    net = materialize(net, device, dtype)
    net.inv_freq = rope_inv_freq(arch).float().to(device)  # buffers are not in checkpoints
    for module, names in quantized.items():
        parent, child = module.rsplit(".", 1)
        bias = getattr(arch, _BIAS[child])
        parts = [tensors.part(name) for name in names]
        layer = QuantLinear(parts, bias, dtype, backend or "cpu").to(device)
        setattr(net.get_submodule(parent), child, layer)
    skip = {name for names in quantized.values() for name in names}
    if embed:
        net.embed = QuantEmbedding(tensors.part(embed), dtype, backend or "cpu").to(device)
        skip.add(embed)
    net.load_weights((name, tensors.dense(name)) for name in tensors.by_name if name not in skip)
    net.init_rope_cache(arch.max_position_embeddings)
    _log_memory(path, net, dtype)
    return net


_EMBED = "model.embed_tokens.weight"
_EMBED_TYPES = ("Q4_0", "Q4_1", "Q4_K")  # one int4 matrix (Q8_0's two: layers/quant_embedding.py)


def _packs_embedding(tensors: _Tensors, backend: str | None) -> bool:
    """Whether the token embedding stays 4-bit (`QuantEmbedding`): a 4-bit type and a layout
    the backend reads rows from (torch's CPU layout checked, rows in blocks of 64)."""
    if _EMBED not in tensors.by_name or tensors.qtype(_EMBED) not in _EMBED_TYPES:
        return False
    if backend == "cpu":
        return tensors.shape(_EMBED)[0] % 64 == 0 and cpu_layout_ok()
    return backend == "triton"


_BIAS = {"qkv": "attention_bias", "o": "o_proj_bias", "gate_up": "mlp_bias", "down": "mlp_bias"}


def _quantized_modules(tensors: _Tensors) -> dict[str, list[str]]:
    """Projection module ("layers.3.qkv") → its weights' HF names in fused order, for every
    projection with at least one part of a packed type."""
    found: dict[str, dict[str | None, str]] = {}
    for name in tensors.by_name:
        if not name.endswith(".weight") or len(tensors.shape(name)) != 2:
            continue
        for target, part in hf_name_to_ours(name, tensors.arch):
            module = (target or "").removesuffix(".weight")
            if module.rsplit(".", 1)[-1] in _PROJECTIONS:
                found.setdefault(module, {})[part] = name
    out = {}
    for module, parts in found.items():
        order = _PART_ORDER.get(module.rsplit(".", 1)[-1], (None,))
        if set(parts) != set(order):
            raise ValueError(f"GGUF file has only {sorted(map(str, parts))} of {order} "
                             f"for {module!r}")
        names = [parts[p] for p in order]
        if any(tensors.qtype(n) in PACKED_TYPES for n in names):
            out[module] = names
    return out


def _log_memory(path: Path, net: nn.Module, dtype: torch.dtype) -> None:
    quant = [m for m in net.modules() if isinstance(m, (QuantLinear, QuantEmbedding))]
    packed = sum(m.nbytes for m in quant)
    as_bf16 = sum(m.in_features * m.out_features * 2 if isinstance(m, QuantLinear)
                  else m.num_embeddings * m.embedding_dim * 2 for m in quant)
    dense = sum(p.numel() * p.element_size() for p in net.parameters())
    if quant:
        logger.info(
            "%s: %d tensors kept quantized in %.1f MiB (%.1f MiB in bf16: %.0f%%); "
            "other weights %.1f MiB in %s; all %.1f MiB, %.0f%% of the model in bf16",
            path.name, len(quant), packed / 2**20, as_bf16 / 2**20, 100 * packed / as_bf16,
            dense / 2**20, dtype, (packed + dense) / 2**20,
            100 * (packed + dense) / (as_bf16 + dense * 2 / dtype.itemsize),
        )
    else:
        logger.info("%s: every weight dequantized, %.1f MiB in %s", path.name,
                    dense / 2**20, dtype)
