"""When an n-gram draft pays: each row's acceptance, measured on every proposal, and a verify
step only where the drafts' expected gain covers what the step costs more than a plain one.

A row's acceptance is the chance that a draft's first id is the token the row samples there
(so, for a deterministic draft, that it is kept) and the chance that an id after a kept one is
(a copied span, once its first id matches, tends to go on matching). Both are measured on every
proposal, verified or not: a proposal that does not run stays as the row's *shadow*, and the
tokens the row writes next (sampled or forced) tell how many of its ids it would have kept,
since a kept draft token is exactly the token plain decoding gives (speculative.py). So a row
that stops drafting keeps being scored and drafts again as soon as its text starts repeating.
Counts decay (`DECAY` per observation), so the rates follow the text.

Per row, a draft keeps its leading ids while the chance that all of them are kept stays at
least the step's cut (`StepCosts.min_chance`), so a row that keeps little drafts nothing. Per
step, the drafts run at the width (ids per row at most) whose expected tokens per unit of time
are the most, if that beats a plain step: a verify step's cost in plain steps is a line in the
width fitted to the engine's own timings of both at that batch size (`StepCosts`); otherwise
every draft becomes a shadow and the step is a plain one.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

DECAY = 0.85  # weight of an older observation, per newer one
# a draft id is proposed while the chance that it is kept is at least the step's cut: at batch 1
# twice the fitted cost per width within these bounds, else the upper (StepCosts.min_chance)
MIN_CHANCE, MIN_CHANCE_FLOOR = 0.3, 0.1
PRIOR_FIRST = (1.0, 2.0)  # a new row's chances: 0.5 for a draft's first id, 0.75 for the next
PRIOR_NEXT = (3.0, 4.0)
DEFAULT_FIXED, DEFAULT_SLOPE = 0.1, 0.05  # a verify step's cost guessed before it is timed
MAX_RATIO = 4.0  # a slower verify step is counted as this (a busy machine, a first call)
WINDOW = 16  # plain steps timed per median
VERIFY_WINDOW = 32  # verify steps, of any width, per fit
MIN_SAMPLES = 4  # a width's own timings count in the slope from this many samples
LOW_QUANTILE = 0.25  # of a window of timings: the estimate (a busy machine only adds time)
MAX_SLOPE = 0.5  # per width, in plain steps (a guard against a slope fitted to noise)


@dataclass
class RowAcceptance:
    """One row's decayed counts of draft ids compared and kept, at a draft's first position
    (`first_*`) and after a kept id (`next_*`: a copied span, once its first id matches, tends
    to go on matching), and its last proposal that did not run (`shadow`, proposed when the
    row had `shadow_at` tokens)."""

    first_hits: float = PRIOR_FIRST[0]
    first_tries: float = PRIOR_FIRST[1]
    next_hits: float = PRIOR_NEXT[0]
    next_tries: float = PRIOR_NEXT[1]
    shadow: list[int] = field(default_factory=list)
    shadow_at: int = 0

    @property
    def rate(self) -> float:
        """The chance that a draft's first id is kept."""
        return self.first_hits / self.first_tries

    @property
    def next_rate(self) -> float:
        """The chance that an id after a kept one is kept."""
        return self.next_hits / self.next_tries

    def note(self, hits: int, tries: int) -> None:
        """`tries` draft ids compared, the first `hits` of them kept."""
        if tries:
            self.first_hits = self.first_hits * DECAY + (hits > 0)
            self.first_tries = self.first_tries * DECAY + 1
        if hits and tries > 1:  # the ids after the first, compared once it was kept
            after = tries - 1
            self.next_hits = self.next_hits * DECAY ** after + max(hits - 1, 0)
            self.next_tries = self.next_tries * DECAY ** after + after

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

    def gains(self, n: int) -> list[float]:
        """Expected kept ids of a 1-, 2-, ..., n-id draft."""
        chance, total, out = self.rate, 0.0, []
        for _ in range(n):
            total += chance
            out.append(total)
            chance *= self.next_rate
        return out

    def worth(self, proposal: list[int], min_chance: float = MIN_CHANCE) -> int:
        """How many leading ids of `proposal` to draft: while the chance that all of them are
        kept is at least `min_chance`."""
        chance, n = self.rate, 0
        for _ in proposal:
            if chance < min_chance:
                break
            n += 1
            chance *= self.next_rate
        return n


class StepCosts:
    """What a verify step costs over a plain step, per batch size (powers of two) and whether
    a row of the batch is under a grammar (its draft positions' masks cost more than the rest
    of the step), as a line in the draft width (the widest row's draft ids): a fixed part (the
    ragged inputs, the draft positions' masks and samples, a wider forward) plus a part per
    width.

    Other processes on the machine only ever add time to a step, so each estimate is the low
    quantile (`LOW_QUANTILE`) of its window, not the median: a plain step's seconds, and the
    verify steps' ratios to it, pooled over every width timed at that size. The slope is
    `DEFAULT_SLOPE` until two widths have `MIN_SAMPLES` samples each (then the median slope
    between them, at most `MAX_SLOPE`); the fixed part comes from every sample less its
    width's part. So a step another process slowed moves no estimate, and a width timed once
    on a busy moment is not priced out for good, as per-width medians priced it: such a width
    ran again only if it looked cheap (a scratch simulation with 10-20% of steps slowed 2-4x
    kept per-width medians at 1.5-1.8 ids a drafted step where 4 paid, this line at 3.8-4.0).
    Before any verify step is timed at a size the guess is `DEFAULT_FIXED` + `DEFAULT_SLOPE`
    per width, so that it gets tried."""

    def __init__(self) -> None:
        self.plain: dict[tuple[int, bool], deque[float]] = {}
        self._plain_median: dict[tuple[int, bool], float] = {}
        self.samples: dict[tuple[int, bool], deque[tuple[int, float]]] = {}  # (width, ratio)
        self._line: dict[tuple[int, bool], tuple[float, float]] = {}  # (fixed, slope)

    @staticmethod
    def _bucket(rows: int) -> int:
        return 1 << max(rows - 1, 0).bit_length()

    def note(self, rows: int, width: int, seconds: float, constrained: bool = False) -> None:
        """A decode step of `rows` rows whose widest draft had `width` ids (0: a plain step)."""
        key = self._bucket(rows), constrained
        if not width:
            window = self.plain.setdefault(key, deque(maxlen=WINDOW))
            window.append(seconds)
            self._plain_median[key] = _low(window)
            return
        plain = self._plain_median.get(key)
        if plain is None:
            return
        samples = self.samples.setdefault(key, deque(maxlen=VERIFY_WINDOW))
        samples.append((width, min(seconds / plain, MAX_RATIO)))
        self._line.pop(key, None)  # fitted again when next asked

    def _fitted(self, rows: int, constrained: bool) -> tuple[float, float]:
        key = self._bucket(rows), constrained
        line = self._line.get(key)
        if line is None:
            samples = self.samples.get(key)
            if not samples:
                return 1 + DEFAULT_FIXED, DEFAULT_SLOPE
            line = self._line[key] = _fit(samples)
        return line

    def ratio(self, rows: int, width: int, constrained: bool = False) -> float:
        """A verify step of this width over a plain step."""
        fixed, slope = self._fitted(rows, constrained)
        return min(max(fixed + slope * width, 1.0), MAX_RATIO)

    def min_chance(self, rows: int, constrained: bool = False) -> float:
        """The chance of being kept below which a row's next draft id does not pay. At batch 1
        an id adds its chance to the step's tokens and a width's cost to its time, against the
        ~2 tokens per plain step's time that drafted steps make (the tools and json
        workloads): twice the fitted cost per width, within [`MIN_CHANCE_FLOOR`, `MIN_CHANCE`]
        (0.1 on the demo model and SmolLM2, whose wider verify costs little). With more rows
        an id costs its position (an lm_head row, a mask, a sample: on SmolLM2 a 49,152 x 576
        row), which the line fitted per width does not see: `MIN_CHANCE` (a lower cut there
        drafted more and ran no faster on SmolLM2 at batch 8)."""
        if self._bucket(rows) > 1:
            return MIN_CHANCE
        slope = self._fitted(rows, constrained)[1]
        return min(max(2 * slope, MIN_CHANCE_FLOOR), MIN_CHANCE)


def _median(values: Any) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]  # (the upper median)


def _low(values: Any) -> float:
    """The `LOW_QUANTILE` of `values`: other processes only ever slow a step down."""
    ordered = sorted(values)
    return ordered[int(len(ordered) * LOW_QUANTILE)]


def _fit(samples: deque[tuple[int, float]]) -> tuple[float, float]:
    """(fixed, slope) of ratio = fixed + slope * width over `samples`: the slope the median of
    those between the widths timed `MIN_SAMPLES` times (each at its low quantile), the fixed
    part the low quantile of every sample less its width's part."""
    by_width: dict[int, list[float]] = {}
    for width, ratio in samples:
        by_width.setdefault(width, []).append(ratio)
    timed = sorted((w, _low(r)) for w, r in by_width.items() if len(r) >= MIN_SAMPLES)
    slope = DEFAULT_SLOPE
    if len(timed) >= 2:
        slope = min(max(0.0, _median([(b - a) / (v - w) for i, (w, a) in enumerate(timed)
                                      for v, b in timed[i + 1:]])), MAX_SLOPE)
    return _low([ratio - slope * width for width, ratio in samples]), slope


def best_width(base: float, gains: list[list[float]], ratio: Any) -> tuple[int, bool]:
    """The draft width (ids per row at most) that makes the most tokens per plain step's
    time, and whether it makes more than a plain step: `base` tokens a plain step writes,
    `gains[r][i]` row r's expected kept ids with a draft of i + 1 ids, `ratio(w)` a verify
    step's cost in plain steps. (0, False) when no row has a draft worth proposing."""
    best, width = 0.0, 0
    longest = max((len(g) for g in gains), default=0)
    for w in range(1, longest + 1):
        tokens = base + sum(g[min(w, len(g)) - 1] for g in gains if g)
        if tokens / ratio(w) > best:
            best, width = tokens / ratio(w), w
    return width, best > base
