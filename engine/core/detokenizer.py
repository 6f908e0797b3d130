"""Incremental detokenization with stop strings, O(new tokens) per step.

Text comes from `tokenizers.decoders.DecodeStream` (handles UTF-8 split across tokens and the
leading-space rules of each decoder), seeded with the last prompt tokens for context. Stop
strings: text that could still be the start of a stop string is held back in `pending` and
released only once it cannot; a stop string can only begin inside `pending`, so the search
never looks at released text.
"""

from __future__ import annotations

from typing import Any

from tokenizers.decoders import DecodeStream

_PROMPT_CONTEXT = 4  # prompt tokens fed to the stream so the first output token decodes in context


class IncrementalDetokenizer:
    def __init__(
        self,
        backend: Any,  # a tokenizers.Tokenizer
        prompt_token_ids: list[int],
        skip_special_tokens: bool,
        stop: list[str],
        include_stop_str_in_output: bool,
    ) -> None:
        self.backend = backend
        self.stream = DecodeStream(
            ids=list(prompt_token_ids[-_PROMPT_CONTEXT:]), skip_special_tokens=skip_special_tokens
        )
        self.stop = stop
        self.include_stop = include_stop_str_in_output
        self.released: list[str] = []
        self.pending = ""
        self.new_text = ""  # released by the last call to `step` or `flush`

    def start_step(self) -> None:
        """Forget the text released by the previous step (`new_text` is per step)."""
        self.new_text = ""

    def step(self, token_id: int, match_stop: bool = True) -> str | None:
        """Decode one token; return the stop string it completed, if any (and `match_stop`)."""
        piece = self.stream.step(self.backend, token_id)
        if not piece:
            return None
        if not self.stop:
            self._release(piece)
            return None
        self.pending += piece
        hit = self._find_stop() if match_stop else None
        if hit is not None:
            index, stop = hit
            self._release(self.pending[: index + (len(stop) if self.include_stop else 0)])
            self.pending = ""
            return stop
        hold = self._held_back_length()
        self._release(self.pending[: len(self.pending) - hold])
        self.pending = self.pending[len(self.pending) - hold :]
        return None

    def flush(self) -> None:
        """Release held-back text (the sequence ended for another reason)."""
        if self.pending:
            self._release(self.pending)
            self.pending = ""

    @property
    def text(self) -> str:
        return "".join(self.released)

    def _release(self, text: str) -> None:
        if text:
            self.released.append(text)
            self.new_text += text

    def _find_stop(self) -> tuple[int, str] | None:
        best: tuple[int, str] | None = None
        for stop in self.stop:
            index = self.pending.find(stop)
            if index >= 0 and (best is None or index < best[0]):
                best = (index, stop)
        return best

    def _held_back_length(self) -> int:
        """The longest suffix of `pending` that is a proper prefix of some stop string."""
        pending = self.pending
        longest = 0
        for stop in self.stop:
            for length in range(min(len(stop) - 1, len(pending)), longest, -1):
                if pending.endswith(stop[:length]):
                    longest = length
                    break
        return longest
