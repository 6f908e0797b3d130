"""`PromptTokenizer`: chat prompts tokenized piece by piece, the long pieces remembered.

Agents resend the same long system prompt, tool list and earlier turns with every request, and
the API process spent ~1.1 ms of CPU (of a cached request's ~12 ms end to end) re-tokenizing
a 1,231-token system prompt each time. A rendered chat prompt is a run of text pieces
separated by control tokens (`<|im_start|>`, `<|im_end|>`); a Hugging Face fast tokenizer
splits its input at added tokens before it normalizes and pre-tokenizes, so each piece is
tokenized on its own and the prompt's ids are the pieces' ids with the control tokens' ids in
between. `encode` splits at those tokens, reuses the ids of every piece it has seen (least
recently used out beyond `max_chars`) and tokenizes only the new ones, so a repeated prefix
costs a dictionary look-up per piece.

Only where that identity holds by construction: separator tokens must be added tokens that are
matched on the raw text (`normalized=False`) and absorb nothing around them (no `lstrip`,
`rstrip`, `single_word`), no other added token may overlap one, and the tokenizer's normalizer
and pre-tokenizer must treat each piece alike wherever it sits (no `Metaspace`, which marks
only the first piece, no `ByteLevel(add_prefix_space=True)`). A probe at start-up then
compares piecewise and whole tokenization on awkward strings; any other tokenizer, or a failed
probe, tokenizes whole prompts as before (`enabled` is False).
"""

from __future__ import annotations

import itertools
import json
import re
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

# normalizers and pre-tokenizers that act on each piece the same wherever it sits
_SAFE_NORMALIZERS = {"NFC", "NFD", "NFKC", "NFKD", "Lowercase", "StripAccents", "Sequence"}
_SAFE_PRE_TOKENIZERS = {"ByteLevel", "Split", "Digits", "Punctuation", "Whitespace",
                        "WhitespaceSplit", "UnicodeScripts", "CharDelimiterSplit", "Sequence"}
_PROBE_TEXTS = ("", "a", " ", "\n", "\n\n", "  x", "hello world", " 12345 ", "é漢字🙂",
                "x\n\n", "{\"k\": [1, 2]}", "\t-")
MIN_CACHED_CHARS = 64  # shorter pieces cost less to tokenize than to remember
PROBED_SEPARATORS = 4  # the probe tries this many (those in the chat template first)


# encode_bounded: prompts up to this many characters per allowed token are tokenized whole at
# once (real text runs 3-5 characters a token); longer ones are counted in chunks first
WHOLE_CHARS_PER_TOKEN = 8
CHUNK_CHARS = 1 << 16
BOUNDARY_SLACK = 8  # tokens a cut between chunks (made at whitespace) may add to the count


class PromptTooLong(ValueError):
    """A prompt surely longer than the model's context, found without tokenizing all of it."""

    code = "context_length_exceeded"

    def __init__(self, at_least: int, max_tokens: int, param: str = "messages") -> None:
        super().__init__(f"This model's maximum context length is {max_tokens} tokens. However, "
                         f"the prompt has more than {at_least} tokens. Please reduce the length "
                         "of the input.")
        self.at_least, self.max_tokens, self.param = at_least, max_tokens, param


def encode_bounded(encode: Callable[[str], list[int]], text: str, max_tokens: int | None,
                   param: str = "messages",
                   encode_chunk: Callable[[str], list[int]] | None = None) -> list[int]:
    """`encode(text)`, or PromptTooLong when `text` has more than `max_tokens` tokens, found by
    tokenizing (with `encode_chunk`, default `encode`) about `max_tokens` tokens' worth of it: a
    20 MB prompt costs what its first context window costs, not seconds and gigabytes, and holds
    the GIL a chunk at a time."""
    encode_chunk = encode_chunk or encode
    if max_tokens is None or len(text) <= WHOLE_CHARS_PER_TOKEN * (max_tokens + 1):
        return encode(text)
    counted, start = 0, 0
    for num_chunks in itertools.count(1):
        if start >= len(text):
            break
        end = _chunk_end(text, start)
        counted += len(encode_chunk(text[start:end]))
        start = end
        at_least = counted - BOUNDARY_SLACK * (num_chunks - 1)
        if at_least > max_tokens:
            raise PromptTooLong(at_least, max_tokens, param)
    return encode(text)


def _chunk_end(text: str, start: int) -> int:
    """Where the chunk from `start` ends: at the last newline (else space) of its window."""
    end = start + CHUNK_CHARS
    if end >= len(text):
        return len(text)
    for mark in ("\n", " "):
        cut = text.rfind(mark, start + CHUNK_CHARS // 2, end)
        if cut > start:
            return cut
    return end


class PromptTokenizer:
    """`encode(text)`: the ids `tokenizer.encode(text, add_special_tokens=False)` gives."""

    def __init__(self, tokenizer: Any, max_chars: int = 4_000_000) -> None:
        self.tokenizer = tokenizer
        self.max_chars = max_chars
        self.separators = _separators(tokenizer)
        self._pieces: OrderedDict[str, list[int]] = OrderedDict()
        self._chars = 0
        self.hits = self.misses = 0
        self._split = None
        if self.separators:
            alternatives = sorted(self.separators, key=len, reverse=True)
            self._split = re.compile("(" + "|".join(map(re.escape, alternatives)) + ")").split
            if not self._probe():
                self.separators, self._split = {}, None

    @property
    def enabled(self) -> bool:
        return self._split is not None

    def _whole(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def encode(self, text: str) -> list[int]:
        if self._split is None:
            return self._whole(text)
        ids: list[int] = []
        parts = self._split(text)
        for i, part in enumerate(parts):
            if i % 2:  # the split pattern's group: a separator token
                ids.append(self.separators[part])
            elif part:
                ids.extend(self._piece(part))
        return ids

    def _piece(self, text: str) -> list[int]:
        if len(text) < MIN_CACHED_CHARS:
            return self._whole(text)
        ids = self._pieces.get(text)
        if ids is not None:
            self._pieces.move_to_end(text)
            self.hits += 1
            return ids
        self.misses += 1
        ids = self._whole(text)
        if len(text) <= self.max_chars:
            self._pieces[text] = ids
            self._chars += len(text)
            while self._chars > self.max_chars:
                old, _ = self._pieces.popitem(last=False)
                self._chars -= len(old)
        return ids

    def _probe(self) -> bool:
        """Piecewise equals whole tokenization on every probe string around every separator."""
        template = str(getattr(self.tokenizer, "chat_template", None) or "")
        seps = sorted(self.separators, key=lambda s: s not in template)[:PROBED_SEPARATORS]
        for a, b in itertools.product(_PROBE_TEXTS, _PROBE_TEXTS[::3]):
            for sep in seps:
                for text in (a + sep + b, sep + a + sep + b + sep, a + sep + sep + b):
                    pieces = self._split(text)
                    piecewise: list[int] = []
                    for i, part in enumerate(pieces):
                        if i % 2:
                            piecewise.append(self.separators[part])
                        elif part:
                            piecewise.extend(self._whole(part))
                    if piecewise != self._whole(text):
                        return False
        return True


def _separators(tokenizer: Any) -> dict[str, int]:
    """Added tokens safe to split a prompt at (content -> id); empty where splitting is unsafe."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or getattr(tokenizer, "split_special_tokens", False):
        return {}
    try:
        specs = [_state(backend.normalizer), _state(backend.pre_tokenizer)]
        added = backend.get_added_tokens_decoder()
    except Exception:  # noqa: BLE001 - a tokenizer we cannot inspect is not split
        return {}
    if not (_types_ok(specs[0], _SAFE_NORMALIZERS) and _types_ok(specs[1], _SAFE_PRE_TOKENIZERS)):
        return {}
    contents = [t.content for t in added.values()]
    out: dict[str, int] = {}
    for token_id, token in added.items():
        content = token.content
        if (not content or token.normalized or token.lstrip or token.rstrip
                or token.single_word):
            continue
        if any(other != content and _overlap(content, other) for other in contents):
            continue
        out[content] = token_id
    return out


def _state(component: Any) -> dict[str, Any] | None:
    return None if component is None else json.loads(component.__getstate__())


def _types_ok(node: dict[str, Any] | None, allowed: set[str]) -> bool:
    if node is None:
        return True
    kind = node.get("type")
    if kind not in allowed:
        return False
    if kind == "ByteLevel" and node.get("add_prefix_space"):
        return False
    children = node.get("normalizers") or node.get("pretokenizers") or []
    return all(_types_ok(child, allowed) for child in children)


def _overlap(a: str, b: str) -> bool:
    """Whether a match of `a` and one of `b` could share characters (containment, or a suffix
    of one that is a prefix of the other)."""
    if a in b or b in a:
        return True
    return any(a.endswith(b[:k]) or b.endswith(a[:k]) for k in range(1, min(len(a), len(b))))
