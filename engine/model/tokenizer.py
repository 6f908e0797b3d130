"""Tokenizer and end-of-sequence ids for a loaded model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from thinkgate.engine.model.model_loader import LoadedModel

# tokenizer_config.json classes that are transformers' generic tokenizers.json wrapper: loaded
# by that class directly, without AutoTokenizer's index of every model (~1-2.5 s of start-up)
GENERIC_FAST_CLASSES = frozenset({"TokenizersBackend", "PreTrainedTokenizerFast"})


def load_tokenizer(tokenizer: str | None, loaded: LoadedModel) -> Any:
    """A fast (Rust-backed) transformers tokenizer from `tokenizer` or the model's folder."""
    source = tokenizer or str(loaded.source)
    kwargs: dict[str, Any] = {}
    if tokenizer is None and loaded.gguf_file is not None:
        kwargs["gguf_file"] = loaded.gguf_file
    try:
        if not kwargs and declared_class(Path(source)) in GENERIC_FAST_CLASSES:
            from transformers import PreTrainedTokenizerFast as loader
        else:
            from transformers import AutoTokenizer as loader
        tok = loader.from_pretrained(source, **kwargs)
    except Exception as exc:  # transformers raises OSError, ValueError, KeyError...
        raise ValueError(f"could not load a tokenizer from {source!r}: {exc}") from exc
    if getattr(tok, "backend_tokenizer", None) is None:
        raise ValueError(f"tokenizer at {source!r} is not a fast (tokenizers-backed) tokenizer")
    return tok


def declared_class(folder: Path) -> str | None:
    """The `tokenizer_class` a local folder's tokenizer_config.json names, if it has one."""
    config = folder / "tokenizer_config.json"
    if not (config.is_file() and (folder / "tokenizer.json").is_file()):
        return None
    try:
        value = json.loads(config.read_text()).get("tokenizer_class")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, str) else None


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
