"""Tokenizer and end-of-sequence ids for a loaded model."""

from __future__ import annotations

import json
from typing import Any

from thinkgate.engine.model.model_loader import LoadedModel


def load_tokenizer(tokenizer: str | None, loaded: LoadedModel) -> Any:
    """A fast (Rust-backed) transformers tokenizer from `tokenizer` or the model's folder."""
    from transformers import AutoTokenizer

    source = tokenizer or str(loaded.source)
    kwargs: dict[str, Any] = {}
    if tokenizer is None and loaded.gguf_file is not None:
        kwargs["gguf_file"] = loaded.gguf_file
    try:
        tok = AutoTokenizer.from_pretrained(source, **kwargs)
    except Exception as exc:  # transformers raises OSError, ValueError, KeyError...
        raise ValueError(f"could not load a tokenizer from {source!r}: {exc}") from exc
    if getattr(tok, "backend_tokenizer", None) is None:
        raise ValueError(f"tokenizer at {source!r} is not a fast (tokenizers-backed) tokenizer")
    return tok


def eos_token_ids(loaded: LoadedModel, tokenizer: Any) -> set[int]:
    """generation_config.json's eos_token_id (int or list), the config's, and the tokenizer's."""
    ids: set[int] = set()

    def add(value: Any) -> None:
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, list):
            ids.update(v for v in value if isinstance(v, int))

    generation_config = loaded.source / "generation_config.json"
    if generation_config.is_file():
        add(json.loads(generation_config.read_text()).get("eos_token_id"))
    add(loaded.hf_config.get("eos_token_id"))
    add(getattr(tokenizer, "eos_token_id", None))
    return ids
