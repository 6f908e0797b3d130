"""Any other architecture: transformers' AutoModelForCausalLM, run without a KV cache.

Each step recomputes every row's whole sequence (right-padded, with an attention mask), so a
step costs O(length) — correct for every model transformers knows, but far slower than the
native path. The runner sees `needs_full_sequence` and feeds whole sequences.
"""

from __future__ import annotations

import torch
from torch import nn


class TransformersFallback(nn.Module):
    needs_full_sequence = True

    def __init__(self, hf_model: nn.Module) -> None:
        super().__init__()
        self.hf_model = hf_model.eval()

    def last_logits(self, input_ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Logits (B, V) at position `lengths - 1` of each right-padded row of `input_ids`."""
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        attention_mask = (positions.unsqueeze(0) < lengths.unsqueeze(1)).long()
        logits = self.hf_model(input_ids=input_ids, attention_mask=attention_mask).logits
        rows = torch.arange(input_ids.shape[0], device=input_ids.device)
        return logits[rows, lengths - 1].float()
