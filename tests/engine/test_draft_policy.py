"""When n-gram drafts run (engine/core/draft_policy.py and Speculator.propose): rows scored on
every proposal, verified or not; drafts cut where their chance falls; a step verifies only when
the expected kept tokens cover its extra cost."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from thinkgate.engine.config import SpeculativeConfig
from thinkgate.engine.core import speculative
from thinkgate.engine.core.draft_policy import (
    DEFAULT_FIXED,
    DEFAULT_SLOPE,
    MAX_RATIO,
    MIN_CHANCE,
    MIN_CHANCE_FLOOR,
    MIN_SAMPLES,
    RowAcceptance,
    StepCosts,
    best_width,
)
from thinkgate.engine.core.speculative import Speculator


def test_a_shadow_is_scored_by_the_tokens_written_after_it() -> None:
    row = RowAcceptance(0.0, 0.0, 0.0, 0.0)
    row.shadow, row.shadow_at = [7, 8, 9], 3
    row.settle([1, 2, 3])  # nothing written after it yet: kept for later
    assert row.shadow == [7, 8, 9] and row.first_tries == 0
    row.settle([1, 2, 3, 7, 8, 5])  # two kept, the third differs
    assert row.shadow == [] and (row.first_hits, row.first_tries) == (1, 1)
    assert (row.next_hits, row.next_tries) == (1, 2)
    row.shadow, row.shadow_at = [4, 4], 6
    row.settle([1, 2, 3, 7, 8, 5, 6])  # the first id differs: nothing learnt about the next
    assert row.rate == pytest.approx(0.85 / 1.85) and row.next_tries == 2


def test_a_draft_keeps_its_ids_while_their_chance_stays_high() -> None:
    sure = RowAcceptance(9.0, 10.0, 9.0, 10.0)  # 0.9, 0.81, 0.73, 0.66 ... >= 0.3
    assert sure.worth([1] * 16) == 11  # 0.9 ** 11 = 0.31, 0.9 ** 12 = 0.28
    assert sure.gains(3) == pytest.approx([0.9, 0.9 + 0.81, 0.9 + 0.81 + 0.729])
    span = RowAcceptance(1.0, 2.0, 9.0, 10.0)  # a span: 0.5 to start, then 0.9 on
    assert span.worth([1] * 8) == 5  # 0.5 * 0.9 ** 4 = 0.33, ** 5 = 0.295
    assert span.gains(2) == pytest.approx([0.5, 0.95])
    poor = RowAcceptance(1.0, 5.0, 9.0, 10.0)  # 0.2 < MIN_CHANCE at the first id
    assert poor.rate < MIN_CHANCE and poor.worth([1, 2, 3]) == 0
    assert RowAcceptance().worth([1, 2, 3]) == 2  # the priors: 0.5, then 0.375, then 0.28


def test_step_costs_are_a_line_in_the_width_fitted_to_low_quantiles_per_batch_size() -> None:
    costs = StepCosts()
    guess = costs.ratio(1, 2)
    assert guess == 1 + DEFAULT_FIXED + 2 * DEFAULT_SLOPE
    costs.note(1, 2, 1.5)  # no plain step timed at this size yet: nothing to compare with
    assert costs.ratio(1, 2) == guess
    for seconds in (1.0, 1.0, 9.0):  # a step slowed by another process does not count
        costs.note(1, 0, seconds)
    costs.note(1, 2, 1.5)  # one width timed: its fixed part, the default slope
    assert costs.ratio(1, 2) == pytest.approx(1.5)
    assert costs.ratio(1, 3) == pytest.approx(1.5 + DEFAULT_SLOPE)
    costs.note(6, 0, 2.0)  # sizes 5-8 share a bucket
    costs.note(8, 1, 5.0)
    costs.note(8, 1, 100.0)  # counted as MAX_RATIO
    costs.note(8, 1, 4.0)
    assert costs.ratio(7, 1) == pytest.approx(2.0)  # a busy machine only adds time: the low end
    costs.note(8, 1, 100.0)  # of 2.5, 2.0, 4.0, 4.0: the lower quartile, 2.5
    assert costs.ratio(7, 1) == pytest.approx(2.5)
    for _ in range(6):
        costs.note(8, 1, 100.0)
    assert costs.ratio(7, 1) == MAX_RATIO
    assert costs.ratio(2, 2) == guess  # nothing timed at size 2
    assert costs.ratio(1, 2, constrained=True) == guess  # grammar batches are timed apart
    costs.note(1, 0, 2.0, constrained=True)
    costs.note(1, 2, 5.0, constrained=True)
    assert costs.ratio(1, 2, constrained=True) == pytest.approx(2.5)
    assert costs.ratio(1, 2) == pytest.approx(1.5)


def test_the_slope_comes_from_widths_timed_often_enough() -> None:
    costs = StepCosts()
    costs.note(1, 0, 1.0)
    for width, ratio in ((1, 1.2), (4, 1.8)) * (MIN_SAMPLES - 1):
        costs.note(1, width, ratio)
    # too few samples a width: the default slope, the fixed part at the low end of 1.2 - s
    # (x 3) and 1.8 - 4 s (x 3), so width 4 reads cheaper than it was timed
    assert costs.ratio(1, 1) == pytest.approx(1.2)
    assert costs.ratio(1, 4) == pytest.approx(1.2 + 3 * DEFAULT_SLOPE)
    costs.note(1, 1, 1.2)
    costs.note(1, 4, 1.8)  # two widths with MIN_SAMPLES each: the slope between them
    assert costs.ratio(1, 4) == pytest.approx(1.8) and costs.ratio(1, 1) == pytest.approx(1.2)
    assert costs.ratio(1, 2) == pytest.approx(1.4)


def test_a_width_timed_once_on_a_busy_moment_is_not_priced_out() -> None:
    # per-width medians priced width 4 at its one sample (3.0) for good: it ran only when it
    # looked cheap, so it was never timed again, and the row drafted 2 ids where 4 paid
    costs = StepCosts()
    for _ in range(3):
        costs.note(1, 0, 1.0)
    for _ in range(5):
        costs.note(1, 1, 1.3)
        costs.note(1, 2, 1.35)
    costs.note(1, 4, 3.0)
    assert costs.ratio(1, 4) == pytest.approx(1.45)
    gains = [RowAcceptance(9.0, 10.0, 9.0, 10.0).gains(4)]
    assert best_width(1, gains, lambda w: costs.ratio(1, w)) == (4, True)
    per_width = {1: 1.3, 2: 1.35, 3: 1.4, 4: 3.0}  # what per-width medians read
    assert best_width(1, gains, per_width.__getitem__) == (3, True)


def test_the_cut_on_a_row_s_draft_is_twice_the_cost_per_width_at_batch_one() -> None:
    costs = StepCosts()
    assert costs.min_chance(1) == max(2 * DEFAULT_SLOPE, MIN_CHANCE_FLOOR)  # nothing timed
    costs.note(1, 0, 1.0)
    for _ in range(MIN_SAMPLES):
        costs.note(1, 1, 1.10)
        costs.note(1, 4, 1.16)  # 0.02 a width: the floor
    assert costs.min_chance(1) == MIN_CHANCE_FLOOR
    for _ in range(MIN_SAMPLES):
        costs.note(1, 2, 1.32)  # slopes 0.22, 0.25, 0.02, 0.28, -0.08, -0.44: 0.22 (upper
        costs.note(1, 3, 1.6)  # median), twice that over the bound
    assert costs.ratio(1, 2) - costs.ratio(1, 1) == pytest.approx(0.22)
    assert costs.min_chance(1) == MIN_CHANCE
    costs.note(8, 0, 1.0)
    for _ in range(MIN_SAMPLES):
        costs.note(8, 1, 1.01)
        costs.note(8, 2, 1.02)  # cheap widths, but each id costs its position: the upper cut
    assert costs.min_chance(8) == MIN_CHANCE
    row = RowAcceptance(1.0, 2.0, 3.0, 4.0)  # 0.5, 0.375, 0.28, 0.21, 0.16, 0.12, 0.09
    assert row.worth([1] * 8, MIN_CHANCE_FLOOR) == 6 and row.worth([1] * 8, 0.2) == 4
    assert row.worth([1] * 8, MIN_CHANCE) == 2


def test_the_width_that_makes_the_most_tokens_per_unit_of_time() -> None:
    gains = [RowAcceptance(9.0, 10.0, 9.0, 10.0).gains(4), RowAcceptance().gains(1)]
    # 2 rows: width 1 makes 2 + 0.9 + 0.5 tokens in 1.3 steps (2.62 per step), width 2 makes
    # 4.21 in 1.6 (2.63), width 3 4.94 in 1.9 (2.6), width 4 5.59 in 2.2 (2.54)
    assert best_width(2, gains, lambda w: 1 + 0.3 * w) == (2, True)
    # the fixed part dominates: the widest draft pays most (5.59 / 2.1 = 2.66 per step)
    assert best_width(2, gains, lambda w: 2.0 + 0.025 * w) == (4, True)
    assert best_width(2, gains, lambda w: 1 + 0.8 * w) == (1, False)  # none beats plain
    assert best_width(2, [[], []], lambda w: 1.0) == (0, False)


class _Row(SimpleNamespace):
    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)


def _seq(tokens: list[int], rate: float) -> Any:
    return _Row(token_ids=tokens, is_finished=False, forced_ids=[], draft_ids=[],
                has_logits_processors=False, trace=None, reasoning_state=None,
                structured_state=None, max_total_tokens=100, ngram_index=({}, 0),
                draft_state=RowAcceptance(rate * 10, 10.0, rate * 10, 10.0))


def _speculator(slope: float) -> Speculator:
    spec = Speculator(SpeculativeConfig("ngram", 4, 3, 2), vocab_size=64)
    spec.costs.ratio = (  # type: ignore[method-assign]
        lambda rows, width, constrained=False: 1 + slope * width)
    return spec


REPEATS = [5, 6, 7, 8, 9, 5, 6]  # "5 6" occurred before: the proposal is [7, 8, 9, 5]


def test_rows_draft_by_their_rate_and_the_rest_stay_shadows() -> None:
    spec = _speculator(0.1)
    good, poor = _seq(list(REPEATS), 0.9), _seq(list(REPEATS), 0.05)  # under the cut (0.1)
    spec.propose([good, poor])
    assert good.draft_ids == [7, 8, 9, 5] and poor.draft_ids == []
    assert poor.draft_state.shadow == [7, 8, 9, 5] and poor.draft_state.shadow_at == 7
    poor.token_ids.extend([7, 8])  # the row wrote its shadow's first ids after all
    spec.propose([poor])
    assert poor.draft_state.rate == pytest.approx(1.425 / 9.5)  # scored: its first id kept
    assert poor.draft_state.next_rate == pytest.approx(1.425 / 9.5)  # and the one after it


def test_a_step_verifies_only_when_the_expected_gain_covers_its_cost(monkeypatch: Any) -> None:
    # one row at 0.5 expects 0.5 kept ids: enough against a cost of 0.3 tokens, not 0.6
    cheap, dear = _speculator(0.3), _speculator(0.6)
    a, b = _seq(list(REPEATS), 0.5), _seq(list(REPEATS), 0.5)
    cheap.propose([a])
    dear.propose([b])
    assert a.draft_ids == [7] and b.draft_ids == [] and b.draft_state.shadow == [7, 8, 9, 5]
    monkeypatch.setattr(speculative, "REFRESH_STEPS", 3)
    runs = []
    for _ in range(4):  # skipped steps with some gain: after 3 the drafts run once anyway
        dear.propose([b])
        runs.append(bool(b.draft_ids))
    assert runs == [False, False, True, False]
