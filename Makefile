# session-ledger: `make serve` runs the service, `make test` runs every test.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install test serve migrate lint format clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,llamaindex]'
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest

serve: $(STAMP)
	$(BIN)/session-ledger serve

migrate: $(STAMP)
	$(BIN)/session-ledger migrate

lint: $(STAMP)
	$(BIN)/ruff check domain projections api tests bench
	$(BIN)/ruff format --check domain projections api tests bench

clean:
	rm -rf $(VENV) var .pytest_cache .hypothesis
