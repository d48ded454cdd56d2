# gpuwarden: `make demo` and `make test` install everything they need into .venv first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
PYTEST_ARGS ?=
# pytest-xdist workers: one per core (2 in CI). TEST_JOBS=0 runs the suite in one process.
TEST_JOBS ?= auto

.PHONY: install demo test lint format bench clean screenshots model

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,dashboard,k8s,influx,planning,report]'
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(BIN)/gpuwarden demo --out demo-out

lint: install
	$(BIN)/ruff check gpuwarden tests bench
	$(BIN)/ruff format --check gpuwarden tests bench
	$(BIN)/mypy
	$(BIN)/python tests/check_architecture.py

format: install
	$(BIN)/ruff check --fix gpuwarden tests bench
	$(BIN)/ruff format gpuwarden tests bench

test: lint
	$(BIN)/pytest -n $(TEST_JOBS) $(PYTEST_ARGS)

bench: install
	$(BIN)/python bench/bench_sim.py
	$(BIN)/python bench/bench_store.py
	$(BIN)/python bench/bench_exporter.py
	$(BIN)/python bench/bench_openb.py --seeds 42-43
	$(BIN)/python bench/bench_score.py

model: install
	$(BIN)/python -m gpuwarden.models.make_default

screenshots: install
	$(BIN)/python -m gpuwarden.dashboard.screenshots --out docs/img

clean:
	rm -rf $(VENV) demo-out .pytest_cache .mypy_cache .ruff_cache
