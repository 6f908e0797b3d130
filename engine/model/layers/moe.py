"""Mixture-of-experts feed-forward blocks for the native decoder: Mixtral, Qwen2-MoE, Qwen3-MoE.

A sparse layer routes each token to `top_k` of `num_experts` SwiGLU experts: router logits ->
softmax (float32) -> the top k -> renormalized to sum 1 where the model says so (Mixtral always;
Qwen's `norm_topk_prob`) -> the experts' outputs mixed with those weights. Qwen2-MoE adds a
shared expert, gated by `sigmoid(shared_expert_gate(x))`, that every token goes through.

Experts are computed grouped by expert (`kernels.fused_moe`: Triton on CUDA, its torch twin on
CPU): the (token, expert) pairs are sorted by expert, and each expert that got tokens does one
matmul pair over all of its rows, so the cost is one GEMM per active expert whatever the batch,
never a Python loop over tokens. Experts are
stored stacked, `gate_up` (E, 2I, H) and `down` (E, H, I), loaded from the Hugging Face
per-expert weights (`experts.{e}.gate_proj/up_proj/down_proj`, Mixtral's `w1/w3/w2`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from thinkgate.kernels.moe import fused_moe
from torch import nn

MOE_ARCHITECTURES = ("MixtralForCausalLM", "Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM")


@dataclass(frozen=True)
class MoeSpec:
    """The fields of config.json a sparse layer uses."""

    num_experts: int
    top_k: int
    expert_size: int  # each expert's intermediate size
    renormalize: bool  # the top-k weights rescaled to sum 1
    sparse_step: int  # every `sparse_step`-th layer is sparse (1: all of them)
    dense_layers: tuple[int, ...]  # layers with a dense MLP (Qwen's `mlp_only_layers`)
    shared_size: int  # the shared expert's intermediate size (0: none)

    @classmethod
    def from_hf(cls, arch: str, cfg: dict[str, Any]) -> MoeSpec:
        experts = cfg.get("num_experts") or cfg.get("num_local_experts")
        top_k = cfg.get("num_experts_per_tok")
        if not experts or not top_k:
            raise ValueError(f"config.json for {arch} lacks num_experts / num_experts_per_tok")
        if not 0 < int(top_k) <= int(experts):
            raise ValueError(f"config.json for {arch}: num_experts_per_tok {top_k} is not in "
                             f"1..{experts}")
        mixtral = arch == "MixtralForCausalLM"
        size = cfg["intermediate_size"] if mixtral else cfg.get("moe_intermediate_size")
        if not size:
            raise ValueError(f"config.json for {arch} lacks moe_intermediate_size")
        return cls(
            num_experts=int(experts),
            top_k=int(top_k),
            expert_size=int(size),
            renormalize=True if mixtral else bool(cfg.get("norm_topk_prob", False)),
            sparse_step=1 if mixtral else int(cfg.get("decoder_sparse_step") or 1),
            dense_layers=tuple(int(i) for i in (cfg.get("mlp_only_layers") or ())),
            shared_size=int(cfg.get("shared_expert_intermediate_size") or 0)
            if arch == "Qwen2MoeForCausalLM" else 0,
        )

    def is_sparse(self, layer: int) -> bool:
        """Whether decoder layer `layer` (from 0) has experts (Qwen's rule; Mixtral: all)."""
        return layer not in self.dense_layers and (layer + 1) % self.sparse_step == 0


def route(logits: torch.Tensor, top_k: int, renormalize: bool
          ) -> tuple[torch.Tensor, torch.Tensor]:
    """(weights (N, k) float32, expert ids (N, k)) from router logits (N, E)."""
    probs = torch.softmax(logits, dim=-1, dtype=torch.float32)
    weights, experts = torch.topk(probs, top_k, dim=-1)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights, experts


class SparseMoe(nn.Module):
    """A sparse layer's feed-forward: router, stacked experts, optional gated shared expert."""

    def __init__(self, spec: MoeSpec, hidden: int) -> None:
        super().__init__()
        self.spec = spec
        e, i = spec.num_experts, spec.expert_size
        self.router = nn.Linear(hidden, e, bias=False)
        self.gate_up = nn.Parameter(torch.empty(e, 2 * i, hidden))
        self.down = nn.Parameter(torch.empty(e, hidden, i))
        self.shared_gate_up = self.shared_down = self.shared_gate = None
        if spec.shared_size:
            self.shared_gate_up = nn.Linear(hidden, 2 * spec.shared_size, bias=False)
            self.shared_down = nn.Linear(spec.shared_size, hidden, bias=False)
            self.shared_gate = nn.Linear(hidden, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        weights, experts = route(self.router(flat), self.spec.top_k, self.spec.renormalize)
        out = fused_moe(flat.contiguous(), weights, experts, self.gate_up, self.down,
                        check=False)
        if self.shared_gate_up is not None:
            gate, up = self.shared_gate_up(flat).chunk(2, dim=-1)
            shared = self.shared_down(F.silu(gate) * up)
            out = out + torch.sigmoid(self.shared_gate(flat)) * shared
        return out.view(shape)


# a sparse layer's Hugging Face weight (after "model.layers.{n}.") -> (our name, fuse part)
_EXPERT = re.compile(r"(?:mlp|block_sparse_moe)\.experts\.(\d+)\.(\w+)\.weight")
_EXPERT_PART = {"gate_proj": "gate", "w1": "gate", "up_proj": "up", "w3": "up",
                "down_proj": "down", "w2": "down"}
_SHARED = {
    "mlp.gate.weight": ("moe.router.weight", None),
    "block_sparse_moe.gate.weight": ("moe.router.weight", None),
    "mlp.shared_expert.gate_proj.weight": ("moe.shared_gate_up.weight", "gate"),
    "mlp.shared_expert.up_proj.weight": ("moe.shared_gate_up.weight", "up"),
    "mlp.shared_expert.down_proj.weight": ("moe.shared_down.weight", None),
    "mlp.shared_expert_gate.weight": ("moe.shared_gate.weight", None),
}


def moe_weight(rest: str) -> tuple[str, Any] | None:
    """(target under the layer, fuse part) of a sparse layer's weight, or None if `rest` is not
    one. Experts' parts are (expert, "gate" | "up" | "down"), stacked by `fuse_experts`."""
    if rest in _SHARED:
        return _SHARED[rest]
    match = _EXPERT.fullmatch(rest)
    if match is None or match.group(2) not in _EXPERT_PART:
        return None
    part = _EXPERT_PART[match.group(2)]
    return ("moe.down" if part == "down" else "moe.gate_up"), (int(match.group(1)), part)


def fuse_experts(target: str, parts: dict[Any, torch.Tensor], spec: MoeSpec) -> torch.Tensor:
    """Stack one layer's per-expert weights into `target` ("...moe.gate_up" or "...moe.down");
    the shared expert's gate and up fuse like the dense MLP's."""
    if target.endswith("shared_gate_up.weight"):
        if set(parts) != {"gate", "up"}:
            raise ValueError(f"checkpoint has only {sorted(parts)} of ['gate', 'up'] for "
                             f"{target!r}")
        return torch.cat((parts["gate"], parts["up"]), dim=0)
    kinds = ("down",) if target.endswith("moe.down") else ("gate", "up")
    want = {(e, kind) for e in range(spec.num_experts) for kind in kinds}
    if set(parts) != want:
        missing = sorted(want - set(parts))[:4]
        raise ValueError(f"checkpoint lacks expert weights for {target!r}, e.g. {missing}")
    if kinds == ("down",):
        return torch.stack([parts[(e, "down")] for e in range(spec.num_experts)])
    return torch.stack([torch.cat((parts[(e, "gate")], parts[(e, "up")]), dim=0)
                        for e in range(spec.num_experts)])
