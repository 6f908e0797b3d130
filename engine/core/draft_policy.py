"""When an n-gram draft pays: each row's acceptance, measured on every proposal, and a verify
step only where the drafts' expected gain covers what the step costs more than a plain one.

A row's acceptance rate is the chance that a draft token is the token the row samples there
(so, for a deterministic draft, that it is kept). It is measured on every proposal, verified
or not: a proposal that does not run stays as the row's *shadow*, and the tokens the row writes
next (sampled or forced) tell how many of its ids it would have kept, since a kept draft token
is exactly the token plain decoding gives (speculative.py). So a row that stops drafting keeps
being scored and drafts again as soon as its text starts repeating. Counts decay
(`DECAY` per observation), so the rate follows the text.

Per row, a draft keeps its leading ids while the chance that all of them are accepted stays at
least `MIN_CHANCE` (rate ** i for the i-th id), so a row that keeps little drafts nothing. Per
step, the drafts run only when their expected kept tokens reach what the verify step costs over
a plain step, in tokens: `(rows + forced ids) * (cost ratio - 1)`, the cost ratio being the
engine's measured seconds per verify step over seconds per plain step at that batch size
(`StepCosts`); otherwise every draft becomes a shadow and the step is a plain one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

DECAY = 0.85  # weight of an older observation, per newer one
MIN_CHANCE = 0.3  # a draft id is proposed while the chance that it is kept is at least this
PRIOR_HITS, PRIOR_TRIES = 1.0, 2.0  # a new row's rate: 0.5
DEFAULT_COST_RATIO = 1.3  # verify step / plain step before either has been timed at a size
_EMA = 0.1  # weight of a new step's time in its size's mean


@dataclass
class RowAcceptance:
    """One row's decayed counts of draft ids compared (`tries`) and kept (`hits`), and its
    last proposal that did not run (`shadow`, proposed when the row had `shadow_at` tokens)."""

    hits: float = PRIOR_HITS
    tries: float = PRIOR_TRIES
    shadow: list[int] = field(default_factory=list)
    shadow_at: int = 0

    @property
    def rate(self) -> float:
        return self.hits / self.tries

    def note(self, hits: int, tries: int) -> None:
        """`tries` draft ids compared, the first `hits` of them kept."""
        if tries:
            self.hits = self.hits * DECAY ** tries + hits
            self.tries = self.tries * DECAY ** tries + tries

    def settle(self, token_ids: list[int]) -> None:
        """Score the shadow against the tokens written after it (if any came)."""
        got = token_ids[self.shadow_at:self.shadow_at + len(self.shadow)]
        if not self.shadow or not got:
            return
        kept = 0
        while kept < len(got) and got[kept] == self.shadow[kept]:
            kept += 1
        self.note(kept, kept + (kept < len(got)))
        self.shadow = []

    def worth(self, proposal: list[int]) -> int:
        """How many leading ids of `proposal` to draft."""
        rate, chance, n = self.rate, 1.0, 0
        for _ in proposal:
            chance *= rate
            if chance < MIN_CHANCE:
                break
            n += 1
        return n

    def expected(self, n: int) -> float:
        """Expected kept ids of an n-id draft."""
        rate = self.rate
        return sum(rate ** i for i in range(1, n + 1))


class StepCosts:
    """Mean seconds of plain and verify steps per batch size (powers of two), as timed."""

    def __init__(self) -> None:
        self.plain: dict[int, float] = {}
        self.verify: dict[int, float] = {}

    @staticmethod
    def _bucket(rows: int) -> int:
        return 1 << max(rows - 1, 0).bit_length()

    def note(self, rows: int, verified: bool, seconds: float) -> None:
        means = self.verify if verified else self.plain
        bucket = self._bucket(rows)
        old = means.get(bucket)
        means[bucket] = seconds if old is None else old + _EMA * (seconds - old)

    def ratio(self, rows: int) -> float:
        bucket = self._bucket(rows)
        plain, verify = self.plain.get(bucket), self.verify.get(bucket)
        if plain is None or verify is None or plain <= 0:
            return DEFAULT_COST_RATIO
        return verify / plain
