# session-ledger: `make serve` runs the service, `make test` runs every test.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install test test-reliability serve migrate lint clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,llamaindex]'
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest

# The long runs of tests/reliability (make test runs them short); docs/reliability.md.
test-reliability: $(STAMP)
	$(BIN)/python -m pytest -m long_run -s -p no:cacheprovider tests/reliability

serve: $(STAMP)
	$(BIN)/session-ledger serve

migrate: $(STAMP)
	$(BIN)/session-ledger migrate

lint: $(STAMP)
	$(BIN)/ruff check domain projections api tests bench
	$(BIN)/ruff format --check domain projections api tests bench
	@# mypy cannot follow the editable install's package mapping: give it the same
	@# mapping as symlinks (session_ledger/domain -> domain, ...).
	@rm -rf $(VENV)/typecheck && mkdir -p $(VENV)/typecheck/session_ledger
	@for p in domain projections api; do ln -s "$(CURDIR)/$$p" $(VENV)/typecheck/session_ledger/$$p; done
	cd $(VENV)/typecheck && MYPYPATH=. $(CURDIR)/$(BIN)/mypy --strict --namespace-packages \
		--explicit-package-bases -p session_ledger.domain -p session_ledger.projections

clean:
	rm -rf $(VENV) var .pytest_cache .hypothesis

# Benchmarks against the stores users would pick instead (bench/README.md).
BENCH_STAMP := $(VENV)/.bench-installed

.PHONY: bench bench-quick bench-replay bench-writes bench-layouts bench-phases bench-floor

$(BENCH_STAMP): $(STAMP) pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[dev,llamaindex,bench]'
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	$(BIN)/python -m bench.run

bench-quick: $(BENCH_STAMP)
	$(BIN)/python -m bench.run --quick

bench-replay: $(STAMP)
	$(BIN)/python -m bench.replay

bench-writes: $(BENCH_STAMP)
	$(BIN)/python -m bench.write_cost

bench-layouts: $(STAMP)
	$(BIN)/python -m bench.layout_cost

bench-phases: $(STAMP)
	$(BIN)/python -m bench.put_phases

bench-floor: $(STAMP)
	$(BIN)/python -m bench.put_floor
