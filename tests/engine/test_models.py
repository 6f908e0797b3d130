"""Loading checkpoints: native logits match transformers; sharded, fallback and bad inputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from checkpoints import make_checkpoint
from thinkgate import LLM, SamplingParams
from thinkgate.engine.config import EngineConfig
from thinkgate.engine.core.llm_engine import LLMEngine

PROMPT = "What is the capital of France? The capital"


def _hf_reference(folder: str | Path, prompt: str, steps: int) -> tuple[list[int], torch.Tensor]:
    """transformers' greedy tokens and the log-softmax of its logits at each generated step."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
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


def _check_against_transformers(llm: LLM, folder: str | Path, steps: int = 12) -> None:
    expected, ref_logprobs = _hf_reference(folder, PROMPT, steps)
    params = SamplingParams(temperature=0, max_tokens=steps, min_tokens=steps, logprobs=5)
    out = llm.generate(PROMPT, params, use_tqdm=False)[0].outputs[0]
    assert out.token_ids == expected
    for step, (token, entry) in enumerate(zip(out.token_ids, out.logprobs)):
        for tid, logprob in entry.items():
            assert abs(logprob.logprob - ref_logprobs[step, tid].item()) < 1e-3, (step, tid)
        assert entry[token].rank == int((ref_logprobs[step] > ref_logprobs[step, token]).sum()) + 1


def test_demo_model_matches_transformers(llm: LLM, demo_dir: str) -> None:
    _check_against_transformers(llm, demo_dir, steps=16)


@pytest.mark.parametrize("arch", ["qwen3", "qwen2", "llama", "mistral"])
def test_native_architectures_match_transformers(tmp_path: Path, arch: str) -> None:
    make_checkpoint(tmp_path, arch).save_pretrained(tmp_path)
    llm = LLM(model=str(tmp_path), max_num_seqs=4)
    assert llm.llm_engine.loaded.native
    _check_against_transformers(llm, tmp_path)


def test_sharded_checkpoint_loads(tmp_path: Path) -> None:
    make_checkpoint(tmp_path, "llama").save_pretrained(tmp_path, max_shard_size="100KB")
    assert (tmp_path / "model.safetensors.index.json").is_file()
    assert len(list(tmp_path.glob("*.safetensors"))) > 2
    _check_against_transformers(LLM(model=str(tmp_path)), tmp_path, steps=6)


def test_other_architecture_falls_back_to_transformers(tmp_path: Path) -> None:
    from checkpoints import make_tokenizer
    from transformers import AutoModelForCausalLM, GPT2Config

    tok = make_tokenizer(tmp_path)
    config = GPT2Config(
        n_embd=32,
        n_layer=2,
        n_head=2,
        vocab_size=448,
        n_positions=128,
        eos_token_id=tok.eos_token_id,
    )
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path)
    llm = LLM(model=str(tmp_path))
    assert not llm.llm_engine.loaded.native
    _check_against_transformers(llm, tmp_path, steps=6)


def test_bad_model_paths_fail_clearly(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        LLM(model=str(tmp_path / "nope"))
    with pytest.raises(FileNotFoundError, match="no config.json"):
        LLM(model=str(tmp_path))
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["Qwen3ForCausalLM"]}))
    with pytest.raises(ValueError, match="lacks.*num_attention_heads"):
        LLM(model=str(tmp_path))
    make_checkpoint(tmp_path, "qwen3").config.to_json_file(tmp_path / "config.json")
    with pytest.raises(FileNotFoundError, match="no \\*.safetensors"):
        LLM(model=str(tmp_path))


def test_missing_and_mismatched_weights_fail_clearly(tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    make_checkpoint(tmp_path, "qwen3").save_pretrained(tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    weights.pop("model.layers.1.mlp.down_proj.weight")
    save_file(weights, tmp_path / "model.safetensors")
    with pytest.raises(ValueError, match="missing weights.*layers.1.down"):
        LLM(model=str(tmp_path))
    weights["model.layers.1.mlp.down_proj.weight"] = torch.zeros(3, 3)
    save_file(weights, tmp_path / "model.safetensors")
    with pytest.raises(ValueError, match="down_proj.weight.*shape \\(3, 3\\)"):
        LLM(model=str(tmp_path))


def test_bad_engine_config_fails_clearly(tiny_qwen3: Path) -> None:
    with pytest.raises(ValueError, match="dtype 'int8'"):
        LLM(model=str(tiny_qwen3), dtype="int8")
    with pytest.raises(ValueError, match="max_num_seqs"):
        LLM(model=str(tiny_qwen3), max_num_seqs=0)
    with pytest.raises(ValueError, match="max_model_len \\(100000\\)"):
        LLM(model=str(tiny_qwen3), max_model_len=100_000)
    with pytest.raises(ValueError, match="num_kv_blocks \\(2\\)"):
        LLMEngine(EngineConfig(model=str(tiny_qwen3), num_kv_blocks=2))
    with pytest.raises(ValueError, match="unknown LLM arguments.*bogus"):
        LLM(model=str(tiny_qwen3), bogus=1)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_dtypes_load_and_run(tiny_qwen3: Path, dtype: str) -> None:
    llm = LLM(model=str(tiny_qwen3), dtype=dtype)
    assert next(llm.llm_engine.loaded.model.parameters()).dtype == getattr(torch, dtype)
    out = llm.generate("hello", SamplingParams(temperature=0, max_tokens=4, ignore_eos=True))
    assert len(out[0].outputs[0].token_ids) == 4
