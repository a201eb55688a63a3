# ToolHub: `make run` serves the dashboard with a worker; `make test` runs the tests.
# Both set up everything they need on a fresh Debian machine with Python 3.11.

SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
DATA ?= $(CURDIR)/.data
WHEELHOUSE := $(DATA)/wheelhouse
# Changes whenever the wanted wheels change, so an old wheelhouse is topped up.
WHEELHOUSE_STAMP = .complete-$(shell cat toolhub/runtime/requirements.txt tests/wheelhouse.txt tests/wheelhouse-mcpo.txt | sha256sum | cut -c1-12)
PORT ?= 8000
export TOOLHUB_DATA_DIR ?= $(DATA)

.PHONY: run test lint lock wheelhouse system system-test deps dev-deps data messages bench clean

$(VENV)/.installed: requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade "pip>=24"
	$(PY) -m pip install -q --require-hashes -r requirements.txt
	touch $@

# Tests and tools (pytest, Playwright, ruff, mypy) on top of the production set.
$(VENV)/.installed-dev: $(VENV)/.installed requirements-dev.txt
	$(PY) -m pip install -q --require-hashes -r requirements-dev.txt
	touch $@

deps: $(VENV)/.installed

dev-deps: $(VENV)/.installed-dev

# System packages and the sandbox's unprivileged user. Needs root the first time; as
# another user it only checks and tells what is missing.
system:
	@./scripts/system-setup

system-test:
	@./scripts/system-setup test

data:
	@mkdir -p -m 0711 $(DATA)
	@chmod 0711 $(DATA)
	@test -f $(DATA)/toolhub.env || $(PY) scripts/make_env.py $(DATA)/toolhub.env

# The runtime's locked requirements and the demo's `humanize`, for offline builds in tests.
wheelhouse: dev-deps
	@mkdir -p $(WHEELHOUSE)
	@test -f $(WHEELHOUSE)/$(WHEELHOUSE_STAMP) || ( \
	  $(PY) -m pip download -q --only-binary=:all: --no-deps -d $(WHEELHOUSE) -r toolhub/runtime/requirements.txt && \
	  $(PY) -m pip download -q --only-binary=:all: --no-deps -d $(WHEELHOUSE) -r tests/wheelhouse.txt && \
	  $(PY) -m pip download -q --only-binary=:all: --no-deps -d $(WHEELHOUSE)/mcpo -r tests/wheelhouse-mcpo.txt && \
	  touch $(WHEELHOUSE)/$(WHEELHOUSE_STAMP) )

run: deps system data
	@echo "ToolHub: http://127.0.0.1:$(PORT)/  (log in as admin; Ctrl-C stops the web server and the workers)"
	@# Without REDIS_URL a private redis-server on a UNIX socket in $(DATA)/redis; then migrate,
	@# the first admin and the demo on it (--setup); then the web server, the work worker, the
	@# maintenance worker (the reaper) and beat, each in a process group of its own, a dead
	@# worker restarted: Ctrl-C stops all of them within 5 s, a second Ctrl-C at once.
	@exec $(PY) scripts/serve.py --port $(PORT) --data $(DATA) --setup

# Tests run against $DATABASE_URL / $REDIS_URL when set (CI sets both), else SQLite and
# the embedded broker. Three pytest processes side by side (scripts/run_tests.py): the tests
# that use what the host shares (sandboxes, workers, faults) in two, the rest in the third;
# TEST_PARTS=1 runs everything in one.
test: dev-deps system-test wheelhouse
	TOOLHUB_DATA_DIR=/tmp/toolhub-test-data $(VENV)/bin/ruff check .
	TOOLHUB_DATA_DIR=/tmp/toolhub-test-data $(VENV)/bin/mypy
	TOOLHUB_DATA_DIR=/tmp/toolhub-test-data $(PY) scripts/run_tests.py $(PYTEST_ARGS)

lint: dev-deps
	$(VENV)/bin/ruff check .
	TOOLHUB_DATA_DIR=/tmp/toolhub-test-data $(VENV)/bin/mypy

lock: deps
	$(VENV)/bin/pip-compile -q --generate-hashes --allow-unsafe --strip-extras -o requirements.txt requirements.in
	$(VENV)/bin/pip-compile -q --generate-hashes --allow-unsafe --strip-extras -o requirements-dev.txt requirements-dev.in
	$(VENV)/bin/pip-compile -q --generate-hashes --allow-unsafe --strip-extras -o toolhub/runtime/requirements.txt toolhub/runtime/requirements.in

messages: dev-deps
	DJANGO_SETTINGS_MODULE=toolhub.settings_test $(PY) manage.py makemessages -l fr -l pl -l tr -l zh_Hans --ignore=.venv --ignore=.data --ignore=tests
	DJANGO_SETTINGS_MODULE=toolhub.settings_test $(PY) manage.py compilemessages --ignore=.venv

bench: dev-deps wheelhouse
	$(PY) bench/environments.py
	$(PY) bench/invoke.py
	$(PY) bench/drain_cpu.py
	$(PY) bench/sandbox_cpu.py
	$(PY) bench/egress.py
	$(PY) bench/serve.py

clean:
	rm -rf $(VENV) /tmp/toolhub-test-data

# The container image (Dockerfile; docs/deploying.md, "A container image"), and a real run of
# it: web, worker and maintenance worker containers against $DATABASE_URL's PostgreSQL and
# $REDIS_URL, a toolkit built and a tool called in the worker's sandbox (scripts/image_check.py;
# IMAGE_CHECK_ARGS="--base toolhub-base:bookworm --offline --wheelhouse $(WHEELHOUSE)" offline).
.PHONY: image image-check
image:
	docker build -t toolhub:latest .

image-check: deps
	$(PY) scripts/image_check.py $(IMAGE_CHECK_ARGS)
