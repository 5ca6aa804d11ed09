# make test / make demo: each creates .venv if missing and installs what it needs.
# The install is redone only when pyproject.toml, setup.py or the engine's C core changes
# (the stamp file), so a second run starts at once.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-dev
PYTEST_ARGS ?=
# make test runs the whole suite on JOBS processes at once (pytest-xdist, each taking work
# from the others as it runs out): unit, integration, CLI, HTTP, docs, the browser, Spark,
# the benchmarks' smoke runs and the chaos tests (kill -9 and a server's faults, marked
# chaos). No test has a bound on time (how late is a benchmark's figure), so each holds
# on a busy machine; the chaos tests ran apart, one at a time, while three of them
# bounded lateness. MARKS narrows it (a pytest -m expression), e.g.
#   make test MARKS="not chaos and not slow"
# JOBS: twice the cores, at most 8. The tests mostly wait (on servers, subprocesses,
# leases and schedules due in real time): two of them kept 0.8 of 2 cores busy, and four
# ran the same tests in 0.68x the time (six: no faster). JOBS=1 runs them one at a time.
JOBS  ?= $(shell n=$$(nproc 2>/dev/null || echo 1); j=$$((n * 2)); [ $$j -gt 8 ] && j=8; echo $$j)
MARKS ?=
# pytest on JOBS processes, with -m "<expression>" when one is given (MARKS, and the
# server pass's redis); an expression that selects nothing (exit 5) is not a failure
define pytest_jobs
$(BIN)/python -m pytest -n $(JOBS) --dist worksteal $(if $(1),-m "$(1)") $(PYTEST_ARGS) || [ $$? -eq 5 ]
endef

.PHONY: test test-server demo bench lint unit clean venv docs sim exhaustive docs-build wheel

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml setup.py timer/engine/_speedups.c | $(BIN)/python
	$(BIN)/python -m pip install -qq -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

# tools/unasync.py --check: the blocking driver is still the asyncio driver's generated twin
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy timer sim benchmarks examples tests tools docs/_hooks/site.py
	$(BIN)/python tools/unasync.py --check

test: lint
	$(call pytest_jobs,$(MARKS))

# The Redis-touching tests again, against another server binary:
#   make test-server SERVER=/usr/bin/redis-server
# and with the oldest redis-py pyproject.toml declares (CI's second pass), installed
# beside the venv's own (the newest) and put first on the path:
#   make test-server SERVER=/usr/bin/redis-server REDIS_PY=oldest
REDIS_PY ?=
REDIS_PY_OLDEST := 5.3.1
# absolute: a test's subprocess started in another directory runs it too
OLDEST := $(abspath $(VENV))/redis-py-$(REDIS_PY_OLDEST)
$(OLDEST)/.installed: | $(BIN)/python
	$(BIN)/python -m pip install --quiet --target $(OLDEST) 'redis==$(REDIS_PY_OLDEST)'
	touch $@

test-server: $(STAMP) $(if $(REDIS_PY),$(OLDEST)/.installed)
	$(if $(REDIS_PY),PYTHONPATH=$(OLDEST)) TICKWHEEL_TEST_SERVER=$(SERVER) \
	  $(call pytest_jobs,redis$(if $(MARKS), and ($(MARKS))))

# The sdist and, from it, the wheel, in $(DIST) (as .ci/wheel builds them), after
# installing build into the venv: without it, python -m build run from the checkout took
# the build/ directory a setuptools build leaves for the package ("No module named
# build.__main__"). -P keeps the current directory off the path all the same.
DIST ?= dist
wheel: | $(BIN)/python
	$(BIN)/python -m pip install -qq build
	$(BIN)/python -P -m build --quiet --outdir $(DIST) .  # (not a line per file it adds)
	@ls -1 $(DIST)/tickwheel-*

unit: $(STAMP)
	$(BIN)/python -m pytest tests/unit $(PYTEST_ARGS)

# One extra installed (make demo: server; make docs: docs), redone when the stamp is stale.
# -qq: setuptools prints a ten-line notice on every editable install (errors still show).
$(VENV)/.installed-extra-%: pyproject.toml setup.py timer/engine/_speedups.c | $(BIN)/python
	$(BIN)/python -m pip install -qq -e '.[$*]'
	touch $@

# The demo needs only the embedded server (the server extra): not Spark, not the browser.
DEMO_STAMP := $(VENV)/.installed-extra-server

# The main job on the embedded server, which is stopped afterwards (its data stays in
# ~/.local/state/tickwheel/). Pass options through DEMO_ARGS, e.g. make demo DEMO_ARGS="--timers 5000".
DEMO_ARGS ?=
# stops the embedded server afterwards only if the demo started it (not yours)
demo: $(DEMO_STAMP)
	@if $(BIN)/tickwheel server status >/dev/null 2>&1; then mine=; else mine=1; fi; \
	$(BIN)/tickwheel demo $(DEMO_ARGS); rc=$$?; \
	if [ -n "$$mine" ] && $(BIN)/tickwheel server status >/dev/null 2>&1; then \
	  $(BIN)/tickwheel server stop; fi; exit $$rc

# The deterministic simulation of the whole protocol on virtual time (sim/): SEEDS seeds
# (each a hypothesis campaign of runs), or one SEED replayed exactly, its failure shrunk:
#   make sim SEEDS=100000        make sim SEED=1234        make sim SIM_ARGS="--plant fence"
SEEDS ?= 50
SIM_ARGS ?=
sim: $(STAMP)
	PYTHONHASHSEED=0 $(BIN)/python -m sim $(if $(SEED),--seed $(SEED),--seeds $(SEEDS)) $(SIM_ARGS)

# Every interleaving of a small world's steps to DEPTH (sim/exhaustive.py), one JSON line:
#   make exhaustive DEPTH=6      make exhaustive EXHAUSTIVE_ARGS="--plant fence --first"
DEPTH ?= 5
EXHAUSTIVE_ARGS ?=
exhaustive: $(STAMP)
	PYTHONHASHSEED=0 $(BIN)/python -m sim.exhaustive --depth $(DEPTH) $(EXHAUSTIVE_ARGS)

# Every benchmark, results in benchmarks/results.json. QUICK=1 for the quick mode.
# The peers (arq, RQ) come from the bench extra, installed here only.
BENCH_STAMP := $(VENV)/.installed-bench
$(BENCH_STAMP): pyproject.toml $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	$(BIN)/python -m benchmarks.run_all $(if $(QUICK),--quick,)

# The documentation site on http://127.0.0.1:8001/ (mkdocs.yml's dev_addr: 8000 is tickwheel
# serve's; the tests build it with --strict and run its examples). DOCS_ARGS="-a
# 0.0.0.0:8001" to listen beyond loopback.
# Both install the docs extra first (MkDocs and its plugins) when the stamp is stale.
DOCS_STAMP := $(VENV)/.installed-extra-docs
DOCS_ARGS ?=
docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve $(DOCS_ARGS)

# The site built once, strictly, into SITE_DIR (site/ by default; git ignores it), to
# publish (its links are directory URLs: serve it, e.g. python -m http.server 8001 -d site,
# rather than open its files from disk). TICKWHEEL_DOCS_URL=... for a site published elsewhere.
SITE_DIR ?= site
docs-build: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir $(SITE_DIR)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build *.egg-info
