"""bf16 on CPU: `dtype="auto"` picks it for bf16 checkpoints where the CPU has native bf16, and
the native model in bf16 gives transformers' greedy tokens and logprobs within bf16's tolerance."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from checkpoints import make_checkpoint
from thinkgate import LLM, SamplingParams
from thinkgate.engine.config import cpu_has_native_bf16, resolve_dtype
from thinkgate.engine.model.layers.packed_linear import PackedLinear
from thinkgate.engine.model.model_loader import load_model

PROMPTS = [
    "What is the capital of France? The capital",
    "hello world, the weather",
    "Numbers: 0 1 2 3",
]
BF16, F32, F16 = torch.bfloat16, torch.float32, torch.float16


@pytest.mark.parametrize(
    ("dtype", "stored", "device", "native", "expected"),
    [
        ("auto", "bfloat16", "cpu", True, BF16),
        ("auto", "bfloat16", "cpu", False, F32),
        ("auto", "float16", "cpu", True, BF16),  # fp16 matmuls are slow on CPU; bf16 is native
        ("auto", "float16", "cpu", False, F32),
        ("auto", "float32", "cpu", True, F32),
        ("auto", None, "cpu", True, F32),
        ("auto", "torch.bfloat16", "cuda", False, BF16),
        ("auto", "float16", "cuda", False, F16),
        ("float32", "bfloat16", "cpu", True, F32),  # an explicit dtype always wins
        ("bfloat16", "float32", "cpu", False, BF16),
        (torch.float16, "bfloat16", "cpu", True, F16),
    ],
)
def test_resolve_dtype(
    dtype: str | torch.dtype,
    stored: str | None,
    device: str,
    native: bool,
    expected: torch.dtype,
) -> None:
    assert resolve_dtype(dtype, stored, device, native_bf16=native) == expected


def test_native_bf16_probe_agrees_with_cpuinfo() -> None:
    cpuinfo = Path("/proc/cpuinfo")
    if not cpuinfo.is_file() or not torch.backends.mkldnn.is_available():
        pytest.skip("no /proc/cpuinfo or no oneDNN to compare with")
    flags = set(cpuinfo.read_text().split())
    assert cpu_has_native_bf16() == bool({"avx512_bf16", "amx_bf16"} & flags)


def _bf16_checkpoint(folder: Path, arch: str, declare_dtype: bool = True) -> Path:
    make_checkpoint(folder, arch).to(BF16).save_pretrained(folder)
    if not declare_dtype:  # an old config.json: the dtype comes from the safetensors header
        config = json.loads((folder / "config.json").read_text())
        config.pop("dtype", None), config.pop("torch_dtype", None)
        (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_auto_dtype_follows_checkpoint_and_cpu(tmp_path: Path, tiny_qwen3: Path) -> None:
    want = BF16 if cpu_has_native_bf16() else F32
    folder = _bf16_checkpoint(tmp_path, "qwen3", declare_dtype=False)
    assert load_model(str(folder), "auto", "cpu").dtype == want
    assert load_model(str(tiny_qwen3), "auto", "cpu").dtype == F32  # a float32 checkpoint
    assert load_model(str(folder), "float32", "cpu").dtype == F32


def test_demo_model_stays_float32(llm: LLM) -> None:
    assert llm.llm_engine.loaded.dtype == F32  # its safetensors hold float32


def _hf_greedy(folder: Path, prompt: str, steps: int) -> tuple[list[int], torch.Tensor]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=BF16).eval()
    ids = torch.tensor([tok.encode(prompt)])
    with torch.inference_mode():
        out = model.generate(
            ids,
            max_new_tokens=steps,
            min_new_tokens=steps,
            do_sample=False,
            output_logits=True,
            return_dict_in_generate=True,
        )
    logprobs = torch.log_softmax(torch.stack(out.logits, 1)[0].float(), dim=-1)
    return out.sequences[0, ids.shape[1] :].tolist(), logprobs


@pytest.mark.parametrize("arch", ["qwen3", "qwen2", "llama"])  # qk-norm, biases, rope scaling
def test_bf16_matches_transformers_in_bf16(tmp_path: Path, arch: str) -> None:
    folder = _bf16_checkpoint(tmp_path, arch)
    llm = LLM(model=str(folder), dtype="bfloat16", max_num_seqs=4)
    engine = llm.llm_engine
    assert engine.loaded.dtype == BF16
    assert engine.kv_cache.layers[0][0].dtype == BF16  # the KV cache follows the model
    if PackedLinear.supported(torch.zeros(1, 1, dtype=BF16)):
        assert isinstance(engine.loaded.model.layers[0].qkv, PackedLinear)
    steps = 10
    params = SamplingParams(temperature=0, max_tokens=steps, min_tokens=steps, logprobs=5)
    outs = llm.generate(PROMPTS, params, use_tqdm=False)  # batched, as the engine runs
    for prompt, out in zip(PROMPTS, outs):
        expected, ref = _hf_greedy(folder, prompt, steps)
        got = out.outputs[0]
        assert got.token_ids == expected, prompt
        for step, entry in enumerate(got.logprobs):
            for tid, logprob in entry.items():
                # bf16 rounding (8-bit mantissa) moves these logprobs by up to ~0.016 here
                assert abs(logprob.logprob - ref[step, tid].item()) < 0.05, (prompt, step, tid)


@pytest.mark.parametrize("dtype", [torch.float32, BF16])
def test_packed_linear_inside_torch_compile_matches_eager(dtype: torch.dtype) -> None:
    """The compiled decode step (engine/model/compiled_decode.py) calls packed projections as the
    custom op `thinkgate::packed_linear`: same values as the eager call, with a bias."""
    from thinkgate.engine.model.compiled_decode import compiler_available

    weight = torch.randn(48, 32).to(dtype)
    if not PackedLinear.supported(weight) or not compiler_available():
        pytest.skip(f"no oneDNN {dtype} on this CPU, or no C++ compiler for TorchInductor")
    layer = PackedLinear(weight, torch.randn(48).to(dtype))
    compiled = torch.compile(lambda x: torch.relu(layer(x)) + 1, fullgraph=True, dynamic=True)
    with torch.inference_mode():
        for rows in (3, 5):
            x = torch.randn(rows, 32).to(dtype)
            assert torch.equal(compiled(x), torch.relu(layer(x)) + 1)
