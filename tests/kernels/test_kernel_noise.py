"""Randomness: Philox known answers, the exact log2, Gumbel moments, sampling statistics."""

from __future__ import annotations

import math

import torch
from thinkgate.kernels.bitmask import unpack_bitmask_ref
from thinkgate.kernels.filters import logit_floor
from thinkgate.kernels.noise import gumbel_noise_ref, log2_ref, philox_ref
from thinkgate.kernels.sampling import sample_ref


def test_philox_known_answers() -> None:
    """Random123's published vectors for Philox4x32-10."""
    zero = torch.zeros(1, dtype=torch.int64)
    ones = torch.full((1,), 0xFFFFFFFF, dtype=torch.int64)
    assert [int(v) for v in philox_ref(zero, zero, zero, zero, zero)] == [
        0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]
    assert [int(v) for v in philox_ref(ones | (ones << 32), ones, ones, ones, ones)] == [
        0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]


def test_log2_is_accurate() -> None:
    gen = torch.Generator().manual_seed(5)
    x = torch.cat([torch.rand(100_000, generator=gen) * 30 + 1e-7,
                   torch.tensor([1.0, 2.0, 0.5, 1 - 2**-24])])
    exact = torch.log2(x.double())
    err = (log2_ref(x).double() - exact).abs()
    assert (err <= 2e-7 + 2.5e-7 * exact.abs()).all()  # polynomial error + fp32 rounding
    assert log2_ref(torch.tensor([1 - 2**-24])) < 0  # so -log2(u) > 0 for every u < 1


def test_gumbel_moments_and_independence() -> None:
    seeds = torch.tensor([7, 8])
    noise = gumbel_noise_ref(seeds, torch.tensor([0, 0]), 200_000).double()
    g = noise * math.log(2) - math.log(math.log(2))  # base-2 units back to Gumbel(0, 1)
    euler_gamma = 0.5772156649
    assert abs(g.mean() - euler_gamma) < 0.01
    assert abs(g.var() - math.pi**2 / 6) < 0.02
    assert abs(torch.corrcoef(g)[0, 1]) < 0.01  # different seeds: unrelated streams
    again = gumbel_noise_ref(seeds[:1], torch.tensor([0]), 1000)
    assert torch.equal(again[0], noise[0, :1000].float())  # a pure function of (seed, step, col)
    other_step = gumbel_noise_ref(seeds[:1], torch.tensor([1]), 1000)
    assert not torch.equal(other_step, again)


def _frequencies(ids: torch.Tensor, vocab: int) -> torch.Tensor:
    return torch.bincount(ids, minlength=vocab).double() / ids.numel()


def _chi2(freq: torch.Tensor, probs: torch.Tensor, n: int) -> float:
    keep = probs > 0
    assert (freq[~keep] == 0).all()
    expected = probs[keep] * n
    return float((((freq[keep] * n) - expected) ** 2 / expected).sum())


def test_sampling_follows_softmax_over_allowed_tokens() -> None:
    n, vocab, temp = 40_000, 8, 0.7
    logits = torch.tensor([1.0, 2.0, 0.5, 3.0, -1.0, 2.5, 0.0, 1.5])
    bitmask = torch.tensor([[0b10101011]], dtype=torch.int32)  # allows 0, 1, 3, 5, 7
    allowed = unpack_bitmask_ref(bitmask, vocab, 32)[0]
    probs = torch.softmax(torch.where(allowed, logits / temp, float("-inf")), 0).double()
    ids, _ = sample_ref(logits.expand(n, vocab), torch.full((n,), temp),
                        torch.full((n,), 42), torch.arange(n), bitmask=bitmask.expand(n, 1))
    chi2 = _chi2(_frequencies(ids, vocab), probs, n)
    assert chi2 < 20.5  # 4 degrees of freedom: p < 4e-4 of a false failure


def test_top_k_and_top_p_sample_the_renormalised_distribution() -> None:
    n, vocab = 40_000, 6
    logits = torch.tensor([2.0, 1.0, 0.0, 1.5, -1.0, 0.5])
    probs = torch.softmax(logits, 0).double()
    for top_k, top_p, keep in (([2], None, [0, 3]), (None, [0.7], [0, 3, 1])):
        floor = logit_floor(logits[None], torch.ones(1, vocab, dtype=torch.bool),
                            torch.ones(1), top_k=torch.tensor(top_k) if top_k else None,
                            top_p=torch.tensor(top_p) if top_p else None)
        ids, _ = sample_ref(logits.expand(n, vocab), torch.ones(n), torch.full((n,), 3),
                            torch.arange(n), floor=floor.expand(n))
        kept = torch.zeros(vocab, dtype=torch.double)
        kept[keep] = probs[keep] / probs[keep].sum()
        assert _chi2(_frequencies(ids, vocab), kept, n) < 16.3  # <= 2 dof, p < 3e-4
