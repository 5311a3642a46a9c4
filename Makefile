# Both entry points create .venv when missing and install mint into it.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.mint-installed
# Tests run in parallel, one worker per core (at most 4); `make test PYTEST_WORKERS=0` runs them serially.
PYTEST_WORKERS ?= $(shell n=$$(nproc); [ $$n -gt 4 ] && n=4; echo $$n)

.PHONY: demo demo-loop browser test lint fuzz bench clean

$(STAMP): pyproject.toml setup.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first, pinned, so that nothing later can pull in a CUDA build.
	$(PY) -m pip install -q torch==2.13.0
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

# Ruff (lint and format), then the layers: import-linter reads an installed tree, because
# store/, runtime/, examples/ and migrations/ only become mint.store etc. once installed.
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	# build/lib too: setuptools copies into it without removing what was moved or deleted since.
	rm -rf build/lint build/lib
	$(PY) -m pip install -q --no-deps --no-build-isolation --target build/lint .
	cd build/lint && PYTHONPATH=. ../../$(VENV)/bin/lint-imports ../../pyproject.toml

# Long property-based runs of every parser of outside input (make test runs a short one).
fuzz: $(STAMP)
	MINT_FUZZ_EXAMPLES=2000 $(PY) -m pytest -q -p no:cacheprovider tests/test_fuzz.py tests/test_push_fuzz.py

bench: $(STAMP)
	$(PY) bench/run_all.py

clean:
	rm -rf $(VENV) build *.egg-info
