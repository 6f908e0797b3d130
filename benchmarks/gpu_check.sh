#!/usr/bin/env bash
# One call on a lent machine with one NVIDIA GPU, Python and torch but no network (<= 8 min):
# install carried wheels if present, run the `gpu`-marked tests, run the kernel benchmark,
# and leave logs and a JSON table under $OUT (or the folder given as $1).
#   bash benchmarks/gpu_check.sh [OUT_DIR]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR="${1:-${OUT:-./gpu_check_out}}"
mkdir -p "$OUT_DIR"
PY="${PYTHON:-python3}"
[ -x .venv/bin/python ] && PY=.venv/bin/python
log() { echo "[gpu_check $(date +%H:%M:%S)] $*" | tee -a "$OUT_DIR/summary.txt"; }

log "python: $($PY --version 2>&1)"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >"$OUT_DIR/gpu.txt" 2>&1
log "gpu: $(tail -n +2 "$OUT_DIR/gpu.txt" | head -1)"
# carried wheels (no network there), in .whl/ (the device tool's convention) or wheels/, e.g.
#   pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 -d .whl xgrammar==0.2.9
for dir in .whl wheels; do
  if ls "$dir"/*.whl >/dev/null 2>&1; then
    timeout 120 $PY -m pip install -q --no-index --no-deps --no-compile --target /tmp/site \
      "$dir"/*.whl >>"$OUT_DIR/pip.log" 2>&1
    log "installed carried wheels from $dir: rc=$?"
    export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
  fi
done
if ! $PY -c "import thinkgate" 2>/dev/null; then
  timeout 60 $PY -m pip install -q --no-deps --no-build-isolation -e . >>"$OUT_DIR/pip.log" 2>&1
fi
$PY -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__,
'cuda', torch.cuda.is_available())" 2>&1 | tee -a "$OUT_DIR/summary.txt"

# gpu tests: the kernel tests on CUDA tensors (Triton compiled, not interpreted) + gpu markers
# (test_compile_cuda.py is skipped here: it compiles ahead of time and is proven on CPU)
timeout 200 $PY -m pytest -q -x -p no:cacheprovider tests/kernels -m "not slow" \
  --ignore=tests/kernels/test_compile_cuda.py \
  >"$OUT_DIR/tests.log" 2>&1
log "kernel tests on CUDA: rc=$? ($(tail -1 "$OUT_DIR/tests.log"))"

timeout 240 $PY -m thinkgate.benchmarks.bench_kernels --json "$OUT_DIR/bench_kernels.json" \
  >"$OUT_DIR/bench_kernels.log" 2>&1
rc=$?
if [ $rc -ne 0 ]; then  # fall back to the quick grid if the full one did not finish
  timeout 90 $PY -m thinkgate.benchmarks.bench_kernels --quick \
    --json "$OUT_DIR/bench_kernels.json" >"$OUT_DIR/bench_kernels.log" 2>&1
  rc=$?
  log "full benchmark did not finish; quick grid rc=$rc"
fi
log "benchmark: rc=$rc (table in bench_kernels.log, rows in bench_kernels.json)"
exit 0
