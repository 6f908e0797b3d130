"""GGUF blocks kept quantized: unpacking is the gguf package's dequantization exactly, the int4
matmul is `x @ dequant(W).T` within bf16 tolerance, and a GGUF model runs packed with the logits
and greedy tokens of the same file dequantized."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from gguf_files import quantize, write_gguf
from thinkgate.engine.model.layers.gguf_blocks import PACKED_TYPES, dequantize, unpack
from thinkgate.engine.model.layers.quant_embedding import QuantEmbedding, cpu_layout_ok
from thinkgate.engine.model.layers.quant_linear import (
    DenseMatmul,
    Int4Matmul,
    QuantLinear,
    TritonInt4Matmul,
    int4_supported,
)

gguf = pytest.importorskip("gguf")
INT4 = int4_supported("cpu", torch.bfloat16)
needs_int4 = pytest.mark.skipif(not INT4, reason="torch has no CPU int4 kernel")


def _weights(n: int, k: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, k)) * rng.uniform(0.01, 1.0, (n, 1))).astype(np.float32)


@pytest.mark.parametrize("qtype", PACKED_TYPES)
def test_unpack_is_the_gguf_dequantization_exactly(qtype: str) -> None:
    w = _weights(48, 512)
    raw = quantize(w, qtype)
    expected = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType[qtype])
    groups = unpack(raw, qtype, (48, 512))
    assert groups.codes.dtype == torch.uint8 and int(groups.codes.max()) <= 15
    np.testing.assert_array_equal(groups.dequantize().numpy(), expected)
    np.testing.assert_array_equal(dequantize(raw, qtype, (48, 512)).numpy(), expected)
    assert np.abs(expected - w).max() < 0.2 * np.abs(w).max()  # and it is w, quantized


@pytest.mark.parametrize("qtype", ["Q4_K", "Q8_0"])
def test_unpack_random_blocks_with_extreme_codes(qtype: str) -> None:
    """Random bytes (every code and 6-bit scale value appears) with sane fp16 scales."""
    rng = np.random.default_rng(1)
    block, nbytes, halves = (256, 144, 2) if qtype == "Q4_K" else (32, 34, 1)
    raw = rng.integers(0, 256, (32, 2, nbytes), dtype=np.uint8)
    scales = (rng.standard_normal((32, 2, halves)) * 0.01).astype(np.float16)
    raw[..., : 2 * halves] = scales.view(np.uint8).reshape(32, 2, 2 * halves)
    raw = raw.reshape(32, -1)
    expected = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType[qtype])
    np.testing.assert_array_equal(unpack(raw, qtype, (32, 2 * block)).dequantize().numpy(),
                                  expected)


def test_dequantize_fallback_and_errors() -> None:
    w = _weights(16, 256)
    raw = gguf.quants.quantize(w, gguf.GGMLQuantizationType.Q5_0)  # not packed: gguf reads it
    np.testing.assert_array_equal(
        dequantize(raw, "Q5_0", (16, 256)).numpy(),
        gguf.quants.dequantize(raw, gguf.GGMLQuantizationType.Q5_0))
    with pytest.raises(ValueError, match="Q5_0 has no int4 packing"):
        unpack(raw, "Q5_0", (16, 256))
    with pytest.raises(ValueError, match="GGUF type Q9_9 can be neither packed"):
        dequantize(raw, "Q9_9", (16, 256))
    with pytest.raises(ValueError, match="whole blocks of 32"):
        unpack(quantize(w, "Q4_0"), "Q4_0", (16, 250))


@needs_int4
@pytest.mark.parametrize("qtype", PACKED_TYPES)
@pytest.mark.parametrize("rows", [1, 5, 33])
def test_int4_matmul_is_x_times_dequantized_weight(qtype: str, rows: int) -> None:
    """bf16 compute: the kernel rounds scales and zeros to bf16 (relative 2^-9) and its output
    to bf16; against the fp32 product with those rounded scales the error is the output's
    rounding, against the exact weight within 1% of the output's scale."""
    w = _weights(96, 512, seed=rows)
    groups = unpack(quantize(w, qtype), qtype, (96, 512))
    x = torch.randn(rows, 512).to(torch.bfloat16)
    y = Int4Matmul(groups)(x).float()
    exact = x.float() @ groups.dequantize().T
    rounded = type(groups)(groups.codes, groups.scales.bfloat16().double(),
                           groups.zeros.bfloat16().double(), groups.repeat)
    scale = exact.abs().max()
    torch.testing.assert_close(y, x.float() @ rounded.dequantize().T, rtol=2**-7, atol=scale * 2**-8)
    assert (y - exact).abs().max() <= 0.01 * scale


@needs_int4
def test_quant_linear_segments_and_dense_fallback() -> None:
    """q (Q4_K), k (float: a type without packing), v (Q8_0): three segments, one output; a
    part whose row count the kernel cannot pack (24) stays dense."""
    parts_w = [_weights(64, 256, 1), _weights(32, 256, 2), _weights(32, 256, 3)]
    q = unpack(quantize(parts_w[0], "Q4_K"), "Q4_K", (64, 256))
    v = unpack(quantize(parts_w[2], "Q8_0"), "Q8_0", (32, 256))
    k = torch.from_numpy(parts_w[1])
    layer = QuantLinear([q, k, v], bias=True, dtype=torch.bfloat16)
    assert [type(s) for s in layer.segments] == [Int4Matmul, DenseMatmul, Int4Matmul]
    with torch.no_grad():
        layer.bias.copy_(torch.randn(128))
    x = torch.randn(3, 7, 256).to(torch.bfloat16)
    w = torch.cat((q.dequantize(), k.bfloat16().float(), v.dequantize()))
    expected = x.float() @ w.T + layer.bias.float()
    y = layer(x).float()
    assert y.shape == (3, 7, 128)
    assert (y - expected).abs().max() <= 0.01 * expected.abs().max()
    odd = QuantLinear([unpack(quantize(_weights(24, 256), "Q4_0"), "Q4_0", (24, 256))],
                      bias=False, dtype=torch.bfloat16)
    assert isinstance(odd.segments[0], DenseMatmul)
    assert layer.nbytes < 128 * 256 * 2  # less than the bf16 weight


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_quant_linear_triton_segments(dtype: torch.dtype) -> None:
    """The GPU path (kernels/int4_matmul.py; Triton's interpreter under `make test`, the twin
    without it): Q4_K, float and Q8_0 parts, any row count (24 rows: no dense fallback)."""
    parts_w = [_weights(64, 256, 1), _weights(32, 256, 2), _weights(24, 256, 3)]
    q = unpack(quantize(parts_w[0], "Q4_K"), "Q4_K", (64, 256))
    v = unpack(quantize(parts_w[2], "Q8_0"), "Q8_0", (24, 256))
    k = torch.from_numpy(parts_w[1])
    layer = QuantLinear([q, k, v], bias=False, dtype=dtype, backend="triton")
    assert [type(s) for s in layer.segments] == [TritonInt4Matmul, DenseMatmul,
                                                 TritonInt4Matmul]
    x = torch.randn(5, 256).to(dtype)
    w = torch.cat((q.dequantize(), k.to(dtype).float(), v.dequantize()))
    expected = x.float() @ w.T
    tol = 1e-5 if dtype == torch.float32 else 0.01
    assert (layer(x).float() - expected).abs().max() <= tol * expected.abs().max()
    q_bytes = sum(b.numel() * b.element_size() for b in layer.segments[0].buffers())
    assert q_bytes <= (0.32 if dtype == torch.bfloat16 else 0.38) * 64 * 256 * 2  # of bf16
    with pytest.raises(ValueError, match="backend must be"):
        QuantLinear([q], bias=False, dtype=dtype, backend="gpu")


def test_gguf_model_on_the_triton_path_matches_dequantized(
        tmp_path: Path, demo_dir: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The demo file loaded as on a GPU (every packed projection a `TritonInt4Matmul`, in
    float32 here) gives the dequantized float32 model's greedy tokens and logprobs. The kernel
    itself is checked against its twin layer by layer (above, tests/kernels); here the twin
    runs (no interpreter: ~5 s of interpreted launches saved), so this checks the wiring."""
    from thinkgate.engine.model import gguf_loader

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    path = _demo_gguf(tmp_path, demo_dir)
    want, dense_packed = _generate(path, demo_dir, "float32", monkeypatch, True, 4)
    monkeypatch.setattr(gguf_loader, "int4_backend", lambda device, dtype: "triton")
    got, packed = _generate(path, demo_dir, "float32", monkeypatch, False, 4)
    assert "TritonInt4Matmul" in packed and "Int4Matmul" not in packed and not dense_packed
    for g, w in zip(got, want):
        assert g.token_ids == w.token_ids
        for g_step, w_step in zip(g.logprobs, w.logprobs):
            for tid in set(g_step) & set(w_step):
                assert abs(g_step[tid].logprob - w_step[tid].logprob) < 1e-3


def _demo_gguf(tmp: Path, demo_dir: str, embed: str = "Q8_0") -> Path:
    """The demo model (Qwen3, 4 layers) as GGUF: Q4_0, Q4_1, Q8_0, Q4_0 layers (its widths, 128
    and 384, are no multiples of Q4_K's 256), a float32 k, an `embed` (tied) embedding."""
    from safetensors.torch import load_file

    cfg = json.loads((Path(demo_dir) / "config.json").read_text())
    cfg["rope_theta"] = cfg["rope_parameters"]["rope_theta"]
    state = load_file(str(Path(demo_dir) / "model.safetensors"))
    types = {"model.embed_tokens.weight": embed}
    for name in state:
        if ".layers." in name and name.endswith("proj.weight"):
            types[name] = ("Q4_0", "Q4_1", "Q8_0", "Q4_0")[int(name.split(".")[2])]
    types["model.layers.2.self_attn.k_proj.weight"] = "F32"  # qkv in 3 segments
    path = tmp / f"demo-{embed}.gguf"
    write_gguf(path, "qwen3", cfg, state, types)
    return path


def _q4_k_llama_gguf(tmp: Path) -> Path:
    """A random "llama" model (rows permuted as llama.cpp writes them) wide enough for Q4_K:
    hidden 256, every projection Q4_K, the demo tokenizer's vocabulary; a sharp lm_head, so
    greedy choices are not near ties."""
    cfg = dict(num_hidden_layers=2, max_position_embeddings=256, hidden_size=256,
               intermediate_size=512, num_attention_heads=4, num_key_value_heads=2, head_dim=64,
               rope_theta=10000.0, rms_norm_eps=1e-6, vocab_size=8064)
    rng = torch.Generator().manual_seed(0)
    state = {"model.embed_tokens.weight": torch.randn(8064, 256, generator=rng),
             "model.norm.weight": torch.ones(256),
             "lm_head.weight": torch.randn(8064, 256, generator=rng) * 0.5}
    shapes = {"self_attn.q_proj": (256, 256), "self_attn.k_proj": (128, 256),
              "self_attn.v_proj": (128, 256), "self_attn.o_proj": (256, 256),
              "mlp.gate_proj": (512, 256), "mlp.up_proj": (512, 256), "mlp.down_proj": (256, 512)}
    types = {}
    for i in range(2):
        state[f"model.layers.{i}.input_layernorm.weight"] = torch.ones(256)
        state[f"model.layers.{i}.post_attention_layernorm.weight"] = torch.ones(256)
        for module, shape in shapes.items():
            name = f"model.layers.{i}.{module}.weight"
            state[name] = torch.randn(shape, generator=rng) * 0.1
            types[name] = "Q4_K"
    path = tmp / "q4k.gguf"
    write_gguf(path, "llama", cfg, state, types)
    return path


# nats: a greedy choice float32 itself barely makes, which bf16 may make the other way (its
# error on a logprob near the top is ~0.06 here: two of them flipped a 0.109 margin)
NEAR_TIE = 0.25


def _generate(path: Path, demo_dir: str, dtype: str, monkeypatch: pytest.MonkeyPatch,
              dequantize: bool, max_tokens: int, prompts: list | None = None
              ) -> tuple[list, set[str]]:
    from thinkgate import LLM, SamplingParams

    monkeypatch.setenv("THINKGATE_GGUF_DEQUANTIZE", "1" if dequantize else "0")
    llm = LLM(model=str(path), tokenizer=demo_dir, dtype=dtype, max_model_len=256)
    packed = {type(s).__name__ for m in llm.llm_engine.loaded.model.modules()
              if isinstance(m, QuantLinear) for s in m.segments}  # empty: nothing packed
    prompts = prompts or [[1, 2, 3, 4, 5], [100, 200, 300], [7] * 12]
    params = SamplingParams(temperature=0, max_tokens=max_tokens, logprobs=5, ignore_eos=True)
    return [o.outputs[0] for o in llm.generate(prompts, params, use_tqdm=False)], packed


@needs_int4
@pytest.mark.parametrize("model", ["demo_qwen3", "demo_q4_1_embedding", "q4_k_llama"])
def test_gguf_model_packed_matches_dequantized(model: str, tmp_path: Path, demo_dir: str,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The same file packed in bf16 and dequantized in float32 (exact): the same greedy tokens
    up to a near tie of float32's own (two tokens within `NEAR_TIE` nats by float32's
    logprobs, which bf16 may order the other way: demo v4 after 6 tokens, -0.818 vs -0.927,
    and with a Q4_1 embedding on its first token, -0.914 vs -0.985; a wrong packing moves the
    top tokens by far more), and every top-5 logprob both report on the shared path within 0.3
    nats plus 3% of its size (bf16 keeps 8 bits, so its error grows with a logit's distance
    from the top: the demo model v3 put a rank-4 token at -8.44 nats in float32 and -8.11 in
    bf16). That is bf16's error, not the packing's (a wrong packing moves the top tokens, whose
    logprobs lie near 0): seen at most 0.243 (demo) and 0.224 (Q4_K, first step) packed, 0.247
    and 0.357 for the same files dequantized to dense bf16. The trained demo model runs 16
    tokens; the random Q4_K model has near ties after its first token, so it is compared on
    that one."""
    demo = model.startswith("demo")
    embed = "Q4_1" if model == "demo_q4_1_embedding" else "Q8_0"
    path = _demo_gguf(tmp_path, demo_dir, embed) if demo else _q4_k_llama_gguf(tmp_path)
    steps = 16 if demo else 1
    got, packed = _generate(path, demo_dir, "bfloat16", monkeypatch, False, steps)
    want, dense_packed = _generate(path, demo_dir, "float32", monkeypatch, True, steps)
    assert packed and not dense_packed
    for g, w in zip(got, want):
        shared = next((i for i, (a, b) in enumerate(zip(g.token_ids, w.token_ids)) if a != b),
                      len(w.token_ids))
        if shared < len(w.token_ids):  # the paths part: only where float32 itself nearly ties
            top, mine = w.logprobs[shared], g.token_ids[shared]
            assert mine in top, (shared, mine, top)
            assert top[w.token_ids[shared]].logprob - top[mine].logprob < NEAR_TIE, (shared, top)
        # up to the first difference both ran on the same tokens: their logprobs compare
        for g_step, w_step in zip(g.logprobs[:shared + 1], w.logprobs[:shared + 1]):
            shared = set(g_step) & set(w_step)
            assert len(shared) >= 3
            for tid in shared:
                bound = 0.3 + 0.03 * abs(w_step[tid].logprob)
                assert abs(g_step[tid].logprob - w_step[tid].logprob) < bound, (tid, w_step)


@needs_int4
def test_packed_layout_of_the_demo_file(tmp_path: Path, demo_dir: str) -> None:
    from thinkgate.engine.model.model_loader import load_model

    loaded = load_model(str(_demo_gguf(tmp_path, demo_dir)), "auto", "cpu")
    model = loaded.model
    assert loaded.dtype == torch.bfloat16  # GGUF on a CPU with bf16: packed by default
    assert isinstance(model.layers[0].qkv, QuantLinear) and model.layers[0].qkv.bias is None
    assert [type(s) for s in model.layers[2].qkv.segments] == [Int4Matmul, DenseMatmul,
                                                               Int4Matmul]
    assert model.layers[2].down.segments[0].repeat == 2  # Q8_0
    assert model.embed.weight.dtype == torch.bfloat16  # Q8_0: dense (module doc)
    four_bit = load_model(str(_demo_gguf(tmp_path, demo_dir, "Q4_0")), "auto", "cpu").model
    assert isinstance(four_bit.embed, QuantEmbedding) and four_bit.packed_lm_head is None


@pytest.mark.parametrize("backend", ["cpu", "triton"])
def test_quant_embedding_rows_and_tied_head(backend: str) -> None:
    """Looked-up rows are the table's rows (dequantized from the packed codes, bf16 scales),
    the head is `hidden @ table.T`; torch's CPU layout is the one the module doc reads."""
    if backend == "cpu" and not INT4:
        pytest.skip("torch has no CPU int4 kernel")
    assert backend != "cpu" or cpu_layout_ok()  # else the loader keeps tables dense
    w = _weights(192, 64)
    groups = unpack(quantize(w, "Q4_1"), "Q4_1", (192, 64))
    table = QuantEmbedding(groups, torch.bfloat16, backend)
    rounded = type(groups)(groups.codes, groups.scales.bfloat16().double(),
                           groups.zeros.bfloat16().double()).dequantize()
    ids = torch.tensor([[0, 31, 32, 63], [64, 100, 191, 0]])
    rows = table(ids)
    assert rows.shape == (2, 4, 64) and rows.dtype == torch.bfloat16
    torch.testing.assert_close(rows.float(), rounded[ids].bfloat16().float(), rtol=0, atol=0)
    hidden = torch.randn(3, 64).to(torch.bfloat16)
    exact = hidden.float() @ groups.dequantize().T
    assert (table.project(hidden).float() - exact).abs().max() <= 0.01 * exact.abs().max()
    assert table.nbytes <= 0.32 * 192 * 64 * 2  # of the bf16 table
    with pytest.raises(ValueError, match="one int4 matrix"):
        QuantEmbedding(unpack(quantize(w, "Q8_0"), "Q8_0", (192, 64)), torch.bfloat16, backend)


def test_llama_file_rows_come_back_in_hugging_face_order(tmp_path: Path) -> None:
    """A "llama" file stores q and k rows permuted (llama.cpp's RoPE layout); the loader puts
    them back, quantized (Q8_0 q) or not (F32 k), and reads every other tensor as written."""
    from thinkgate.engine.model.model_loader import load_model

    cfg = dict(num_hidden_layers=1, max_position_embeddings=128, hidden_size=64,
               intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
               rope_theta=10000.0, rms_norm_eps=1e-6, vocab_size=96)
    rng = torch.Generator().manual_seed(0)
    shapes = {"model.embed_tokens.weight": (96, 64), "model.norm.weight": (64,),
              "lm_head.weight": (96, 64), "model.layers.0.input_layernorm.weight": (64,),
              "model.layers.0.post_attention_layernorm.weight": (64,),
              "model.layers.0.self_attn.q_proj.weight": (64, 64),
              "model.layers.0.self_attn.k_proj.weight": (32, 64),
              "model.layers.0.self_attn.v_proj.weight": (32, 64),
              "model.layers.0.self_attn.o_proj.weight": (64, 64),
              "model.layers.0.mlp.gate_proj.weight": (128, 64),
              "model.layers.0.mlp.up_proj.weight": (128, 64),
              "model.layers.0.mlp.down_proj.weight": (64, 128)}
    state = {name: torch.randn(shape, generator=rng) for name, shape in shapes.items()}
    write_gguf(tmp_path / "tiny.gguf", "llama", cfg,
               state, {"model.layers.0.self_attn.q_proj.weight": "Q8_0"})
    model = load_model(str(tmp_path / "tiny.gguf"), "float32", "cpu").model
    q_exact = torch.from_numpy(gguf.quants.dequantize(
        quantize(state["model.layers.0.self_attn.q_proj.weight"].numpy(), "Q8_0"),
        gguf.GGMLQuantizationType.Q8_0))
    qkv = model.layers[0].qkv.weight
    torch.testing.assert_close(qkv[64:], torch.cat((state["model.layers.0.self_attn.k_proj.weight"],
                                                    state["model.layers.0.self_attn.v_proj.weight"])),
                               rtol=0, atol=0)
    torch.testing.assert_close(model.embed.weight, state["model.embed_tokens.weight"])
    # Q8_0 blocks run along the input, so quantizing permuted rows and un-permuting them is
    # quantizing the rows in place
    torch.testing.assert_close(qkv[:64], q_exact, rtol=0, atol=0)
