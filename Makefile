# Every target creates .venv and installs into it first; an up-to-date .venv is reused.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: run test test-fast check format bench openapi clean venv etcd

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Petrel needs Python 3.11 or newer (set PYTHON=...)")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	@touch $(STAMP)

venv: $(STAMP)

# The tests of a replicated cluster run real etcd members: Debian's etcd-server, installed through apt when missing
# and run as root (CI); otherwise a message says what to install, and those tests fail naming the package.
etcd:
	@sh deploy/install_etcd.sh

run: $(STAMP)
	$(BIN)/petrel up $(ARGS)

# Two workers, each test file on one (a module's shared cluster stays with its tests); tests use
# ephemeral ports, their own Redis key prefixes and PostgreSQL schemas. One process: PYTEST_ARGS=-n0
test: $(STAMP) etcd
	$(BIN)/pytest -n 2 --dist loadfile $(PYTEST_ARGS)

# Everything but the e2e tests (real processes on loopback): about two minutes.
test-fast: $(STAMP) etcd
	$(BIN)/pytest -n 2 --dist loadfile -m "not e2e" $(PYTEST_ARGS)

check: $(STAMP)
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench: $(STAMP)
	$(BIN)/petrel bench $(ARGS)

openapi: $(STAMP)
	$(BIN)/petrel openapi

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache .hypothesis
