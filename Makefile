# session-ledger: `make serve` runs the service, `make test` runs every test.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Two installs: serving needs the runtime dependencies only; the tests, lint and the
# benchmarks add the dev extra (pytest, mypy, ruff, ...), LlamaIndex and the agent SDKs.
SERVE_STAMP := $(VENV)/.installed-serve
STAMP := $(VENV)/.installed-dev

.PHONY: install test test-reliability serve migrate lint clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(SERVE_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e .
	touch $(SERVE_STAMP)

$(STAMP): $(SERVE_STAMP) pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[dev,llamaindex,openai-agents,google-adk,mcp]'
	touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest

# The long runs of tests/reliability (make test runs them short); docs/reliability.md.
test-reliability: $(STAMP)
	$(BIN)/python -m pytest -m long_run -s -p no:cacheprovider tests/reliability

serve: $(SERVE_STAMP)
	$(BIN)/session-ledger serve

migrate: $(SERVE_STAMP)
	$(BIN)/session-ledger migrate

lint: $(STAMP)
	$(BIN)/ruff check domain projections api tests bench examples
	$(BIN)/ruff format --check domain projections api tests bench examples
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

.PHONY: bench bench-quick bench-replay bench-writes bench-instructions bench-ab bench-scale bench-http test-bench

$(BENCH_STAMP): $(STAMP) pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[dev,llamaindex,openai-agents,google-adk,mcp,bench]'
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	$(BIN)/python -m bench.run
	$(BIN)/python -m bench.openai_agents_session

bench-quick: $(BENCH_STAMP)
	$(BIN)/python -m bench.run --quick

bench-replay: $(STAMP)
	$(BIN)/python -m bench.replay

bench-writes: $(BENCH_STAMP)
	$(BIN)/python -m bench.diagnostics.write_cost

# Instructions per single-message write (callgrind) of the ledger's put and each peer's,
# in one run of a few minutes: make bench-instructions [INSTRUCTIONS_ARGS="--writes 500"]
bench-instructions: $(BENCH_STAMP)
	@command -v valgrind >/dev/null || apt-get install -y valgrind || sudo apt-get install -y valgrind
	$(BIN)/python -m bench.instructions $(INSTRUCTIONS_ARGS)

# The HTTP path against a bare FastAPI app doing the floor of its work, driven by wrk
# (docs/performance.md): make bench-http [HTTP_ARGS="--stores sqlite --seconds 3"]
bench-http: $(STAMP)
	@command -v wrk >/dev/null || apt-get install -y wrk || sudo apt-get install -y wrk
	$(BIN)/python -m bench.http_path $(HTTP_ARGS)

# The same workloads on two revisions, taking turns (bench/README.md):
# make bench-ab BASE=<rev> [HEAD=<rev>, default the work tree] [AB_ARGS=--quick]
HEAD ?= worktree
bench-ab: $(STAMP)
	$(if $(BASE),,$(error give the revision to compare with: make bench-ab BASE=<rev>))
	$(BIN)/python -m bench.ab --base $(BASE) --head $(HEAD) $(AB_ARGS)

# 10 million events against 100,000 on partitioned PostgreSQL, in databases of its own
# (docs/performance.md): make bench-scale [SCALE_ARGS="--events 1000000"]
bench-scale: $(STAMP)
	nice -n 10 $(BIN)/python -m bench.scale $(SCALE_ARGS)

test-bench: $(STAMP)
	$(BIN)/python -m pytest -m bench tests/bench
