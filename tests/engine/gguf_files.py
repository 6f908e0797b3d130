"""GGUF files for the tests: block packers of our own (Q4_K; the `gguf` package packs Q4_0, Q4_1
and Q8_0) and a writer that turns a Hugging Face state dict into a llama.cpp-style file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch


def quantize_q4_k(w: np.ndarray) -> np.ndarray:
    """A valid (not optimal) Q4_K encoding of float32 rows (N, K), K a multiple of 256: per
    32-weight sub-block min and range, 6-bit sub-scales against the block's d and dmin."""
    n, k = w.shape
    sub = w.reshape(n, k // 256, 8, 32).astype(np.float64)
    lo = np.minimum(sub.min(-1), 0.0)  # Q4_K's min is subtracted: w = d*sc*q - dmin*m, m >= 0
    scale = (sub.max(-1) - lo) / 15
    d = (scale.max(-1) / 63).astype(np.float16)  # (N, B)
    dmin = (-lo.min(-1) / 63).astype(np.float16)
    dd, dm = d.astype(np.float64)[..., None], dmin.astype(np.float64)[..., None]
    sc = np.clip(np.round(np.divide(scale, dd, out=np.zeros_like(scale), where=dd > 0)), 0, 63)
    m = np.clip(np.round(np.divide(-lo, dm, out=np.zeros_like(lo), where=dm > 0)), 0, 63)
    step = (dd * sc)[..., None]
    q = np.round(np.divide(sub + (dm * m)[..., None], step, out=np.zeros_like(sub),
                           where=step > 0))
    q = np.clip(q, 0, 15).astype(np.uint8)  # (N, B, 8, 32)
    sc, m = sc.astype(np.uint8), m.astype(np.uint8)
    scales = np.zeros((n, k // 256, 12), np.uint8)
    scales[..., 0:4] = sc[..., :4] | ((sc[..., 4:] >> 4) << 6)
    scales[..., 4:8] = m[..., :4] | ((m[..., 4:] >> 4) << 6)
    scales[..., 8:12] = (sc[..., 4:] & 15) | ((m[..., 4:] & 15) << 4)
    qs = (q[:, :, 0::2] | (q[:, :, 1::2] << 4)).reshape(n, k // 256, 128)
    head = np.stack((d, dmin), -1).view(np.uint8).reshape(n, k // 256, 4)
    return np.concatenate((head, scales, qs), -1).reshape(n, -1)


def quantize(w: np.ndarray, qtype: str) -> np.ndarray:
    """Float32 rows → the raw bytes of `qtype` (F32 and F16 as values)."""
    import gguf

    if qtype == "F32":
        return w.astype(np.float32)
    if qtype == "F16":
        return w.astype(np.float16)
    if qtype == "Q4_K":
        return quantize_q4_k(w)
    return gguf.quants.quantize(w.astype(np.float32), gguf.GGMLQuantizationType[qtype])


_GGUF_NAMES = {
    "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
    "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}


def gguf_name(hf: str) -> str:
    top = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight":
           "output_norm.weight", "lm_head.weight": "output.weight"}
    if hf in top:
        return top[hf]
    _, _, layer, rest = hf.split(".", 3)
    module, kind = rest.rsplit(".", 1)
    return f"blk.{layer}.{_GGUF_NAMES[module]}.{kind}"


def permute(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's q/k row order for a "llama" file (pairs of neighbours per head)."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(
        w.shape)


def write_gguf(path: Path, arch: str, cfg: dict[str, Any], state: dict[str, torch.Tensor],
               types: dict[str, str]) -> dict[str, np.ndarray]:
    """Write `state` (HF names, float) as a GGUF file of `arch` ("llama", "qwen3"), each 2-D
    weight in `types[name]` (default F32); returns the raw data written per HF name."""
    import gguf

    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_block_count(cfg["num_hidden_layers"])
    writer.add_context_length(cfg["max_position_embeddings"])
    writer.add_embedding_length(cfg["hidden_size"])
    writer.add_feed_forward_length(cfg["intermediate_size"])
    writer.add_head_count(cfg["num_attention_heads"])
    writer.add_head_count_kv(cfg["num_key_value_heads"])
    writer.add_key_length(cfg["head_dim"])
    writer.add_value_length(cfg["head_dim"])
    writer.add_rope_freq_base(cfg["rope_theta"])
    writer.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    writer.add_vocab_size(cfg["vocab_size"])
    written = {}
    for name, tensor in state.items():
        w = tensor.float().numpy()
        if arch == "llama" and name.endswith(("q_proj.weight", "k_proj.weight")):
            heads = cfg["num_attention_heads" if "q_proj" in name else "num_key_value_heads"]
            w = permute(w, heads)
        qtype = types.get(name, "F32") if w.ndim == 2 else "F32"
        raw = quantize(w, qtype)
        written[name] = raw
        if qtype in ("F32", "F16"):
            writer.add_tensor(gguf_name(name), raw)
        else:
            writer.add_tensor(gguf_name(name), raw, raw_dtype=gguf.GGMLQuantizationType[qtype])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return written
