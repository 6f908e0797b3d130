"""`sample_plain` (the short CPU route) picks the same ids as the dense route, `sample_cpu`."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from thinkgate.kernels.cpu.inverse_cdf import uniform_cpu
from thinkgate.kernels.cpu.sample import sample_cpu
from thinkgate.kernels.cpu.sample_plain import PLAIN_ROWS, sample_plain, uniform_py


def _dense(logits: torch.Tensor, temps: list[float], seeds: list[int], steps: list[int]
           ) -> list[int]:
    ids, _ = sample_cpu(logits, torch.tensor(temps, dtype=torch.float32),
                        torch.tensor(seeds, dtype=torch.int64),
                        torch.tensor(steps, dtype=torch.int64))
    return ids.tolist()


def _logits(gen: torch.Generator, rows: int, cols: int, kind: str) -> torch.Tensor:
    x = torch.randn(rows, cols, generator=gen) * 4
    if kind == "peaked":  # a few columns hold almost all the mass
        x[:, torch.randint(cols, (3,), generator=gen)] += 30
    elif kind == "ties":  # coarse values: many equal maxima and equal weights
        x = x.round()
    elif kind == "banned":  # most columns -inf, some whole chunks empty
        x[:, : cols // 2] = float("-inf")
        x[:, cols // 2 :: 3] = float("-inf")
    return x


@pytest.mark.parametrize("kind", ["normal", "peaked", "ties", "banned"])
@pytest.mark.parametrize("cols", [64, 8064])
def test_same_ids_as_the_dense_route(kind: str, cols: int) -> None:
    gen = torch.Generator().manual_seed(cols)
    for trial in range(60):
        rows = 1 + trial % PLAIN_ROWS
        x = _logits(gen, rows, cols, kind)
        temps = [[1.0, 0.7, 0.0, 1.7, 1e-3][(trial + r) % 5] for r in range(rows)]
        seeds = [int(s) for s in torch.randint(-2**62, 2**62, (rows,), generator=gen)]
        steps = [trial * 3 + r for r in range(rows)]
        got = sample_plain(x, temps, seeds, steps)
        assert got == _dense(x, temps, seeds, steps), (kind, cols, trial)


def test_bf16_rows_and_all_greedy_batches() -> None:
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(3, 512, generator=gen).to(torch.bfloat16)
    temps, seeds, steps = [1.0, 0.0, 0.5], [5, 6, 7], [0, 1, 2]
    assert sample_plain(x, temps, seeds, steps) == _dense(x, temps, seeds, steps)
    wide = torch.randn(40, 256, generator=gen)  # greedy batches of any size take the route
    assert sample_plain(wide, [0.0] * 40, [0] * 40, [0] * 40) == wide.argmax(dim=1).tolist()


def test_the_full_path_decides_the_unusual_rows() -> None:
    x = torch.randn(2, 128)
    assert sample_plain(x, [1.0] * 2, [1, 2], [0, 0]) is not None
    nan = x.clone()
    nan[1, 5] = float("nan")
    assert sample_plain(nan, [1.0, 1.0], [1, 2], [0, 0]) is None
    assert sample_plain(nan, [0.0, 0.0], [1, 2], [0, 0]) is None
    banned = torch.full((1, 128), float("-inf"))
    assert sample_plain(banned, [1.0], [1], [0]) is None
    assert sample_plain(banned, [0.0], [1], [0]) is None
    assert sample_plain(torch.randn(1, 100), [1.0], [1], [0]) is None  # not a multiple of 64
    many = torch.randn(PLAIN_ROWS + 1, 128)  # more rows: all sampled, or the full path
    assert sample_plain(many, [0.0] + [1.0] * PLAIN_ROWS, [0] * 5, [0] * 5) is None
    nan_many = many.clone()
    nan_many[2, 3] = float("nan")
    assert sample_plain(nan_many, [1.0] * (PLAIN_ROWS + 1), [0] * 5, [0] * 5) is None


def test_larger_all_sampled_batches_take_the_fused_route() -> None:
    gen = torch.Generator().manual_seed(9)
    for rows in (PLAIN_ROWS + 1, 8, 32):
        x = torch.randn(rows, 8064, generator=gen) * 3
        temps = [[1.0, 0.7, 1.3][r % 3] for r in range(rows)]
        seeds = [1000 + r for r in range(rows)]
        steps = [r * 7 for r in range(rows)]
        assert sample_plain(x, temps, seeds, steps) == _dense(x, temps, seeds, steps)
        alone = [sample_plain(x[r:r + 1], temps[r:r + 1], seeds[r:r + 1], steps[r:r + 1])[0]
                 for r in range(rows)]  # the row-by-row route gives each row the same id
        assert alone == _dense(x, temps, seeds, steps)


def test_the_uniform_is_the_dense_routes() -> None:
    seeds = [0, 1, -1, 2**63 - 1, -2**63, 123456789]
    steps = [0, 1, 7, 2**40, 99, 3]
    want = uniform_cpu(torch.tensor(seeds), torch.tensor(steps)).numpy()
    got = np.array([uniform_py(s, t) for s, t in zip(seeds, steps)])
    assert np.array_equal(got, want)
