"""The CPU sampling path: the spec's allowed set, greedy ids and logprobs; its own randomness."""

from __future__ import annotations

import itertools
import math
import threading

import numpy as np
import pytest
import torch
from kernel_inputs import random_bitmask, random_logits
from thinkgate.kernels import ReasoningState, SamplingTensors, sample
from thinkgate.kernels.cpu.inverse_cdf import CHUNK, invert_chunked, uniform_cpu, uniforms_np
from thinkgate.kernels.cpu.sample import sample_cpu
from thinkgate.kernels.cpu.sample_filtered import top_candidates
from thinkgate.kernels.filters import logit_floor, logit_floor_sparse
from thinkgate.kernels.sampling import allowed_mask_ref, sample_ref

VOCABS = [1, 31, 33, 8064, 32001]


def _rows(rows: int, gen: torch.Generator, temps: tuple[float, ...]) -> dict[str, torch.Tensor]:
    return {
        "temperature": torch.tensor(temps * rows)[:rows],
        "seeds": torch.randint(0, 2**62, (rows,), generator=gen),
        "steps": torch.randint(0, 2**40, (rows,), generator=gen),
    }


@pytest.mark.parametrize("vocab", VOCABS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_greedy_rows_and_logprobs_match_the_spec(vocab: int, dtype: torch.dtype,
                                                 gen: torch.Generator) -> None:
    rows = 12
    logits = random_logits(rows, vocab, dtype, gen, pad=3)
    logits[1, :] = float("-inf")  # nothing to sample: -1
    logits[2, vocab // 2] = float("nan")  # NaN is never chosen
    logits[3, :] = 1.0  # all tied: the first column
    bitmask = random_bitmask(rows, vocab, gen)
    grammar_rows = torch.arange(rows) % 3 != 0
    kw = dict(_rows(rows, gen, (0.0,)), bitmask=bitmask, grammar_rows=grammar_rows)
    ours, lp = sample_cpu(logits, **kw, logprobs=True)
    spec, spec_lp = sample_ref(logits, **kw, logprobs=True)
    assert torch.equal(ours, spec)
    torch.testing.assert_close(lp, spec_lp, rtol=1e-5, atol=1e-5)
    assert torch.equal(sample_cpu(logits, **kw)[0], spec)
    sampled_kw = dict(kw, temperature=torch.full((rows,), 0.8))
    ids, lp = sample_cpu(logits, **sampled_kw, logprobs=True)
    allowed = allowed_mask_ref(rows, vocab, bitmask, grammar_rows, None, None)
    allowed &= ~torch.isnan(logits.float())
    for r in range(rows):
        ok = allowed[r] & (logits[r].float() > float("-inf"))
        if not ok.any():
            assert ids[r] == -1 and lp[r] == float("-inf")
            continue
        assert ok[ids[r]], f"row {r} sampled a banned column {int(ids[r])}"
        y = torch.where(ok, logits[r].float() / 0.8, float("-inf")).double()
        want = y[ids[r]] - torch.logsumexp(y, 0)
        assert math.isclose(float(lp[r]), float(want), rel_tol=1e-4, abs_tol=1e-4)


def test_sampling_follows_the_allowed_softmax(gen: torch.Generator) -> None:
    vocab, n = 40, 40_000
    logits = torch.randn(1, vocab, generator=gen) * 1.5
    words = torch.randint(-(2**31), 2**31, (2, 2), generator=gen, dtype=torch.int64)
    bitmask = (words[0] | words[1]).view(1, 2).to(torch.int32)  # ~3/4 of the columns allowed
    for temp in (0.5, 1.0, 2.0):
        ids, _ = sample_cpu(logits.expand(n, vocab), torch.full((n,), temp),
                            torch.arange(n, dtype=torch.int64), torch.full((n,), 3),
                            bitmask=bitmask.expand(n, -1))
        allowed = allowed_mask_ref(1, vocab, bitmask, None, None, None)[0]
        probs = torch.softmax(torch.where(allowed, logits[0] / temp, float("-inf")), 0)
        counts = torch.bincount(ids, minlength=vocab).double()
        assert counts[~allowed].sum() == 0
        expected = probs.double() * n
        keep = expected > 5
        chi2 = float((((counts - expected) ** 2)[keep] / expected[keep]).sum())
        dof = int(keep.sum()) - 1
        assert chi2 < dof + 6 * math.sqrt(2 * dof), (temp, chi2, dof)  # ~4 sigma


FILTERS = {
    "top_k": {"top_k": 5},
    "top_p": {"top_p": 0.7},
    "min_p": {"min_p": 0.05},
    "top_k+top_p": {"top_k": 9, "top_p": 0.6},
    "top_p+min_p": {"top_p": 0.8, "min_p": 0.02},
    "all": {"top_k": 12, "top_p": 0.85, "min_p": 0.01},
    "tiny top_p": {"top_p": 0.02},  # most rows miss every draw and take the exact floor
}


@pytest.mark.parametrize("name", list(FILTERS))
def test_filters_sample_the_spec_distribution(name: str, gen: torch.Generator) -> None:
    """Chi-square against softmax over the kept set of the spec (`logit_floor`), with ties at
    the top and a grammar mask; no draw outside that set."""
    vocab, n, temp = 64, 30_000, 0.9
    logits = torch.randn(1, vocab, generator=gen) * 2
    logits[0, 10:13] = logits.max() + 0.5  # a three-way tie at the top
    words = torch.randint(-(2**31), 2**31, (2, 2), generator=gen, dtype=torch.int64)
    bitmask = (words[0] | words[1]).view(1, 2).to(torch.int32)
    bitmask[0, 0] |= 0b1110000000000  # keep the tie allowed
    allowed = allowed_mask_ref(1, vocab, bitmask, None, None, None)
    dtypes = {"top_k": torch.int32}
    values = {k: torch.full((n,), v, dtype=dtypes.get(k, torch.float32))
              for k, v in FILTERS[name].items()}
    ids, _ = sample_cpu(logits.expand(n, vocab), torch.full((n,), temp), torch.arange(n),
                        torch.full((n,), 5), bitmask=bitmask.expand(n, -1), **values)
    floor = logit_floor(logits, allowed, torch.full((1,), temp),
                        **{k: v[:1] for k, v in values.items()})
    kept = allowed[0] & (logits[0] >= floor[0])
    probs = torch.softmax(torch.where(kept, logits[0] / temp, float("-inf")), 0).double()
    counts = torch.bincount(ids, minlength=vocab).double()
    assert counts[~kept].sum() == 0, name
    expected = probs * n
    keep = expected > 5
    chi2 = float((((counts - expected) ** 2)[keep] / expected[keep]).sum())
    dof = max(int(keep.sum()) - 1, 1)
    assert chi2 < dof + 6 * math.sqrt(2 * dof), (name, chi2, dof)


def test_sparse_floor_keeps_what_the_sorted_floor_keeps(gen: torch.Generator) -> None:
    for scale in (0.05, 1.0, 4.0, 30.0):
        for rows, vocab in ((16, 50), (8, 8064)):
            x = torch.randn(rows, vocab, generator=gen) * scale
            x[:, ::7] = float("-inf")
            x[0, :] = float("-inf")
            x[1, 3:9] = x[1].max() + 1  # ties at the top
            t = torch.rand(rows, generator=gen) * 1.5
            t[2] = 0
            top_k = torch.randint(0, 60, (rows,), generator=gen).int()
            top_p = torch.rand(rows, generator=gen).clamp(min=0.05)
            top_p[3] = 1.0
            min_p = torch.rand(rows, generator=gen) * 0.3
            min_p[4] = 0
            finite = x > float("-inf")
            live = (x.max(1).values > float("-inf")) & (t > 0)
            for combo in itertools.product((None, top_k), (None, top_p), (None, min_p)):
                want = (x >= logit_floor(x, None, t, *combo)[:, None]) & finite
                got = (x >= logit_floor_sparse(x, t, *combo)[:, None]) & finite
                assert torch.equal(want[live], got[live]), (scale, vocab, combo)


def test_a_row_depends_only_on_its_seed_and_step(gen: torch.Generator) -> None:
    for vocab in (500, 1024):  # zero-padded weights, and the fused softmax beside greedy rows
        logits = random_logits(6, vocab, torch.float32, gen)
        logits[5, 9] = 3e38  # x / T overflows at T = 0.7: the exp2 formula for that row
        kw = _rows(6, gen, (1.0, 0.0, 0.7))
        batch, _ = sample_cpu(logits, **kw)
        for r in range(6):
            alone, _ = sample_cpu(logits[r:r + 1], **{k: v[r:r + 1] for k, v in kw.items()})
            assert alone[0] == batch[r], (vocab, r)
        assert batch[5] == 9
    u = uniform_cpu(torch.tensor([5, 5, 5, 6]), torch.tensor([0, 1, 0, 0]))
    assert u[0] == u[2] and u[0] != u[1] and u[0] != u[3]
    assert bool(((u > 0) & (u < 1)).all())
    many = uniform_cpu(torch.arange(50_000), torch.zeros(50_000, dtype=torch.int64))
    assert abs(float(many.mean()) - 0.5) < 0.01 and abs(float(many.var()) - 1 / 12) < 0.005


def test_forced_marker_and_gate(gen: torch.Generator) -> None:
    """A spent budget forces the marker; the grammar waits while a row thinks."""
    vocab = 64
    logits = random_logits(3, vocab, torch.float32, gen)
    state = ReasoningState.create([[7, 8], [7, 8], [7, 8]], budgets=[0, None, None])
    state.thinking[2] = 0  # row 2 answers: the grammar applies
    bitmask = torch.zeros(3, 2, dtype=torch.int32)
    bitmask[:, 0] = 1 << 9  # only column 9
    ids, lp = sample_cpu(logits, torch.ones(3), torch.arange(3), torch.zeros(3).long(),
                         bitmask=bitmask, reasoning=state, logprobs=True)
    assert ids[0] == 7 and lp[0] == 0.0
    assert ids[2] == 9
    assert ids[1] != -1  # thinking without grammar: any column


def test_sample_dispatches_cpu_tensors_to_the_cpu_path(monkeypatch: pytest.MonkeyPatch,
                                                       gen: torch.Generator) -> None:
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    logits = random_logits(4, 1000, torch.float32, gen)
    sampling = SamplingTensors.from_lists([1.0, 0.0, 0.5, 1.0], seeds=[1, 2, 3, 4],
                                          steps=[9, 9, 9, 9])
    out = sample(logits, sampling, return_logprobs=True)
    ids, lp = sample_cpu(logits, sampling.temperature, sampling.seeds, sampling.steps,
                         logprobs=True)
    assert torch.equal(out.token_ids, ids) and torch.equal(out.logprobs, lp)


def _route_mask(route: str, vocab: int, logits: torch.Tensor, gen: torch.Generator
                ) -> torch.Tensor:
    """A (1, W) bitmask that sends a row down `route` of `sample_grammar`."""
    words = (vocab + 31) // 32
    if route == "sparse":  # two non-zero words, random bits in them
        mask = torch.zeros(1, words, dtype=torch.int64)
        mask[0, [3, words - 2]] = torch.randint(1, 2**31, (2,), generator=gen)
    elif route == "dense":  # ~6% banned, the maximum among them (misses happen)
        banned = torch.rand(vocab, generator=gen) < 0.06
        banned[int(logits.argmax())] = True
        allowed = torch.nn.functional.pad(~banned, (0, 32 * words - vocab))
        mask = (allowed.view(words, 32).long() << torch.arange(32)).sum(1)[None, :]
    else:  # middle: about half the columns
        mask = torch.randint(0, 2**32, (1, words), generator=gen)
    return torch.where(mask >= 2**31, mask - 2**32, mask).to(torch.int32)


@pytest.mark.parametrize("route", ["sparse", "dense", "middle"])
def test_every_grammar_route_matches_the_spec(route: str, gen: torch.Generator,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("thinkgate.kernels.cpu.sample.GRAMMAR_ROUTES_FROM", 0)
    vocab, rows = 2048, 6
    logits = torch.randn(rows, vocab, generator=gen) * 2
    bitmask = torch.cat([_route_mask(route, vocab, logits[r], gen) for r in range(rows)])
    kw = dict(_rows(rows, gen, (0.0,)), bitmask=bitmask)
    assert torch.equal(sample_cpu(logits, **kw)[0], sample_ref(logits, **kw)[0])
    n, temp = 40_000, 1.3
    one = logits[:1].expand(n, vocab)
    ids, _ = sample_cpu(one, torch.full((n,), temp), torch.arange(n), torch.full((n,), 2),
                        bitmask=bitmask[:1].expand(n, -1))
    allowed = allowed_mask_ref(1, vocab, bitmask[:1], None, None, None)[0]
    probs = torch.softmax(torch.where(allowed, logits[0] / temp, float("-inf")), 0).double()
    counts = torch.bincount(ids, minlength=vocab).double()
    assert counts[~allowed].sum() == 0
    expected = probs * n
    keep = expected > 5
    chi2 = float((((counts - expected) ** 2)[keep] / expected[keep]).sum())
    dof = max(int(keep.sum()) - 1, 1)
    assert chi2 < dof + 6 * math.sqrt(2 * dof), (route, chi2, dof)


def _chi2_ok(counts: torch.Tensor, probs: torch.Tensor, n: int) -> tuple[bool, float, int]:
    expected = probs.double() * n
    keep = expected > 5
    chi2 = float((((counts - expected) ** 2)[keep] / expected[keep]).sum())
    dof = max(int(keep.sum()) - 1, 1)
    return chi2 < dof + 6 * math.sqrt(2 * dof), chi2, dof  # ~4 sigma


def test_chunked_inversion_is_the_inverse_cdf(gen: torch.Generator) -> None:
    """Small integer weights add up exactly, so the chunked draw must equal the plain inverse
    CDF for every uniform, including u at the ends and rows with empty chunks."""
    rows, cols = 7, 5 * CHUNK
    w = torch.randint(0, 4, (rows, cols), generator=gen).float()
    w[1, : 3 * CHUNK] = 0  # leading empty chunks
    w[2, 2 * CHUNK:] = 0  # trailing empty chunks
    w[3] = 0
    w[3, cols - 1] = 1  # one weighted column, the last
    w[4] = 0
    w[4, 0] = 2  # one weighted column, the first
    w[5] = 0
    w[5, torch.randperm(cols, generator=gen)[:128]] = 1  # total 128: u = j / 128 hits the
    w[6] = 0  # running sums exactly, where "first column with cdf > u * total" decides
    w[6, 1::5] = 2
    w[6, 2::5] = 0.5  # total 2.5 * 64 = 160, every column reached exactly by some j / 128
    u = np.concatenate([np.full((rows, 1), 2.0**-25), np.full((rows, 1), 1 - 2.0**-25),
                        np.tile(np.arange(1, 128) / 128, (rows, 1)),
                        uniforms_np(np.arange(rows), np.zeros(rows, dtype=np.int64), 0, 200)],
                       axis=1)
    got = invert_chunked(w, u)
    cdf = np.cumsum(w.double().numpy(), axis=1)
    for r in range(rows):
        want = np.searchsorted(cdf[r], u[r] * cdf[r, -1], side="right")
        assert np.array_equal(got[r], want), r
        assert (w[r].numpy()[got[r]] > 0).all()


@pytest.mark.parametrize("vocab", [40, 1000, 8064])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_top_candidates_are_the_largest(vocab: int, dtype: torch.dtype,
                                        gen: torch.Generator) -> None:
    rows = 9
    x = random_logits(rows, vocab, dtype, gen, pad=5)
    x[0, :] = 1.0  # all tied
    x[1, ::3] = float("-inf")
    x[2, 100 % vocab:] = float("-inf")  # fewer finite entries than some widths
    x[3, 7:19] = 50.0  # a tie group at the top
    for width in sorted({min(w, vocab) for w in (1, 2, 21, 41, 129)}):
        vals, cols = top_candidates(x, width)
        want = x.float().topk(width, dim=1).values.numpy()
        assert np.array_equal(vals, want), width
        assert np.array_equal(x.float().numpy()[np.arange(rows)[:, None], cols], vals), width
        assert all(len(set(c)) == width for c in cols.tolist()), width  # distinct columns


ROUTE_CASES = {
    "top_k pieces": (2048, {"top_k": 7}),
    "top_k whole row": (1000, {"top_k": 7}),
    "top_k+top_p+min_p": (2048, {"top_k": 30, "top_p": 0.8, "min_p": 0.02}),
    "top_p padded": (1000, {"top_p": 0.75}),
    "min_p padded": (1000, {"min_p": 0.1}),
    "top_p+min_p": (4096, {"top_p": 0.9, "min_p": 0.05}),
}


@pytest.mark.parametrize("name", list(ROUTE_CASES))
def test_filter_routes_sample_the_spec_at_real_widths(name: str, gen: torch.Generator) -> None:
    """Chi-square against the spec (`logit_floor`, then softmax) at widths that take the
    piece-selected top-k, the zero-padded workspace (V not a multiple of 64) and several
    chunks; ties at the top and -inf (grammar-banned) columns included."""
    vocab, kw = ROUTE_CASES[name]
    n, temp = 30_000, 0.8
    logits = torch.randn(1, vocab, generator=gen) * 1.5
    logits[0, torch.randperm(vocab, generator=gen)[:12]] += 6.0  # a head of 12 likely tokens
    logits[0, 5:8] = logits.max() + 0.3  # a three-way tie at the top
    logits[0, 9::4] = float("-inf")
    dtypes = {"top_k": torch.int32}
    values = {k: torch.full((n,), v, dtype=dtypes.get(k, torch.float32)) for k, v in kw.items()}
    ids, _ = sample_cpu(logits.expand(n, vocab), torch.full((n,), temp), torch.arange(n),
                        torch.full((n,), 11), **values)
    floor = logit_floor(logits, None, torch.full((1,), temp), **{k: v[:1] for k, v in values.items()})
    kept = logits[0] >= floor[0]
    probs = torch.softmax(torch.where(kept, logits[0] / temp, float("-inf")), 0)
    counts = torch.bincount(ids, minlength=vocab).double()
    assert counts[~kept].sum() == 0, name
    ok, chi2, dof = _chi2_ok(counts, probs, n)
    assert ok, (name, chi2, dof)


def test_extreme_temperatures(gen: torch.Generator) -> None:
    """T -> 0 keeps a finite scale (ties at the top share the draws), a huge T is uniform over
    the allowed columns, and -inf columns are never drawn."""
    vocab, n = 200, 20_000
    logits = torch.randn(1, vocab, generator=gen)
    logits[0, [3, 150]] = 5.0  # tied maximum
    logits[0, 10:20] = float("-inf")
    for temp in (1e-39, 1e-30, 1e-6):
        ids, _ = sample_cpu(logits.expand(n, vocab), torch.full((n,), temp), torch.arange(n),
                            torch.zeros(n, dtype=torch.int64))
        counts = torch.bincount(ids, minlength=vocab)
        assert counts[3] + counts[150] == n, temp
        assert abs(int(counts[3]) - n / 2) < 4 * math.sqrt(n / 4), (temp, counts[3])
    ids, _ = sample_cpu(logits.expand(n, vocab), torch.full((n,), 1e30), torch.arange(n),
                        torch.zeros(n, dtype=torch.int64))
    allowed = logits[0] > float("-inf")
    counts = torch.bincount(ids, minlength=vocab).double()
    assert counts[~allowed].sum() == 0
    ok, chi2, dof = _chi2_ok(counts, allowed.double() / allowed.sum(), n)
    assert ok, (chi2, dof)


def test_filtered_rows_depend_only_on_their_seed_and_step(gen: torch.Generator) -> None:
    """Each route (piece top-k, whole-row top-k, rejection top-p with misses, min-p, exact
    fallback, greedy, no filter at all) gives a row the same token alone as in a mixed batch."""
    for vocab in (1000, 8064):
        rows = 12
        logits = random_logits(rows, vocab, torch.float32, gen)
        logits[5, :] = 0.0  # flat: top_p=0.02 misses every draw, the exact floor decides
        logits[6, vocab // 3] = float("nan")
        temps = torch.tensor([1.0, 0.7, 0.0, 1.3, 0.9, 1.0, 0.8, 1.0, 0.5, 2.0, 1.0, 1.1])
        top_k = torch.tensor([40, 0, 0, 5, 0, 0, 0, 2000, 0, 0, 3, 0], dtype=torch.int32)
        top_p = torch.tensor([1.0, 0.9, 1.0, 0.8, 1.0, 0.02, 0.5, 1.0, 0.95, 0.3, 1.0, 1.0])
        min_p = torch.tensor([0.0, 0.0, 0.0, 0.0, 0.1, 0.0, 0.2, 0.0, 0.0, 0.05, 0.0, 0.0])
        seeds = torch.randint(0, 2**62, (rows,), generator=gen)
        steps = torch.randint(0, 2**40, (rows,), generator=gen)
        cols = (temps, seeds, steps, top_k, top_p, min_p)
        batch, _ = sample_cpu(logits, temps, seeds, steps, top_k=top_k, top_p=top_p,
                              min_p=min_p)
        for r in range(rows):
            t, s, st, k, p, m = (c[r:r + 1] for c in cols)
            alone, _ = sample_cpu(logits[r:r + 1], t, s, st, top_k=k, top_p=p, min_p=m)
            assert alone[0] == batch[r], (vocab, r)
            floor = logit_floor(logits[r:r + 1].nan_to_num(nan=float("-inf")), None, t, k, p, m)
            assert logits[r, batch[r]] >= floor[0], (vocab, r)


@pytest.mark.parametrize("vocab", [1000, 1024])  # zero-padded weights, and the fused softmax
def test_reused_workspaces_give_fresh_results(vocab: int, gen: torch.Generator,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches of changing size through the kept buffers draw what fresh buffers draw."""
    logits = random_logits(40, vocab, torch.float32, gen)
    kw = _rows(40, gen, (1.0, 0.7))
    top_p = torch.full((40,), 0.8)

    def run() -> list[list[int]]:
        return [sample_cpu(logits[:n], **{k: v[:n] for k, v in kw.items()},
                           top_p=top_p[:n] if filtered else None)[0].tolist()
                for n in (3, 40, 5) for filtered in (False, True)]

    monkeypatch.setattr("thinkgate.kernels.cpu.weights._WORKSPACE", threading.local())
    with torch.inference_mode():  # kept buffers made here stay writable outside (the engine)
        kept = run()
    assert run() == kept
    monkeypatch.setattr("thinkgate.kernels.cpu.weights.MAX_WORKSPACE", 0)
    assert run() == kept
