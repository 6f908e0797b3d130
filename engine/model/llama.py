"""Native decoder for the Llama family: Llama 3.x, Mistral, Qwen2/2.5 and Qwen3, and their
mixture-of-experts kin Mixtral, Qwen2-MoE and Qwen3-MoE (moe.py: the sparse feed-forward).

They differ only in small switches read from config.json: q/k/v biases (Qwen2), per-head
RMSNorm on q and k (Qwen3), RoPE scaling (Llama 3.1 "llama3", "linear"), tied embeddings, and
which layers route tokens to experts.
q/k/v and gate/up are stored fused (one matmul each); `load_weights` maps Hugging Face names.
Attention reads and writes the paged KV cache through `AttentionMetadata` (see kv_cache.py).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from thinkgate.engine.kv.kv_cache import AttentionMetadata, paged_attention
from thinkgate.engine.model.layers.moe import (
    MOE_ARCHITECTURES,
    MoeSpec,
    SparseMoe,
    fuse_experts,
    moe_weight,
)
from thinkgate.engine.model.layers.packed_linear import PackedLinear, linear, pack_linears
from torch import nn

ARCHITECTURES = (
    "LlamaForCausalLM",
    "MistralForCausalLM",
    "Qwen2ForCausalLM",
    "Qwen3ForCausalLM",
    *MOE_ARCHITECTURES,
)


@dataclass(frozen=True)
class ArchConfig:
    """The fields of config.json the native decoder uses."""

    architecture: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: dict[str, Any] | None
    max_position_embeddings: int
    tie_word_embeddings: bool
    attention_bias: bool
    o_proj_bias: bool
    mlp_bias: bool
    qk_norm: bool
    sliding_window: int | None
    moe: MoeSpec | None = None  # experts (moe.py); None: every layer dense

    @classmethod
    def from_hf(cls, cfg: dict[str, Any]) -> ArchConfig:
        arch = (cfg.get("architectures") or ["?"])[0]
        if arch not in ARCHITECTURES:
            raise ValueError(f"architecture {arch!r} has no native implementation")
        required = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers")
        missing = [key for key in (*required, "num_attention_heads") if key not in cfg]
        if missing:
            raise ValueError(f"config.json for {arch} lacks {missing}")
        rope = dict(cfg.get("rope_parameters") or {})
        scaling = cfg.get("rope_scaling") or rope or None
        theta = cfg.get("rope_theta", rope.get("rope_theta", 10000.0))
        heads = cfg["num_attention_heads"]
        is_qwen2 = arch in ("Qwen2ForCausalLM", "Qwen2MoeForCausalLM")
        window = None
        if cfg.get("sliding_window") and (
            arch in ("MistralForCausalLM", "MixtralForCausalLM") or cfg.get("use_sliding_window")
        ):
            window = int(cfg["sliding_window"])
        llama_bias = bool(cfg.get("attention_bias", False)) and not is_qwen2
        return cls(
            architecture=arch,
            vocab_size=cfg["vocab_size"],
            hidden_size=cfg["hidden_size"],
            intermediate_size=cfg["intermediate_size"],
            num_layers=cfg["num_hidden_layers"],
            num_heads=heads,
            num_kv_heads=cfg.get("num_key_value_heads") or heads,
            head_dim=cfg.get("head_dim") or cfg["hidden_size"] // heads,
            rms_norm_eps=cfg.get("rms_norm_eps", 1e-6),
            rope_theta=float(theta),
            rope_scaling=scaling,
            max_position_embeddings=cfg.get("max_position_embeddings", 4096),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            attention_bias=is_qwen2 or llama_bias or bool(cfg.get("attention_bias", False)),
            o_proj_bias=llama_bias,
            mlp_bias=bool(cfg.get("mlp_bias", False)),
            qk_norm=arch in ("Qwen3ForCausalLM", "Qwen3MoeForCausalLM"),
            sliding_window=window,
            moe=MoeSpec.from_hf(arch, cfg) if arch in MOE_ARCHITECTURES else None,
        )


def rope_inv_freq(cfg: ArchConfig) -> torch.Tensor:
    """Inverse frequencies (head_dim/2,) on the CPU, with Llama 3.1's or linear scaling when
    configured."""
    dim = cfg.head_dim
    steps = torch.arange(0, dim, 2, dtype=torch.float64, device="cpu")  # also inside a meta build
    inv_freq = 1.0 / (cfg.rope_theta ** (steps / dim))
    scaling = cfg.rope_scaling or {}
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind in (None, "default"):
        return inv_freq
    if kind == "linear":
        return inv_freq / float(scaling["factor"])
    if kind == "llama3":
        factor = float(scaling["factor"])
        low, high = float(scaling["low_freq_factor"]), float(scaling["high_freq_factor"])
        old_len = float(scaling["original_max_position_embeddings"])
        wavelen = 2 * math.pi / inv_freq
        smooth = (old_len / wavelen - low) / (high - low)
        scaled = torch.where(wavelen > old_len / low, inv_freq / factor, inv_freq)
        mid = (1 - smooth) * inv_freq / factor + smooth * inv_freq
        is_mid = (wavelen <= old_len / low) & (wavelen >= old_len / high)
        return torch.where(is_mid, mid, scaled)
    raise ValueError(f"rope_scaling type {kind!r} is not supported natively")


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return F.rms_norm(x, (x.shape[-1],), weight, eps)


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ArchConfig, index: int = 0) -> None:
        super().__init__()
        self.cfg = cfg
        h, d = cfg.hidden_size, cfg.head_dim
        self.q_size, self.kv_size = cfg.num_heads * d, cfg.num_kv_heads * d
        self.input_norm = nn.Parameter(torch.ones(h))
        self.post_norm = nn.Parameter(torch.ones(h))
        self.qkv = nn.Linear(h, self.q_size + 2 * self.kv_size, bias=cfg.attention_bias)
        self.o = nn.Linear(self.q_size, h, bias=cfg.o_proj_bias)
        # (num_heads + num_kv_heads, head_dim): q_norm rows then k_norm rows (Qwen3 only)
        self.qk_norm = (
            nn.Parameter(torch.ones(cfg.num_heads + cfg.num_kv_heads, d)) if cfg.qk_norm else None
        )
        # a sparse layer routes to experts (moe.py); a dense one has one SwiGLU MLP
        self.moe = SparseMoe(cfg.moe, h) if cfg.moe and cfg.moe.is_sparse(index) else None
        if self.moe is None:
            self.gate_up = nn.Linear(h, 2 * cfg.intermediate_size, bias=cfg.mlp_bias)
            self.down = nn.Linear(cfg.intermediate_size, h, bias=cfg.mlp_bias)

    def forward(
        self,
        x: torch.Tensor,  # (B, T, hidden)
        cos: torch.Tensor,  # (B, T, 1, head_dim)
        sin: torch.Tensor,  # its first half negated
        meta: AttentionMetadata,
        k_cache: torch.Tensor,
        v_cache: torch.Tensor,
    ) -> torch.Tensor:
        cfg = self.cfg
        b, t, _ = x.shape
        qkv = self.qkv(rms_norm(x, self.input_norm, cfg.rms_norm_eps))
        qk = qkv[..., : self.q_size + self.kv_size].view(b, t, -1, cfg.head_dim)
        v = qkv[..., self.q_size + self.kv_size :].view(b, t, cfg.num_kv_heads, cfg.head_dim)
        if self.qk_norm is not None:
            qk = F.rms_norm(qk, (cfg.head_dim,), eps=cfg.rms_norm_eps) * self.qk_norm
        half = cfg.head_dim // 2
        # rotate_half(x) * sin == cat(x2, x1) * cat(-sin1, sin2): the sign lives in the sin cache
        qk = torch.addcmul(qk * cos, torch.cat((qk[..., half:], qk[..., :half]), dim=-1), sin)
        q, k = qk[:, :, : cfg.num_heads], qk[:, :, cfg.num_heads :]
        attn = paged_attention(q, k, v, k_cache, v_cache, meta)  # (B, T, H * D)
        x = x + self.o(attn)
        h = rms_norm(x, self.post_norm, cfg.rms_norm_eps)
        if self.moe is not None:
            return x + self.moe(h)
        gate, up = self.gate_up(h).chunk(2, dim=-1)
        return x + self.down(F.silu(gate) * up)


def materialize(net: nn.Module, device: str | torch.device, dtype: torch.dtype) -> nn.Module:
    """`net.to_empty(device).to(dtype)` for a model built on the meta device, in one pass and
    without torch's meta `empty_like` (its shape logic imports sympy: ~0.7 s of start-up):
    every tensor allocated uninitialised, floating ones in `dtype`."""
    return net._apply(lambda t: torch.empty(
        t.shape, dtype=dtype if t.is_floating_point() else t.dtype, device=device))


class LlamaFamilyForCausalLM(nn.Module):
    """Embedding → decoder layers over the paged KV cache → final norm → lm_head.

    The loaders build it on the meta device and then load every weight, so nothing here draws
    random initial values (the embedding gets an empty table: `normal_` on meta tensors would
    import torch._dynamo, ~1.5 s of every engine's start-up)."""

    def __init__(self, cfg: ArchConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.hidden_size,
                                  _weight=torch.empty(cfg.vocab_size, cfg.hidden_size))
        self.layers = nn.ModuleList(DecoderLayer(cfg, i) for i in range(cfg.num_layers))
        self.norm = nn.Parameter(torch.ones(cfg.hidden_size))
        self.lm_head = (
            None
            if cfg.tie_word_embeddings
            else nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        )
        self.register_buffer("inv_freq", rope_inv_freq(cfg).float(), persistent=False)
        self.packed_lm_head: PackedLinear | None = None

    def init_rope_cache(self, max_positions: int) -> None:
        """Precompute cos/sin for positions [0, max_positions): one lookup per step after this;
        the first half of sin is stored negated (rotate_half's sign)."""
        device = self.norm.device
        positions = torch.arange(max_positions, device=device, dtype=torch.float32)
        freqs = positions.unsqueeze(1) * self.inv_freq.to(device)  # (P, D/2)
        emb = torch.cat((freqs, freqs), dim=-1)
        dtype = self.norm.dtype
        sin = emb.sin()
        sin[:, : sin.shape[1] // 2].neg_()  # the sign of rotate_half (see DecoderLayer.forward)
        self.register_buffer("cos_cache", emb.cos().to(dtype), persistent=False)
        self.register_buffer("sin_cache", sin.to(dtype), persistent=False)

    def rope(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin (B, T, 1, D) at `positions` (B, T)."""
        return self.cos_cache[positions].unsqueeze(2), self.sin_cache[positions].unsqueeze(2)

    def forward(
        self,
        input_ids: torch.Tensor,  # (B, T)
        positions: torch.Tensor,  # (B, T)
        meta: AttentionMetadata,
        kv_caches: list[tuple[torch.Tensor, torch.Tensor]],
    ) -> torch.Tensor:
        """Hidden states (B, T, hidden) after the final norm."""
        x = self.embed(input_ids)
        cos, sin = self.rope(positions)
        for layer, (k_cache, v_cache) in zip(self.layers, kv_caches):
            x = layer(x, cos, sin, meta, k_cache, v_cache)
        return rms_norm(x, self.norm, self.cfg.rms_norm_eps)

    def _lm_head_weight(self) -> torch.Tensor:
        return self.embed.weight if self.lm_head is None else self.lm_head.weight

    def _quantized_tied_head(self) -> bool:
        """A 4-bit embedding that is its own lm_head (layers/quant_embedding.py)."""
        return self.lm_head is None and hasattr(self.embed, "project")

    def prepare_inference(self) -> None:
        """After the weights are final, on a CPU with oneDNN: pack the lm_head (float32 or
        bf16) and, in bf16, every decoder projection (packed_linear.py has the numbers)."""
        if not self._quantized_tied_head():
            weight = self._lm_head_weight()
            self.packed_lm_head = (PackedLinear(weight) if PackedLinear.supported(weight)
                                   else None)
        if self.norm.dtype == torch.bfloat16 and self.norm.device.type == "cpu":
            for layer in self.layers:
                pack_linears(layer, ("qkv", "o") if layer.moe is not None else
                             ("qkv", "o", "gate_up", "down"))

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits (N, V) float32 from final hidden states (N, hidden)."""
        if self._quantized_tied_head():
            return self.embed.project(hidden).float()
        return linear(hidden, self._lm_head_weight(), self.packed_lm_head).float()

    @torch.no_grad()
    def load_weights(self, tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Copy Hugging Face-named tensors in; raise on a missing, unknown or misshapen weight."""
        params = dict(self.named_parameters())
        pending: dict[str, dict[Any, torch.Tensor]] = {}
        loaded: set[str] = set()
        for name, tensor in tensors:
            for target, part in hf_name_to_ours(name, self.cfg):
                if target is None:
                    continue
                if target not in params:
                    raise ValueError(
                        f"checkpoint weight {name!r} has no place in {self.cfg.architecture}"
                    )
                if part is None:
                    _copy(params[target], tensor, name)
                    loaded.add(target)
                else:
                    pending.setdefault(target, {})[part] = tensor
        for target, parts in pending.items():
            _copy(params[target], _fuse(target, parts, self.cfg), target)
            loaded.add(target)
        missing = sorted(set(params) - loaded)
        if missing:
            raise ValueError(
                f"checkpoint is missing weights: {missing[:8]}{' ...' if len(missing) > 8 else ''}"
            )


def _copy(param: torch.Tensor, tensor: torch.Tensor, name: str) -> None:
    if tuple(param.shape) != tuple(tensor.shape):
        raise ValueError(
            f"weight {name!r} has shape {tuple(tensor.shape)}, expected {tuple(param.shape)}"
        )
    param.copy_(tensor.to(param.dtype))


_FUSED_ORDER = {
    "qkv": ("q", "k", "v"),
    "gate_up": ("gate", "up"),
    "qk_norm": ("q", "k"),
}


def _fuse(target: str, parts: dict[Any, torch.Tensor], cfg: ArchConfig) -> torch.Tensor:
    kind = target.split(".")[2]
    if kind == "moe" and cfg.moe is not None:
        return fuse_experts(target, parts, cfg.moe)
    order = _FUSED_ORDER[kind]
    if set(parts) != set(order):
        raise ValueError(f"checkpoint has only {sorted(parts)} of {list(order)} for {target!r}")
    if kind == "qk_norm":
        d = cfg.head_dim
        q, k = parts["q"].reshape(d), parts["k"].reshape(d)
        return torch.cat((q.expand(cfg.num_heads, d), k.expand(cfg.num_kv_heads, d)))
    return torch.cat([parts[p] for p in order], dim=0)


_LAYER_MAP = {
    "input_layernorm.weight": ("input_norm", None),
    "post_attention_layernorm.weight": ("post_norm", None),
    "self_attn.q_proj.weight": ("qkv.weight", "q"),
    "self_attn.k_proj.weight": ("qkv.weight", "k"),
    "self_attn.v_proj.weight": ("qkv.weight", "v"),
    "self_attn.q_proj.bias": ("qkv.bias", "q"),
    "self_attn.k_proj.bias": ("qkv.bias", "k"),
    "self_attn.v_proj.bias": ("qkv.bias", "v"),
    "self_attn.o_proj.weight": ("o.weight", None),
    "self_attn.o_proj.bias": ("o.bias", None),
    "self_attn.q_norm.weight": ("qk_norm", "q"),
    "self_attn.k_norm.weight": ("qk_norm", "k"),
    "mlp.gate_proj.weight": ("gate_up.weight", "gate"),
    "mlp.up_proj.weight": ("gate_up.weight", "up"),
    "mlp.gate_proj.bias": ("gate_up.bias", "gate"),
    "mlp.up_proj.bias": ("gate_up.bias", "up"),
    "mlp.down_proj.weight": ("down.weight", None),
    "mlp.down_proj.bias": ("down.bias", None),
}


def hf_name_to_ours(name: str, cfg: ArchConfig) -> list[tuple[str | None, str | None]]:
    if name.endswith("rotary_emb.inv_freq"):
        return [(None, None)]
    if name == "model.embed_tokens.weight":
        return [("embed.weight", None)]
    if name == "model.norm.weight":
        return [("norm", None)]
    if name == "lm_head.weight":
        return [(None, None)] if cfg.tie_word_embeddings else [("lm_head.weight", None)]
    parts = name.split(".", 3)
    if len(parts) == 4 and parts[0] == "model" and parts[1] == "layers" and parts[3] in _LAYER_MAP:
        target, part = _LAYER_MAP[parts[3]]
        return [(f"layers.{parts[2]}.{target}", part)]
    if len(parts) == 4 and parts[0] == "model" and parts[1] == "layers" and cfg.moe is not None:
        found = moe_weight(parts[3])
        if found is not None:
            return [(f"layers.{parts[2]}.{found[0]}", found[1])]
    raise ValueError(f"checkpoint weight {name!r} is not a {cfg.architecture} weight")
