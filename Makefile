# Every target creates .venv and installs into it first; an up-to-date .venv is reused. --no-compile: Python
# compiles each module the first time it is imported, not every module of every package at install (pyspark,
# matplotlib, ...): 53 s -> 33 s for a fresh venv here.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# One stamp per set of extras: `make run` installs the runtime and the ETL's Spark (`.[etl]`, the default cluster
# runs the nightly ETL's worker and beat); `make test`/`make check` add the toolchain (`dev`) to the same venv, and
# stamp both sets, so a `make run` after them reuses it.
CREATED   := $(VENV)/.created-stamp
RUN_STAMP := $(VENV)/.installed-etl-stamp
DEV_STAMP := $(VENV)/.installed-dev-stamp

.PHONY: run test test-fast check format bench openapi clean venv compiled etcd faketime chromium wrk

$(CREATED):
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Petrel needs Python 3.11 or newer (set PYTHON=...)")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade --progress-bar on pip
	@touch $(CREATED)

# pip's progress is shown: a first `make run` downloads Spark (~450 MB) when pip's cache does not hold it.
$(RUN_STAMP): pyproject.toml $(CREATED)
	$(BIN)/pip install --no-compile --progress-bar on -e '.[etl,compiled]'
	@touch $(RUN_STAMP)

$(DEV_STAMP): pyproject.toml $(CREATED)
	$(BIN)/pip install --quiet --no-compile -e '.[etl,compiled,dev]'
	@touch $(RUN_STAMP) $(DEV_STAMP)

venv: $(DEV_STAMP) compiled

# The hot modules compiled with mypyc into .venv/petrel-compiled/<hash of their sources>/ (deploy.compiled), where
# libs.compiled loads them only while their sources are unchanged: a no-op when a build of these sources exists,
# skipped (the plain modules run) without a C compiler. PETREL_COMPILED=off: neither built nor loaded.
compiled: $(RUN_STAMP)
	$(BIN)/python -m deploy.compiled

# Debian packages the tests need, installed through apt when missing and run as root (CI); otherwise a message says
# what to install, and the tests that need one fail naming it (deploy/install_debian_package.sh).
# etcd: the tests of a replicated cluster run real etcd members, as `petrel up --replicas` does (which refuses to
# start without it, naming the package too).
etcd:
	@sh deploy/install_debian_package.sh etcd-server "the etcd tests" 'command -v etcd'

# The nemesis run steps one process's wall clock through Debian's libfaketime (package faketime).
faketime:
	@sh deploy/install_debian_package.sh faketime "the nemesis test" 'ls /usr/lib/*/faketime/libfaketime.so.1'

# The console's browser tests drive Debian's chromium through Playwright (tests/e2e/test_console.py).
chromium:
	@sh deploy/install_debian_package.sh chromium "the console's browser tests" 'test -x /usr/bin/chromium'

# The bench's HTTP loads are driven by wrk (bench/wrk.py installs it too when a run finds it missing).
wrk:
	@sh deploy/install_debian_package.sh wrk "the bench's HTTP loads and tests/bench/test_wrk.py" 'command -v wrk'

run: $(RUN_STAMP) compiled etcd
	$(BIN)/petrel up $(ARGS)

# The tests keep Python's bytecode caches even where the shell turns them off (PYTHONDONTWRITEBYTECODE, as some
# sandboxes set it): each worker imports ~500 modules and pytest rewrites every test module's asserts, ~5 CPU-s a
# worker (and more in the processes tests start) when nothing is cached.
TEST_ENV := PYTHONDONTWRITEBYTECODE=

# Three workers on 2 cores, each test file on one (a module's shared cluster stays with its tests); tests use
# ephemeral ports, their own Redis key prefixes and PostgreSQL schemas. A third worker fills the cores while the
# others wait on clusters starting, kills and timeouts: with two, a sixth of the CPU stood idle (265 of 1,460
# CPU-s) and the suite took 742 s; with three, 699 s, the CPU idle 4 % (2026-11-28, the same hour, FastAPI no-op
# 5,700/s); 564-576 s an hour later (6,229/s). One process: PYTEST_ARGS=-n0
test: $(DEV_STAMP) compiled etcd faketime chromium wrk
	$(TEST_ENV) $(BIN)/pytest -n 3 --dist loadfile $(PYTEST_ARGS)

# The developer's quick loop, under two minutes: every test but those marked `e2e` (whole clusters of real
# processes on loopback, the docs pages run as written) and those marked `spark` (they start a JVM: the ETL job's
# tests under tests/services/etl and the Spark docs page, tests.support.markers); property and fuzz tests try a quarter
# of their generated inputs (tests.support.examples). `make test` runs everything, every input.
test-fast: $(DEV_STAMP) compiled etcd
	$(TEST_ENV) TESTS_QUICK=1 $(BIN)/pytest -n 2 --dist loadfile -m "not e2e and not spark" $(PYTEST_ARGS)

check: $(DEV_STAMP)
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports

format: $(DEV_STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench: $(DEV_STAMP) compiled faketime wrk
	$(BIN)/petrel bench $(ARGS)

openapi: $(DEV_STAMP)
	$(BIN)/petrel openapi

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache .hypothesis
