"""Fixtures for the kernel tests."""

from __future__ import annotations

import os

import pytest
import torch


@pytest.fixture
def gen() -> torch.Generator:
    return torch.Generator().manual_seed(1234)


@pytest.fixture
def device() -> str:
    """Where the Triton path can run: CUDA, or CPU under TRITON_INTERPRET=1 (as `make test`)."""
    if torch.cuda.is_available():
        return "cuda"
    if os.environ.get("TRITON_INTERPRET") == "1":
        return "cpu"
    pytest.skip("the Triton path needs CUDA or TRITON_INTERPRET=1 (run `make test`)")
