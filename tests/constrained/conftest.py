"""Fixtures for the constrained-decoding tests: one demo-model LLM for the whole directory."""

from __future__ import annotations

from typing import Any

import pytest


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
