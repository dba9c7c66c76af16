# The two commands every newcomer needs: `make run` and `make test`.
# Everything else installs itself on first use into .venv.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
PROTOS := $(wildcard protos/agentfleet/v1/*.proto)

.PHONY: setup run up test test-fast lint fmt proto bench soak clean browser

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

setup: $(STAMP)

## Bring up the whole stack on the embedded default and run the research demo (seed 001).
run: $(STAMP)
	$(BIN)/agentfleet up --demo

up: $(STAMP)
	$(BIN)/agentfleet up

## Debian's chromium and Firefox ESR for the console's browser tests: installed only as root
## and only when missing; without them those tests skip, saying why.
browser:
	@if { [ ! -x /usr/bin/chromium ] || [ ! -x /usr/lib/firefox-esr/firefox-esr ]; } \
	    && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get update -q && apt-get install -y -q chromium firefox-esr \
	    || echo "chromium or firefox-esr could not be installed: the browser tests will skip"; \
	fi

## The whole test suite (unit, integration, e2e) on real PostgreSQL and real gRPC.
test: $(STAMP) browser
	$(BIN)/python -m pytest -q -p no:cacheprovider

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/unit

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/buf lint

fmt: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

## Regenerate libs/agentfleet/v1 from protos/ (the result is committed).
proto: $(STAMP)
	$(BIN)/python protos/generate.py

## Benchmarks, peers (google-adk, langgraph) in their own venv; writes bench/RESULTS.md.
PEERS := bench/.peers-venv
$(PEERS)/.installed-stamp: bench/peers/requirements.txt
	@test -x $(PEERS)/bin/python || $(PYTHON) -m venv $(PEERS)
	$(PEERS)/bin/python -m pip install --quiet --upgrade pip
	$(PEERS)/bin/python -m pip install --quiet -r bench/peers/requirements.txt
	@touch $@

bench: $(STAMP) $(PEERS)/.installed-stamp
	$(BIN)/python bench/run_all.py $(BENCH_ARGS)

soak: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider -m soak

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
