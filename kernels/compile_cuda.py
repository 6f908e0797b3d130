"""Ahead-of-time CUDA compiles of every Triton kernel, on any machine (no GPU, no driver).

Each kernel's launcher runs on small CPU tensors with its ``@triton.jit`` kernel swapped for a
recorder (`launches`); the recorded call is then bound exactly as a CUDA launch binds it
(argument types, 16-byte alignment of pointers and ints, ints equal to 1 as constants, the
launch options) and compiled by ``triton.compile`` for ``GPUTarget("cuda", arch, 32)``
(`compile_launch`). ptxas -v (run by that compile) reports spills; Triton's bundled
``cuobjdump -res-usage`` reports registers, stack frame, shared and local memory; the PTX gives
the global load/store instructions and their widths.

Triton must not run in interpreter mode here (``TRITON_INTERPRET=1`` replaces every kernel by
its interpreted Python), so `compile_all` runs this module in subprocesses without it (one per
two CPUs, each taking every N-th case):

    python -m thinkgate.kernels.compile_cuda [--arch 80 90 100] [--only TEXT] [--json out.json]

Results are cached on disk by the compiled kernel's hash (`CACHE_DIR`), next to Triton's own
compile cache, so a second run costs a few ms per kernel.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import subprocess
import sys
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

ARCHS = (80, 90, 100)
CACHE_DIR = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "thinkgate-cuda"


@dataclass(frozen=True)
class KernelReport:
    """One kernel specialization compiled for one architecture."""

    kernel: str  # the launcher's kernel name, e.g. "_sample_kernel"
    case: str  # what the launcher was asked to do, e.g. "bf16 mask+rows splits=128"
    arch: int  # compute capability x 10
    num_warps: int
    registers: int
    stack_bytes: int
    spill_store_bytes: int  # ptxas -v
    spill_load_bytes: int
    local_bytes: int  # local variables
    shared_bytes: int  # Triton's dynamic shared memory
    static_shared_bytes: int  # what cuobjdump reports (sm_90+ reserve 1 KiB per block)
    global_ops: dict[str, int]  # PTX mnemonic -> count, e.g. {"ld.global.v4.b32": 4}


@dataclass
class Launch:
    case: str
    fn: object  # the JITFunction
    args: tuple
    kwargs: dict


class _Recorder:
    """Stands in for a kernel inside one launcher call: keeps `kernel[grid](*args, **kwargs)`."""

    def __init__(self, fn: object, case: str, out: list[Launch]) -> None:
        self.fn, self.case, self.out = fn, case, out

    def __getitem__(self, grid: object):  # noqa: ANN204 - mirrors JITFunction.__getitem__
        def record(*args: object, **kwargs: object) -> None:
            self.out.append(Launch(self.case, self.fn, args, kwargs))

        return record


def _record(module: object, name: str, case: str, out: list[Launch], call) -> None:  # noqa: ANN001
    original = getattr(module, name)
    setattr(module, name, _Recorder(original, case, out))
    try:
        call()
    finally:
        setattr(module, name, original)


def launches() -> list[Launch]:
    """Every specialization the launchers can request on CUDA (see kernels/README.md)."""
    from thinkgate.kernels import compile_cases

    return compile_cases.all_launches(_record)


def compile_launch(launch: Launch, arch: int) -> KernelReport:
    """Compile one recorded launch for sm_`arch` and read its resources (cached on disk)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend
    from triton.runtime.jit import create_function_from_signature

    fn = launch.fn
    target = GPUTarget("cuda", arch, 32)
    backend = make_backend(target)
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    bound, specialization, options = binder(*launch.args, **launch.kwargs)
    options, signature, constexprs, attrs = fn._pack_args(  # noqa: SLF001 - Triton's binding
        backend, launch.kwargs, bound, specialization, options)
    src = triton.compiler.ASTSource(fn, signature, constexprs, attrs)
    log = io.StringIO()  # Triton prints ptxas -v's log when it runs ptxas (a cache miss)
    triton.knobs.nvidia.dump_ptxas_log = True
    with contextlib.redirect_stdout(log):
        compiled = triton.compile(src, target=target, options=options.__dict__)
    meta = compiled.metadata
    cache = CACHE_DIR / f"{meta.hash}-{arch}.json"
    if cache.exists():
        res = json.loads(cache.read_text())
    else:
        res = _resources(compiled, arch, log.getvalue())
        CACHE_DIR.mkdir(parents=True, exist_ok=True)
        cache.write_text(json.dumps(res))
    return KernelReport(kernel=fn.__name__, case=launch.case, arch=arch, num_warps=meta.num_warps,
                        shared_bytes=meta.shared, global_ops=global_memory_ops(compiled.asm["ptx"]),
                        **res)


def global_memory_ops(ptx: str) -> dict[str, int]:
    """Count of each global load/store/atomic mnemonic in the PTX, e.g. ld.global.v4.b32, and of
    asynchronous global-to-shared copies (cp.async.cg.shared.global, with their byte count)."""
    ops = re.findall(r"^\s*(?:@%p\d+\s+)?((?:ld|st|atom|red)\.global[\w.]*"
                     r"|cp\.async\.\w+\.shared\.global(?:\.[\w:]+)*\s*\[[^]]*\],\s*\[[^]]*\],\s*(?:0x)?\w+)",
                     ptx, re.MULTILINE)
    ops = [re.sub(r"\s*\[[^]]*\],\s*\[[^]]*\],\s*", ".", op) if op.startswith("cp.") else op
           for op in ops]
    return dict(sorted(Counter(ops).items()))


def _resources(compiled: object, arch: int, ptxas_log: str) -> dict[str, int]:
    """Spills from ptxas -v (its log from Triton's compile, or ptxas run again on the PTX with
    Triton's flags) and cuobjdump -res-usage: registers, stack, shared, local."""
    import tempfile

    from triton.backends.nvidia.compiler import get_ptxas, sm_arch_from_capability

    ptxas = get_ptxas(arch).path
    with tempfile.TemporaryDirectory() as tmp:
        ptx, cubin = Path(tmp) / "k.ptx", Path(tmp) / "k.cubin"
        cubin.write_bytes(compiled.asm["cubin"])
        if "spill" not in ptxas_log:
            ptx.write_text(compiled.asm["ptx"])
            fmad = [] if compiled.metadata.enable_fp_fusion else ["--fmad=false"]
            ptxas_log = subprocess.run(
                [ptxas, "-v", "-lineinfo", *fmad, "--regAllocOptLevel=2",
                 f"--gpu-name={sm_arch_from_capability(arch)}", str(ptx), "-o", str(ptx) + ".o"],
                check=True, capture_output=True, text=True).stderr
        usage = subprocess.run([str(Path(ptxas).parent / "cuobjdump"), "-res-usage", str(cubin)],
                               check=True, capture_output=True, text=True).stdout
    spills = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", ptxas_log)
    fields = dict(re.findall(r"\b(REG|STACK|SHARED|LOCAL):(\d+)", usage))
    if spills is None or "REG" not in fields:
        raise RuntimeError(f"unexpected ptxas/cuobjdump output:\n{ptxas_log}\n{usage}")
    return {
        "registers": int(fields["REG"]),
        "stack_bytes": int(fields["STACK"]),
        "spill_store_bytes": int(spills.group(1)),
        "spill_load_bytes": int(spills.group(2)),
        "local_bytes": int(fields["LOCAL"]),
        "static_shared_bytes": int(fields["SHARED"]),
    }


def compile_all(archs: tuple[int, ...] = ARCHS, timeout_s: float = 900,
                num_procs: int | None = None) -> list[KernelReport]:
    """Run this module in `num_procs` subprocesses without TRITON_INTERPRET, each compiling
    every num_procs-th case; return all their reports. The default, one per two CPUs (1 to 8),
    keeps a cached run to one torch import (~5 s on 2 cores; 2 processes: ~11 s) while a cold
    one spreads (on 2 busy cores 2 processes took 127 s instead of ~230 s)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # Triton 3.9's default, without its warning
    n = num_procs or max(1, min((os.cpu_count() or 1) // 2, 8))
    procs = [subprocess.Popen(
        [sys.executable, "-m", "thinkgate.kernels.compile_cuda", "--json", "-", "--shard",
         f"{i}/{n}", "--arch", *map(str, archs)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(n)]
    rows = []
    for proc in procs:
        out, err = proc.communicate(timeout=timeout_s)
        if proc.returncode != 0:
            raise RuntimeError(f"compile_cuda failed (rc {proc.returncode}):\n{err[-4000:]}")
        rows += json.loads(out)
    return [KernelReport(**r) for r in rows]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", type=int, nargs="+", default=list(ARCHS))
    parser.add_argument("--only", default="", help="cases whose 'kernel case' contains this")
    parser.add_argument("--shard", default="0/1", help="I/N: every N-th case from the I-th")
    parser.add_argument("--json", help="write the reports as JSON here ('-': stdout, no table)")
    args = parser.parse_args(argv)
    if os.environ.get("TRITON_INTERPRET") == "1":
        raise SystemExit("unset TRITON_INTERPRET: the interpreter replaces the kernels")
    shard, num_shards = map(int, args.shard.split("/"))
    chosen = [la for la in launches()[shard::num_shards]
              if args.only in f"{la.fn.__name__} {la.case}"]
    reports = [compile_launch(launch, arch) for launch in chosen for arch in args.arch]
    rows = [asdict(r) for r in reports]
    if args.json == "-":
        json.dump(rows, sys.stdout)
        return
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    print("kernel | case | sm | regs | stack | spill st/ld | shared | local")
    for r in reports:
        print(f"{r.kernel} | {r.case} | {r.arch} | {r.registers} | {r.stack_bytes} | "
              f"{r.spill_store_bytes}/{r.spill_load_bytes} | {r.shared_bytes} | {r.local_bytes}")


if __name__ == "__main__":
    main()
