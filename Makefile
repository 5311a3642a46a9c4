# Both entry points create .venv when missing and install mint into it.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.mint-installed

.PHONY: demo test bench clean

$(STAMP): pyproject.toml setup.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first, pinned, so that nothing later can pull in a CUDA build.
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m mint.examples.demo

test: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider tests

bench: $(STAMP)
	$(PY) bench/run_all.py

clean:
	rm -rf $(VENV) *.egg-info
