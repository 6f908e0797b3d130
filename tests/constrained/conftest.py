"""Fixtures for the constrained-decoding tests: one demo-model LLM for the whole directory."""

from __future__ import annotations

import os
from typing import Any

import pytest

_CALLER_TRITON_INTERPRET = os.environ.get("TRITON_INTERPRET", "")


@pytest.fixture(autouse=True)
def torch_twin_sampling(monkeypatch: pytest.MonkeyPatch) -> None:
    """End-to-end decoding here samples through the kernels' torch twins even under
    TRITON_INTERPRET=1 (the interpreter makes each step ~10x slower; tests/kernels compare the
    Triton kernels with the twins). Tests that ask for `triton_path` keep the interpreter."""
    monkeypatch.setenv("TRITON_INTERPRET", "0")


@pytest.fixture()
def triton_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Sample through the Triton kernels when TRITON_INTERPRET=1 was given (CI's setting)."""
    monkeypatch.setenv("TRITON_INTERPRET", _CALLER_TRITON_INTERPRET)


@pytest.fixture(scope="session")
def llm() -> Any:
    """The bundled demo model with the qwen3 reasoning parser and the hermes tool parser."""
    from thinkgate import LLM
    from thinkgate.api.chat import chat_layer_for

    model = LLM(reasoning_parser="qwen3", tool_call_parser="hermes", max_num_seqs=64)
    chat_layer_for(model)  # installs the constrained-decoding hook when LLM has not
    return model


@pytest.fixture(scope="session")
def tokenizer(llm: Any) -> Any:
    return llm.get_tokenizer()
