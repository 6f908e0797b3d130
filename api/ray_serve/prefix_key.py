"""A request body → the block hashes of its prompt, as the replica's prefix cache names them.

The ingress holds the model's tokenizer and a `ChatLayer` built with the replicas' flags (chat
template, parsers), so a chat request renders and tokenizes here exactly as on the replica
(`ChatLayer.prepare`: template, tools, `chat_template_kwargs`, reasoning effort), and a
completions prompt is its text's or token ids' own. The hashes are `engine/kv/prefix_cache.py`'s
chained block hashes over those ids, hex-encoded. Responses and Messages requests take a
rendering of their instructions / system, tools and input instead: not the replica's exact
blocks, but the same text gives the same key, so their shared prefixes still meet on one replica.
A body that cannot be read gives no hashes (the router falls back to power of two choices); the
replica answers its error.
"""

from __future__ import annotations

import argparse
import json
import logging
from typing import Any

from thinkgate.engine.kv.prefix_cache import extend_block_hashes

logger = logging.getLogger(__name__)

MAX_KEY_BLOCKS = 512  # a prompt's first blocks name it well enough; longer ones cost hashing


class PrefixKeys:
    """Prompt block hashes for the routed endpoints."""

    def __init__(self, chat: Any, block_size: int, max_blocks: int = MAX_KEY_BLOCKS) -> None:
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        self.chat = chat
        self.block_size = block_size
        self.max_blocks = max_blocks

    @classmethod
    def for_flags(cls, ns: argparse.Namespace) -> PrefixKeys:
        """The tokenizer and chat layer of `thinkgate serve` flags, without loading the model."""
        from thinkgate.api.chat import ChatLayer
        from thinkgate.api.launch import chat_kwargs
        from thinkgate.engine.config import EngineConfig
        from thinkgate.engine.model.model_loader import resolve_model_path
        from transformers import AutoTokenizer

        folder, gguf_file = resolve_model_path(ns.model)
        kwargs = {"gguf_file": gguf_file} if ns.tokenizer is None and gguf_file else {}
        tokenizer = AutoTokenizer.from_pretrained(ns.tokenizer or str(folder), **kwargs)
        chat = ChatLayer(tokenizer, **chat_kwargs(ns))
        return cls(chat, ns.block_size or EngineConfig.block_size)

    def hashes(self, path: str, body: bytes) -> list[str]:
        """The hex block hashes of the prompt of a POST to `path`; [] when there is none."""
        try:
            data = json.loads(body)
            ids = self.prompt_ids(path, data) if isinstance(data, dict) else None
        except Exception:  # the replica answers this body's error
            logger.debug("no prefix key for a %s body", path, exc_info=True)
            return []
        if not ids:
            return []
        blocks = min(len(ids) // self.block_size, self.max_blocks)
        return [h.hex() for h in extend_block_hashes([], ids, self.block_size, blocks)]

    def prompt_ids(self, path: str, data: dict[str, Any]) -> list[int] | None:
        if path == "/v1/chat/completions":
            return self.chat.prepare(
                data["messages"], tools=data.get("tools"), tool_choice=data.get("tool_choice"),
                chat_template_kwargs=data.get("chat_template_kwargs"),
                reasoning_effort=data.get("reasoning_effort"),
                add_generation_prompt=data.get("add_generation_prompt", True),
                chat_template=data.get("chat_template")).prompt_token_ids
        if path == "/v1/completions":
            prompt = data.get("prompt")
            if isinstance(prompt, list) and prompt and isinstance(prompt[0], int):
                return prompt
            if isinstance(prompt, list) and len(prompt) == 1:
                prompt = prompt[0]
            return self.chat.encode_prompt(prompt) if isinstance(prompt, str) else None
        if path in ("/v1/responses", "/v1/messages"):
            head = {k: data.get(k) for k in ("instructions", "system", "tools")}
            text = json.dumps(head, sort_keys=True) + json.dumps(data.get("input")
                                                                 or data.get("messages"))
            return self.chat.encode_prompt(text)
        return None
