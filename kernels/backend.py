"""Which path runs: Triton for CUDA tensors, the torch twin for CPU tensors.

``TRITON_INTERPRET=1`` makes Triton run on CPU tensors, so it forces the Triton path there (the
tests compare the two that way).
"""

from __future__ import annotations

import os

import torch


def use_triton(t: torch.Tensor) -> bool:
    if t.device.type == "cuda":
        return True
    return t.device.type == "cpu" and os.environ.get("TRITON_INTERPRET") == "1"
