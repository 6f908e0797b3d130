"""The host-side twin of a row's reasoning state: thinking or answering, O(1) per token.

The kernels keep the same state on the device to gate the grammar mask and force the end
marker without a host sync; this twin lets the CPU side know, from the sampled ids it reads back
anyway, whether a row's matcher should see a token, and counts reasoning tokens for usage.

Semantics (per row): while thinking, each sampled id advances a match of the end-of-thinking
marker (one id or several; partial matches fall back like KMP, so `a a b` is found in
`a a a b`). When the match completes the row is answering, and the marker's ids are not reasoning
tokens. With a `budget`, once that many free reasoning tokens are spent the row must emit the
rest of the marker: `forced_token()` names the next one. These are exactly the semantics of
`kernels/reasoning.py` (tests/constrained/test_reasoning_gate.py checks it step by step).
"""

from __future__ import annotations

from collections.abc import Sequence


def _failure(marker: Sequence[int]) -> list[int]:
    """KMP failure function: fail[i] = length of the longest proper border of marker[:i+1]."""
    fail = [0] * len(marker)
    k = 0
    for i in range(1, len(marker)):
        while k and marker[i] != marker[k]:
            k = fail[k - 1]
        if marker[i] == marker[k]:
            k += 1
        fail[i] = k
    return fail


class ReasoningGate:
    """One row's thinking/answering state, the host twin of a `kernels.ReasoningState` slot.

    end_ids: the end-of-thinking marker's token ids; answering: the prompt already closed
    thinking; budget: free reasoning tokens (a partly matched marker not counted) after which
    the rest of the marker is forced; None = unlimited.
    """

    __slots__ = ("end_ids", "answering", "budget", "progress", "num_reasoning_tokens", "_fail")

    def __init__(self, end_ids: Sequence[int], answering: bool = False,
                 budget: int | None = None) -> None:
        if not end_ids:
            raise ValueError("a reasoning gate needs the end-of-thinking marker ids, got none")
        if budget is not None and budget < 0:
            raise ValueError(f"thinking_token_budget must be >= 0, got {budget}")
        self.end_ids = [int(t) for t in end_ids]
        self.answering = answering
        self.budget = budget
        self.progress = 0  # marker ids matched so far
        self.num_reasoning_tokens = 0  # ids sampled while thinking, the completed marker's not
        self._fail = _failure(self.end_ids)

    def forced_token(self) -> int | None:
        """The id the row must sample next (budget spent, marker not complete), else None."""
        if self.answering or self.budget is None:
            return None
        if self.num_reasoning_tokens - self.progress < self.budget:
            return None
        return self.end_ids[self.progress]

    def advance(self, token_id: int) -> None:
        """Record one sampled id."""
        if self.answering:
            return
        marker, k = self.end_ids, self.progress
        while k and marker[k] != token_id:
            k = self._fail[k - 1]
        if marker[k] == token_id:
            k += 1
        if k == len(marker):
            self.answering, k = True, 0
            self.num_reasoning_tokens -= len(marker) - 1  # its earlier ids were counted
        else:
            self.num_reasoning_tokens += 1
        self.progress = k
