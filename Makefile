# Two entry points for a fresh machine: `make demo` (main job) and `make test` (the test suite).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# pytest-xdist processes (one per core of the 2-core CI machine); each test file runs whole in one of them.
JOBS ?= 2

.PHONY: demo test test-slow lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[dev,gym,dist,minari,lightning]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/esper study --preset quick

test: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks examples
	$(VENV)/bin/mypy src
	HYPOTHESIS_PROFILE=ci $(PY) -m pytest -q -n $(JOBS) --dist loadfile --durations=15

test-slow: $(STAMP)
	HYPOTHESIS_PROFILE=ci $(PY) -m pytest -q -m slow

bench: $(STAMP)
	$(PY) benchmarks/bench_kasmina.py
	$(PY) benchmarks/bench_vectorized.py

clean:
	rm -rf $(VENV) runs .pytest_cache .mypy_cache .ruff_cache
