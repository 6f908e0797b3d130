"""The byte-level BPE tokenizer both bundled models share, built so that copying is easy.

Words and numbers never carry the space before them (GPT-2 style tokenizers fold it in, so
" Lisbon" in a question and "Lisbon" inside a JSON string are different tokens, and often split
differently), and every digit is its own token. A value is then the same token sequence
wherever it appears, and copying it is an induction a small transformer learns quickly.
"""

from __future__ import annotations

import random

from thinkgate.benchmarks.training.chats import make_chat

VOCAB_SIZE = 4096  # BPE tokens (bytes, merges, special); the added markers come on top
PRETOKENIZE = r"'(?:s|t|re|ve|m|ll|d)|\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+|\s+"
STDLIB_CHARS = 2_000_000


def corpus(seed: int, num_chats: int = 6000) -> list[str]:
    """Python standard library sources (for code prompts) and rendered training chats."""
    from thinkgate.engine.demo.build import stdlib_texts

    texts = stdlib_texts(STDLIB_CHARS)
    rng = random.Random(seed)
    for i in range(num_chats):
        chat = make_chat(rng, "demo" if i % 2 else "reasoner")
        texts.append(" ".join(m["content"] for m in chat.messages) + " " + chat.completion)
        texts.extend(str(t) for t in chat.tools or [])
    return texts


def train_tokenizer(seed: int, chat_template: str):
    """A transformers fast tokenizer: BPE on `corpus(seed)`, Qwen's special and added tokens."""
    from thinkgate.engine.demo.build import bpe_tokenizer
    from tokenizers import Regex, pre_tokenizers

    pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRETOKENIZE), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    return bpe_tokenizer(pre_tokenizer, corpus(seed), VOCAB_SIZE, chat_template)
