# agentsite — the two commands are `make run` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=

.DEFAULT_GOAL := help
.PHONY: help run test test-unit test-e2e test-llm test-llm-suites test-otel chaos chaos-ci lint format docs docs-serve docs-screenshots bench bench-baseline bench-profile vendor clean

help:
	@echo "make run    install into $(VENV), migrate, seed the demo and start everything (Ctrl-C stops it)"
	@echo "make test   install the dev extra if needed and run the test suite (unit, then browser)"
	@echo "make test-unit / make test-e2e   one of the two runs"
	@echo "make test-llm   the tests against a real llama.cpp server (built once per machine, ~12 min)"
	@echo "make test-otel  the OpenTelemetry export tests, against a real Arize Phoenix (installed once per machine, ~1 min)"
	@echo "make chaos  kill workers, restart and freeze Redis, drop connections, fail model requests; SQLite, then PostgreSQL (~17 min)"
	@echo "make chaos-ci   the light slice of it that CI runs (SQLite, ~4 min)"
	@echo "make lint   ruff, and the import contracts of pyproject.toml (lint-imports)"
	@echo "make docs   the documentation site (docs/) into var/site/, strict; make docs-serve to edit it live"
	@echo "make docs-screenshots   the docs' pictures (docs/img/), taken from the product in Chromium"
	@echo "make bench  the benchmarks the project ships, CPU per unit of work against bench/baseline.json"
	@echo "make bench-baseline   run them and write their CPU figures into bench/baseline.json"
	@echo "make bench-profile    flame graphs (py-spy) of a benchmark's processes in var/profile (BENCH_ARGS=api: another)"

$(PY):
	$(PYTHON) -m venv $(VENV)

# Reinstall whenever pyproject.toml changes.
$(VENV)/.installed: pyproject.toml | $(PY)
	$(PY) -m pip install --quiet --disable-pip-version-check -e .
	@touch $@

$(VENV)/.installed-dev: pyproject.toml | $(PY)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	@touch $(VENV)/.installed $@

# make run PORT=8080 HOST=0.0.0.0 serves elsewhere (defaults: 127.0.0.1:8000)
PORT ?= 8000
HOST ?= 127.0.0.1
run: $(VENV)/.installed
	$(PY) manage.py dev --host $(HOST) --port $(PORT)

# Two pytest runs: the unit and real-process suite, then the browser tests (their own session:
# a whole running stack driven by the system Chromium; they skip when it is not installed).
test: test-unit test-e2e

test-unit: $(VENV)/.installed-dev
	$(PY) -m pytest $(PYTEST_ARGS)

test-e2e: $(VENV)/.installed-dev
	$(PY) -m pytest tests/e2e --confcutdir=tests/e2e -p no:cacheprovider $(E2E_ARGS)

# Against a real llama.cpp server (llama-cpp-python's, SmolLM2-135M): tests/llm/server.py builds
# it once per machine into $${AGENTSITE_CACHE_DIR:-~/.cache/agentsite} and starts it on a free
# port, or uses the server at AGENTSITE_LIVE_LLM_URL when that is set. The provider and loop
# tests, then the browser test. Where nothing can be built (no compiler) they skip, saying why.
test-llm: $(VENV)/.installed-dev
	$(PY) -m tests.llm.server run -- $(MAKE) --no-print-directory test-llm-suites

# Both runs, even when the first fails (one server start serves both); fails if either did.
test-llm-suites:
	@status=0; \
	$(PY) -m pytest tests/llm -p no:cacheprovider $(PYTEST_ARGS) || status=1; \
	$(PY) -m pytest tests/e2e/test_llm_chat.py tests/e2e/test_llm_api.py --confcutdir=tests/e2e -p no:cacheprovider $(E2E_ARGS) || status=1; \
	exit $$status

# The OpenTelemetry export tests (tests/otel), against a real Arize Phoenix: tests/otel/phoenix.py
# installs it once per machine into its own virtualenv in $${AGENTSITE_CACHE_DIR:-~/.cache/agentsite}
# and starts it on free ports with an empty store, or uses the server at AGENTSITE_PHOENIX_URL when
# that is set. Where it cannot be installed the Phoenix tests skip, saying why
# (AGENTSITE_PHOENIX_REQUIRED=1 makes that an error).
test-otel: $(VENV)/.installed-dev
	$(PY) -m tests.otel.phoenix run -- $(PY) -m pytest tests/otel -p no:cacheprovider $(PYTEST_ARGS)

# The chaos suite (tests/chaos): real workers killed with SIGKILL (30) and stopped with SIGTERM,
# the embedded Redis killed and restarted (5) and frozen with SIGSTOP (2 x 60 s), the database's
# connections terminated (PostgreSQL, 3), 50 turns against a model failing 30 % of requests;
# SQLite, then PostgreSQL when 127.0.0.1:5432 answers. Fails on a missed target (or a fault
# planned and not made; CHAOS_ASSERT= only reports them). Figures in var/chaos/.
CHAOS_ASSERT ?= --assert-targets
CHAOS_ARGS ?=
chaos: $(VENV)/.installed-dev
	$(PY) -m tests.chaos $(CHAOS_ASSERT) $(CHAOS_ARGS)

# The slice CI runs: 5 kills, 1 Redis restart, 1 Redis freeze, 1 SIGTERM, 10 fault turns, SQLite only.
chaos-ci: $(VENV)/.installed-dev
	$(PY) -m tests.chaos --ci $(CHAOS_ASSERT) $(CHAOS_ARGS)

lint: $(VENV)/.installed-dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports

format: $(VENV)/.installed-dev
	$(VENV)/bin/ruff format .

# The documentation site (docs/, mkdocs.yml) into var/site/, strict: a broken link, a missing
# anchor or a page outside the navigation fails the build. docs-serve rebuilds it as you edit.
docs: $(VENV)/.installed-dev
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

docs-serve: $(VENV)/.installed-dev
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve --dev-addr 127.0.0.1:8001

# The docs' screenshots (docs/img/), taken from the real product in Chromium.
docs-screenshots: $(VENV)/.installed-dev
	$(PY) -m tests.e2e.screenshots

$(VENV)/.installed-bench: pyproject.toml | $(PY)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev,bench]'
	@touch $(VENV)/.installed $(VENV)/.installed-dev $@

# The benchmarks (LangGraph, for comparison, and py-spy come with the bench extra; the gateway
# benchmark installs LiteLLM once per machine in $${AGENTSITE_CACHE_DIR:-~/.cache/agentsite}). Each
# run's CPU per unit of work is compared with bench/baseline.json: what moved is printed at the end.
# BENCH_ARGS: names and options, e.g. BENCH_ARGS="--check gateway -- --database postgres".
bench: $(VENV)/.installed-bench
	$(PY) -m bench $(BENCH_ARGS)

# Rewrite bench/baseline.json from a run (on purpose, after a change that moves the figures; commit it).
bench-baseline: $(VENV)/.installed-bench
	$(PY) -m bench --update-baseline $(BENCH_ARGS)

# py-spy flame graphs (SVG) of the web process and the worker (or of the benchmark's own process)
# while a benchmark runs, into PROFILE_DIR; the gateway by default. BENCH_PROFILE_GIL=1 samples only
# the threads holding the GIL. py-spy needs ptrace: root, or kernel.yama.ptrace_scope=0.
PROFILE_DIR ?= var/profile
bench-profile: $(VENV)/.installed-bench
	$(PY) -m bench --profile $(PROFILE_DIR) $(or $(BENCH_ARGS),gateway)

# Re-fetch the vendored front-end assets from the npm registry (versions in static/vendor/package.json).
vendor:
	@set -e; tmp=$$(mktemp -d); cd $$tmp; \
	  npm pack --silent htmx.org@$$(node -p "require('$(CURDIR)/static/vendor/package.json').dependencies['htmx.org']") >/dev/null; \
	  npm pack --silent htmx-ext-ws@$$(node -p "require('$(CURDIR)/static/vendor/package.json').dependencies['htmx-ext-ws']") >/dev/null; \
	  for f in *.tgz; do mkdir -p "$${f%.tgz}"; tar xzf "$$f" -C "$${f%.tgz}"; done; \
	  cp htmx.org-*/package/dist/htmx.min.js $(CURDIR)/static/vendor/htmx.min.js; \
	  cp htmx-ext-ws-*/package/dist/ws.min.js $(CURDIR)/static/vendor/htmx-ext-ws.min.js; \
	  for p in markdown-it dompurify; do npm pack --silent $$p@$$(node -p "require('$(CURDIR)/static/vendor/package.json').dependencies['$$p']") >/dev/null; done; \
	  for f in markdown-it-*.tgz dompurify-*.tgz; do mkdir -p "$${f%.tgz}"; tar xzf "$$f" -C "$${f%.tgz}"; done; \
	  sed 's|//# sourceMappingURL=.*$$||' markdown-it-*/package/dist/browser/markdown-it.umd.min.js > $(CURDIR)/static/vendor/markdown-it.min.js; \
	  sed 's|//# sourceMappingURL=.*$$||' dompurify-*/package/dist/purify.min.js > $(CURDIR)/static/vendor/purify.min.js; \
	  npm pack --silent axe-core@$$(node -p "require('$(CURDIR)/tests/e2e/vendor/package.json').dependencies['axe-core']") >/dev/null; \
	  mkdir -p axe && tar xzf axe-core-*.tgz -C axe; \
	  cp axe/package/axe.min.js $(CURDIR)/tests/e2e/vendor/axe.min.js; \
	  cd $(CURDIR); rm -rf $$tmp; sha256sum static/vendor/*.js tests/e2e/vendor/*.js

clean:
	rm -rf $(VENV) var .pytest_cache .ruff_cache .hypothesis
