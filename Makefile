# Agent Ledger. `make run` for a local demo (embedded PostgreSQL, no Redis), `make test` for the
# full suite against real PostgreSQL and Redis. See README.md.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml client/pyproject.toml | sha256sum | cut -c1-12)
HOST ?= 127.0.0.1
PORT ?= 8000

# The test suite talks to real services; override these to point elsewhere. Without a server at
# TEST_DATABASE_URL the tests use an embedded PostgreSQL (scripts/test-database-url).
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/agent_ledger
TEST_BROKER_URL ?= redis://127.0.0.1:6379/15
# The runner holds a transaction open around a test while it waits on the processes it started,
# so the idle timeouts that production sets are off for the suite; creating and dropping the
# test databases on a busy machine may take longer than a request's statement may.
TEST_ENV = DATABASE_URL=$$(TEST_DATABASE_URL=$(TEST_DATABASE_URL) PY=$(PY) scripts/test-database-url) \
	CELERY_BROKER_URL=$(TEST_BROKER_URL) \
	DATABASE_IDLE_IN_TRANSACTION_TIMEOUT_MS=0 DATABASE_IDLE_SESSION_TIMEOUT_MS=0 \
	DATABASE_STATEMENT_TIMEOUT_MS=120000 \
	SECRET_KEY=test-only-secret-key-not-for-production-use-0123456789abcdef \
	DEBUG=false SECURE_SSL_REDIRECT=false ALLOWED_HOSTS=testserver,localhost,127.0.0.1 \
	DJANGO_ALLOW_ASYNC_UNSAFE=true STATIC_MANIFEST=false

.PHONY: install run stop worker test lint format services clean messages drill bench bench-console mutate typescript-types

$(STAMP): pyproject.toml client/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e ".[dev]"
	# The client is a distribution of its own (client/); tests, drill/ and bench/ import it.
	$(VENV)/bin/pip install --quiet -e "./client[mcp,langgraph,openai-agents,pydantic-ai]"
	rm -f $(VENV)/.installed-*
	touch $@

install: $(STAMP)

# The TypeScript client's build tools (clients/typescript): `make test` and `make lint` need them.
TS_CLIENT := clients/typescript
TS_STAMP := $(TS_CLIENT)/node_modules/.installed-$(shell sha256sum $(TS_CLIENT)/package-lock.json | cut -c1-12)
$(TS_STAMP): $(TS_CLIENT)/package-lock.json
	cd $(TS_CLIENT) && npm ci --no-audit --no-fund --loglevel=error
	touch $@

# The TypeScript client's types of the API, generated from the OpenAPI document the service
# serves (tests/client/test_typescript_client.py fails when they differ).
typescript-types: install $(TS_STAMP)
	DEBUG=true SECRET_KEY=types DATABASE_URL=postgres://types@127.0.0.1/types $(PY) manage.py \
		export_openapi_schema --api console.api.api --output var/openapi.json
	$(TS_CLIENT)/node_modules/.bin/openapi-typescript var/openapi.json -o $(TS_CLIENT)/src/openapi.ts

# The live demo: migrate and seed, then the sandbox downstreams, the web server, a worker with
# beat and (once) the demo agent, all stopped by one Ctrl-C (console/demo_stack.py).
run: install
	$(PY) -m console.demo_stack --host $(HOST) --port $(PORT)

# Stops the embedded PostgreSQL that `make run` started (it outlives the web server on purpose:
# management commands share it).
stop:
	$(PY) -m console.embedded stop
	@# The Redis that scripts/ensure-services.sh starts where none is installed.
	@for pid in var/redis-test/*.pid; do [ -f "$$pid" ] && kill "$$(cat "$$pid")" || true; done

# A reconciliation worker with the periodic sweeps (beat) for the embedded default (`make run`
# starts one of its own). In production run workers and one beat per docs/deploy.md "Workers and beat".
# The demo's sandbox downstreams listen on 127.0.0.1: look-ups may reach private addresses.
worker: install
	DEBUG=true LEDGER_OUTBOUND_ALLOW_PRIVATE=true $(VENV)/bin/celery -A console worker -B -Q reconcile,maintenance,notify -c 2 -l INFO

services:
	@TEST_DATABASE_URL=$(TEST_DATABASE_URL) TEST_BROKER_URL=$(TEST_BROKER_URL) PY=$(PY) \
		scripts/ensure-services.sh

# The suite runs in TEST_WORKERS processes (pytest-xdist), each on a test database of its own:
# much of a test's time is spent waiting on PostgreSQL, Chromium or a child process, and four
# workers overlap those waits on two cores (docs/testing.md "What runs where"). TEST_WORKERS=0
# runs the tests in this one process. The acceptance runs of `make drill` each start a whole
# stack of processes: two at a time (SCALE_WORKERS).
TEST_WORKERS ?= 4
SCALE_WORKERS ?= 2
test: install services $(TS_STAMP)
	$(TEST_ENV) $(PY) manage.py collectstatic --noinput -v0
	$(TEST_ENV) $(PY) -m pytest -n $(TEST_WORKERS) --dist load $(PYTEST_ARGS)

# Benchmarks against PostgreSQL and Redis with gunicorn (docs/performance.md); QUICK=1 is the
# same run with smaller numbers. Uses its own database, created fresh, and its own redis-server.
BENCH_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/agent_ledger_bench
bench: install services
	BENCH_DATABASE_URL=$(BENCH_DATABASE_URL) $(PY) -m bench $(if $(QUICK),--quick)
bench-console: install
	BENCH_DATABASE_URL=$(BENCH_DATABASE_URL) $(PY) -m bench.console $(if $(QUICK),--quick) $(if $(RELOAD),--reload)

# Failure drills against the whole stack as separate processes (gunicorn, Celery workers, beat,
# a private redis-server, the sandbox) on a fresh database; evidence in var/drill.json.
drill: install services
	$(PY) -m drill --postgres $(patsubst %/,%,$(dir $(TEST_DATABASE_URL))) $(DRILL_ARGS)
	@# The acceptance runs at full size (pytest marker `scale`), too long for `make test`; the
	@# browser tests among them need the collected static files, as in `make test`.
	$(TEST_ENV) $(PY) manage.py collectstatic --noinput -v0
	$(TEST_ENV) $(PY) -m pytest -n $(SCALE_WORKERS) --dist load -m scale $(SCALE_ARGS)

# Mutation testing (docs/testing.md): mutmut over the pure modules and the record transitions,
# afresh in mutants/, each mutant against the tests that reach it; then the per-module report,
# which fails when a module has more surviving mutants than its budget. Outside `make test`.
mutate: install services
	rm -rf mutants && mkdir -p var
	@# The record transitions and the observations share one test database: one mutant at a time.
	$(TEST_ENV) HYPOTHESIS_PROFILE=mutate $(VENV)/bin/mutmut run --max-children 1 \
		"ledger.records.*" "ledger.calls.observations.*" > var/mutmut.log 2>&1 \
		|| { tail -c 2000 var/mutmut.log; exit 1; }
	$(TEST_ENV) HYPOTHESIS_PROFILE=mutate $(VENV)/bin/mutmut run --max-children 2 \
		$(foreach m,decisions keys classification redaction,"ledger.$(m).*") \
		>> var/mutmut.log 2>&1 || { tail -c 2000 var/mutmut.log; exit 1; }
	$(PY) -m tests.mutation_budget mutants

lint: install $(TS_STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	DEBUG=true DATABASE_URL=postgres://lint@127.0.0.1/lint $(VENV)/bin/mypy .
	$(TS_CLIENT)/node_modules/.bin/tsc -p $(TS_CLIENT) --noEmit

format: install
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

# Re-extract the console's strings into locale/*/django.po and compile them (needs GNU gettext).
# Translate any new empty msgstr, then run it again; commit both the .po and the .mo.
MESSAGE_IGNORES := $(foreach d,.venv staticfiles var tests drill bench test-artifacts sandbox client,--ignore '$(d)/*')
messages: install
	DEBUG=true DATABASE_URL=postgres://messages@127.0.0.1/messages $(PY) manage.py makemessages -l zh_Hans --no-location $(MESSAGE_IGNORES)
	DEBUG=true DATABASE_URL=postgres://messages@127.0.0.1/messages $(PY) manage.py compilemessages $(MESSAGE_IGNORES)

clean:
	rm -rf $(VENV) var mutants staticfiles .pytest_cache .mypy_cache .ruff_cache .hypothesis
