"""Fixtures: the demo model behind one shared `LLM`, and a tiny random Qwen3 checkpoint."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from checkpoints import make_checkpoint


@pytest.fixture(scope="session")
def demo_dir() -> str:
    override = os.environ.get("THINKGATE_TEST_MODEL")
    if override:
        return override
    from thinkgate.engine.demo import demo_model_path

    return demo_model_path()


@pytest.fixture(scope="session")
def llm(demo_dir: str) -> Any:
    from thinkgate import LLM

    return LLM(model=demo_dir, max_num_seqs=64)


@pytest.fixture(scope="session")
def triton_llm(demo_dir: str) -> Any:
    """The demo model on the paged kernels (attention_backend TRITON_ATTN; CPU: eager)."""
    from thinkgate import LLM

    return LLM(model=demo_dir, attention_backend="TRITON_ATTN", max_num_seqs=8)


@pytest.fixture(scope="session")
def tiny_qwen3(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tiny_qwen3")
    make_checkpoint(folder, "qwen3").save_pretrained(folder)
    return folder
