# Two commands set everything up on a fresh machine with only Python 3.11+:
#   make test   lint, type-check and run every test tier
#   make run    start Shoebox
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: test test-fast run lint typecheck pytest bench clean chromium

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Reinstall only when the dependency list changes.
$(STAMP): pyproject.toml verifier/pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[embedded,dev,bench]' -e ./verifier
	touch $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy

# The pages' browser tests drive Debian's chromium (Playwright's own download is not reachable
# everywhere); installed here when missing. CI runs as root on Debian; elsewhere, run as root once.
chromium:
	@command -v chromium >/dev/null 2>&1 || (apt-get update && apt-get install -y chromium)

# The tiers run on every core: each test file goes whole to one xdist worker (its module
# fixtures, servers and databases stay its own), and every test already claims its own
# database, ports and Redis database, so files never share state. Two workers a core: much of
# the suite waits on servers starting and on disk flushes, so a second one a core overlaps
# those waits (on 2 cores: 6.0 min against 9.9 min with one a core, docs/benchmarks.md).
PYTEST_WORKERS ?= $(shell echo $$(( $$(nproc) * 2 )))

pytest: $(STAMP) chromium
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadfile

test: lint typecheck pytest

# The fast tier, for the edit-test loop: lint and the unit and contract tiers, under a minute.
test-fast: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/pytest -m "not slow" tests/unit tests/contract

# PostgreSQL and Redis from the environment, or embedded ones; then the API and the worker.
# `shoebox run` turns demo mode on: /play and /dashboard are served beside /v1.
run: $(STAMP)
	$(BIN)/shoebox run

# Benchmarks print medians beside a baseline measured in the same run; see docs/benchmarks.md.
bench: $(STAMP)
	$(BIN)/python bench/domain.py
	$(BIN)/python bench/event_store.py

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache
