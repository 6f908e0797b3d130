"""The token trace as JSON: engine/core/token_trace.py's entries with each token's text.

A chat request with `"thinkgate": {"trace": true}` gets, per choice, `"thinkgate": {"trace":
[...]}`: in a stream on chunks of their own (empty `delta`) as the tokens arrive, in a full
answer once for the whole choice. One object per generated token:

    {"token_id": 151668, "text": "</think>", "masked": false, "num_allowed": null,
     "thinking": true, "forced": false, "ended_thinking": true}

`text` is the token decoded alone (special tokens kept), so a character split across tokens
shows as U+FFFD on each part.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def trace_json(tokenizer: Any, entries: Sequence[tuple]) -> list[dict[str, Any]]:
    """One JSON object per (token_id, masked, num_allowed, thinking, forced, ended) entry."""
    texts = [tokenizer.decode([e[0]], skip_special_tokens=False) for e in entries]
    return [{"token_id": token, "text": text, "masked": masked, "num_allowed": allowed,
             "thinking": thinking, "forced": forced, "ended_thinking": ended}
            for (token, masked, allowed, thinking, forced, ended), text in zip(entries, texts)]


def trace_field(tokenizer: Any, entries: Sequence[tuple]) -> dict[str, Any]:
    """The `thinkgate` member of a choice carrying `entries`."""
    return {"thinkgate": {"trace": trace_json(tokenizer, entries)}}
