"""Every Triton kernel compiles for sm_80, sm_90 and sm_100 on this machine, with no spills.

The compiles run once per session in a subprocess (`compile_cuda.compile_all`; Triton must not
be in interpreter mode there) and are cached on disk by Triton and by `compile_cuda`, so only
the first run after a kernel change pays for them. Budgets come from the table in
kernels/README.md, so the documented number is the enforced one.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from thinkgate.kernels import compile_cuda
from thinkgate.kernels.sampling import CUDA_TILE, num_splits_for

KERNELS_DIR = Path(compile_cuda.__file__).parent


@pytest.fixture(scope="session")
def reports() -> list[compile_cuda.KernelReport]:
    return compile_cuda.compile_all()


def _kernels_in_source() -> set[str]:
    """Names of the `@triton.jit` functions in kernels/ that are kernels (`_*_kernel`)."""
    names = set()
    for path in KERNELS_DIR.glob("*.py"):
        names |= set(re.findall(r"@triton\.jit\s*\ndef (_\w+_kernel)\(", path.read_text()))
    return names


def _register_budgets() -> dict[str, int]:
    """kernel -> register budget, from the README's '| `_name_kernel` | budget |' rows."""
    text = (KERNELS_DIR / "README.md").read_text()
    return {name: int(n) for name, n in re.findall(r"^\| `(_\w+_kernel)` \| (\d+) \|", text,
                                                   re.MULTILINE)}


def test_every_kernel_is_compiled_for_every_arch(reports) -> None:
    kernels = _kernels_in_source()
    assert kernels >= {"_apply_token_bitmask_kernel", "_update_reasoning_kernel", "_sample_kernel"}
    for arch in compile_cuda.ARCHS:
        assert {r.kernel for r in reports if r.arch == arch} == kernels, arch
    cases = {arch: sorted((r.kernel, r.case) for r in reports if r.arch == arch)
             for arch in compile_cuda.ARCHS}
    assert cases[80] == cases[90] == cases[100]
    assert len(cases[90]) == len(set(cases[90]))  # no case compiled twice under one name


def test_sampler_cases_cover_the_splits_real_gpus_pick(reports) -> None:
    compiled = {int(m) for r in reports for m in re.findall(r"splits=(\d+)", r.case)}
    for sms in (108, 132, 148):  # A100, H100/H200, B200
        for rows in (1, 8, 64, 256):
            for vocab in (32_000, 128_256, 151_936, 262_144):
                assert num_splits_for(rows, vocab, sms, CUDA_TILE) in compiled, (sms, rows, vocab)


@pytest.mark.parametrize("arch", compile_cuda.ARCHS)
def test_no_spills_or_local_memory(reports, arch: int) -> None:
    """No spill stores or loads (ptxas -v) and no local variables. A stack frame ptxas reserves
    without spilling (8 bytes in some sm_90 builds, no LDL/STL in their SASS) is allowed."""
    bad = [(r.kernel, r.case, r.spill_store_bytes, r.spill_load_bytes, r.local_bytes)
           for r in reports if r.arch == arch and
           (r.spill_store_bytes or r.spill_load_bytes or r.local_bytes)]
    assert not bad, f"sm_{arch}: (kernel, case, spill stores, spill loads, local bytes) {bad}"


@pytest.mark.parametrize("arch", compile_cuda.ARCHS)
def test_registers_within_documented_budget(reports, arch: int) -> None:
    budgets = _register_budgets()
    assert set(budgets) == _kernels_in_source()
    over = [(r.kernel, r.case, r.registers, budgets[r.kernel]) for r in reports
            if r.arch == arch and r.registers > budgets[r.kernel]]
    assert not over, f"sm_{arch}: (kernel, case, registers, budget) {over}"


def test_aligned_rows_move_logits_in_128_bit_accesses(reports) -> None:
    """With 16-element aligned rows (V = 128,256; V = 151,669 in rows padded to 151,680; one
    row, launched with stride 0) the bitmask kernel reads and writes logits with 128-bit vector
    instructions in every dtype, and the fp32 sampler reads them so."""
    for r in reports:
        aligned = "V=151669" not in r.case or "stride=" in r.case or "B=1" in r.case
        if r.kernel == "_apply_token_bitmask_kernel" and aligned:
            assert r.global_ops.get("ld.global.v4.b32", 0) > 0, (r.case, r.arch, r.global_ops)
            assert r.global_ops.get("st.global.v4.b32", 0) > 0, (r.case, r.arch, r.global_ops)
        if r.kernel == "_sample_kernel" and aligned and r.case.startswith("fp32"):
            assert r.global_ops.get("ld.global.v4.b32", 0) > 0, (r.case, r.arch, r.global_ops)
