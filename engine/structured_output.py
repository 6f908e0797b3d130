"""The hook through which grammars (issue 7) plug into the step loop.

The engine calls, per request and per step:

    hook.add_request(seq)            when a sequence is created; raise ValueError to reject a
                                     bad grammar (only that request fails)
    handle = hook.start_fill(seqs)   right before the forward: start filling the batch's
                                     bitmask on the CPU (e.g. in a worker thread) so it overlaps
    bitmask = hook.finish_fill(handle)   after the forward: (B, ceil(V/32)) int32 on the logits'
                                     device, or None when no row is constrained
    hook.accept(seqs, token_ids)     after sampling: advance each row's matcher; to end a row
                                     set `seq.force_finish = ("stop", None)` (grammar done) or
                                     ("error", message) (matcher rejected a token)
    hook.remove(seq)                 when a sequence finishes or is aborted

Per-request state lives in `seq.structured_state` (and `seq.reasoning_state` for the gate).
"""

from __future__ import annotations

from typing import Any

import torch
from thinkgate.engine.sequence import Sequence


class StructuredOutputHook:
    """The default: no grammar backend, so a request asking for structured output is rejected."""

    def add_request(self, seq: Sequence) -> None:
        if seq.params.structured_outputs is not None:
            raise ValueError(
                "structured_outputs needs a grammar backend, and this engine has none installed"
            )

    def start_fill(self, seqs: list[Sequence]) -> Any:
        return None

    def finish_fill(self, handle: Any) -> torch.Tensor | None:
        return None

    def accept(self, seqs: list[Sequence], token_ids: list[int]) -> None:
        return None

    def remove(self, seq: Sequence) -> None:
        return None
