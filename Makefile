# attnsim: every target bootstraps its own virtual environment on a fresh machine.
PYTHON ?= python3
VENV := .venv
BENCH_VENV := .venv-bench
TORCH := torch==2.13.0

.PHONY: run test lint bench bench-full clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q $(TORCH)
	$(VENV)/bin/pip install -q -e '.[dev]'
	touch $@

run: $(VENV)/.installed
	$(VENV)/bin/python -m attnsim demo

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check src tests benchmarks examples
	$(VENV)/bin/ruff format --check src tests benchmarks examples

# the suite on every core (at most four workers; a test file stays on one worker, so its
# module fixtures are built once): about 5.5 minutes on two cores, 11 on one
test: lint
	$(VENV)/bin/python -m pytest -m "not slow" -n auto --maxprocesses 4 --dist loadfile

$(BENCH_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/pip install -q --upgrade pip
	$(BENCH_VENV)/bin/pip install -q $(TORCH)
	$(BENCH_VENV)/bin/pip install -q -e '.[dev]'
	-$(BENCH_VENV)/bin/pip install -q -e '.[bench]' || echo "bench extra unavailable: peer comparisons will be skipped"
	touch $@

# bench: the slow test sweeps (sampled) and every benchmark at its default size, then
# docs/benchmarks.md (about two hours on two cores; README, Benchmarks)
bench: $(BENCH_VENV)/.installed
	$(BENCH_VENV)/bin/python -m pytest -m slow -q
	$(BENCH_VENV)/bin/python benchmarks/run_all.py

# bench-full: every shape in the slow sweeps and the --full benchmark sizes (hours)
bench-full: $(BENCH_VENV)/.installed
	ATTNSIM_FULL_SWEEPS=1 $(BENCH_VENV)/bin/python -m pytest -m slow -q
	$(BENCH_VENV)/bin/python benchmarks/run_all.py --full

clean:
	rm -rf $(VENV) $(BENCH_VENV) build dist .pytest_cache .ruff_cache
