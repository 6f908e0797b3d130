"""Suffix drafts (vLLM's `suffix` method, after Suffix Decoding, arXiv 2411.04975): drafts from
what earlier requests wrote as well as from the request's own tokens.

Agent traffic repeats itself across requests: the same thinking sentence with another city,
the same call skeleton, the same answer template. Prompt lookup (`ngram`) sees only the
request's own tokens; this proposer also keeps the outputs of up to
`suffix_decoding_max_cached_requests` finished requests (oldest dropped first) and indexes
both by their 2- and 4-token runs.

A proposal for a row: the occurrences of its last 4 tokens (else its last 2) in its own tokens
and in the cached outputs, the latest `CANDIDATES` of each, are the candidates; each one's match
length is how far back it agrees with the row (at most `suffix_decoding_max_tree_depth`), and
only the longest matches are kept. The draft then walks forward: the next id is the one most
of the remaining candidates continue with, and the walk stops once the product of those shares
falls under `suffix_decoding_min_token_prob`, after `num_speculative_tokens` ids, or after
`suffix_decoding_max_spec_factor` times the match length (a long match earns a long draft).
Drafts are verified as the `ngram` method's are (speculative.py), so they change no output.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Sequence as Seq

from thinkgate.engine.sequence import Sequence

ANCHORS = (4, 2)  # the run lengths indexed, longest tried first
CANDIDATES = 32  # latest occurrences read per source and anchor


class _Index:
    """Where each 2- and 4-token run of some token lists ends: run -> [(list id, end)]."""

    def __init__(self) -> None:
        self.ends: dict[tuple[int, ...], list[tuple[int, int]]] = {}

    def add(self, key: int, tokens: Seq[int], start: int, stop: int) -> None:
        """Index the runs of `tokens` that end at positions [start, stop)."""
        for end in range(start, stop):
            for n in ANCHORS:
                if end >= n:
                    self.ends.setdefault(tuple(tokens[end - n:end]), []).append((key, end))

    def find(self, tail: tuple[int, ...]) -> list[tuple[int, int]]:
        return self.ends.get(tail, [])[-CANDIDATES:]


class SuffixProposer:
    """Drafts from a row's own tokens and the cached outputs of finished requests."""

    def __init__(self, k: int, max_depth: int, max_cached: int, spec_factor: float,
                 min_prob: float) -> None:
        self.k, self.max_depth, self.max_cached = k, max_depth, max_cached
        self.spec_factor, self.min_prob = spec_factor, min_prob
        self._outputs: OrderedDict[int, list[int]] = OrderedDict()
        self._index = _Index()
        self._next_id = 0
        self._dropped = 0  # tokens of dropped outputs still in the index
        self._kept = 0  # tokens of cached outputs

    @property
    def num_cached(self) -> int:
        return len(self._outputs)

    def add_output(self, tokens: Seq[int]) -> None:
        """Cache a finished request's output ids; the oldest beyond `max_cached` are dropped
        (their index entries are skipped, and go once they outnumber the live ones)."""
        if len(tokens) < 2 or self.max_cached <= 0:
            return
        key, self._next_id = self._next_id, self._next_id + 1
        self._outputs[key] = list(tokens)
        self._kept += len(tokens)
        self._index.add(key, self._outputs[key], 2, len(tokens))
        while len(self._outputs) > self.max_cached:
            _, old = self._outputs.popitem(last=False)
            self._kept -= len(old)
            self._dropped += len(old)
        if self._dropped > self._kept:  # rebuild from the cached outputs
            self._index, self._dropped = _Index(), 0
            for k, out in self._outputs.items():
                self._index.add(k, out, 2, len(out))

    def propose(self, seq: Sequence, limit: int) -> list[int]:
        """At most min(k, limit) draft ids for `seq` (empty when nothing matches)."""
        limit = min(self.k, limit)
        tokens = seq.token_ids
        end = len(tokens)
        if limit <= 0 or end < 3:
            return []
        own = seq.suffix_index
        if own is None:
            own = seq.suffix_index = [_Index(), 2]
        index, done = own
        # the row's own runs that end before its last token (never the tail itself)
        index.add(0, tokens, max(done, 2), end)
        own[1] = max(done, end)
        for n in ANCHORS:
            tail = tuple(tokens[end - n:])
            found = [(tokens, e) for _, e in index.find(tail)]
            found += [(out, e) for key, e in self._index.find(tail)
                      if (out := self._outputs.get(key)) is not None]
            if found:
                break
        else:
            return []
        scored = [(self._match(tokens, src, e), src, e) for src, e in found]
        best = max(m for m, _, _ in scored)
        cands = [(src, e) for m, src, e in scored if m == best]
        room = min(limit, max(1, int(self.spec_factor * best)))
        draft: list[int] = []
        chance = 1.0
        while len(draft) < room:
            nexts = Counter(src[e] for src, e in cands if e < len(src))
            if not nexts:
                break
            token, count = nexts.most_common(1)[0]
            chance *= count / len(cands)
            if chance < self.min_prob:
                break
            draft.append(token)
            cands = [(src, e + 1) for src, e in cands if e < len(src) and src[e] == token]
        return draft

    def _match(self, tokens: list[int], src: list[int], e: int) -> int:
        """How many tokens before `src[e]` equal the row's last ones (at most max_depth)."""
        m, end = 0, len(tokens)
        while m < self.max_depth and m < e and m < end and src[e - 1 - m] == tokens[end - 1 - m]:
            m += 1
        return m
