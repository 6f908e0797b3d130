"""Engine logprobs → OpenAI's two logprobs shapes (chat `content` list, completions block)."""

from __future__ import annotations

from typing import Any

from thinkgate.engine.outputs import Logprob


def token_text(tokenizer: Any, token_id: int, lp: Logprob | None) -> str:
    if lp is not None and lp.decoded_token is not None:
        return lp.decoded_token
    return tokenizer.decode([token_id])


def _ranked(entry: dict[int, Logprob], top: int) -> list[tuple[int, Logprob]]:
    return sorted(entry.items(), key=lambda kv: -kv[1].logprob)[:top]


def chat_logprobs(tokenizer: Any, token_ids: list[int], entries: list[dict[int, Logprob]],
                  top: int) -> list[dict[str, Any]]:
    """OpenAI chat `logprobs.content`: one item per token with its `top_logprobs`."""
    items = []
    for token_id, entry in zip(token_ids, entries):
        chosen = entry.get(token_id)
        text = token_text(tokenizer, token_id, chosen)
        tops = [{"token": (t := token_text(tokenizer, tid, lp)), "logprob": lp.logprob,
                 "bytes": list(t.encode("utf-8"))} for tid, lp in _ranked(entry, top)]
        items.append({"token": text, "logprob": chosen.logprob if chosen else None,
                      "bytes": list(text.encode("utf-8")), "top_logprobs": tops})
    return items


def completion_logprobs(tokenizer: Any, token_ids: list[int], entries: list[dict[int, Logprob]],
                        top: int, offset: int) -> dict[str, Any]:
    """OpenAI completions `logprobs`: tokens, token_logprobs, top_logprobs, text_offset."""
    tokens, token_lps, tops, offsets = [], [], [], []
    for token_id, entry in zip(token_ids, entries):
        chosen = entry.get(token_id)
        text = token_text(tokenizer, token_id, chosen)
        tokens.append(text)
        token_lps.append(chosen.logprob if chosen else None)
        tops.append({token_text(tokenizer, t, lp): lp.logprob for t, lp in _ranked(entry, top)}
                    if top else None)
        offsets.append(offset)
        offset += len(text)
    return {"tokens": tokens, "token_logprobs": token_lps, "top_logprobs": tops,
            "text_offset": offsets}
