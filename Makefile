# agentbox: `make demo` runs the demo crew, `make test` runs the whole test-suite.
# Both set themselves up: a local .venv, the package, and (for tests) bubblewrap,
# pinned agent CLIs in .tools/ and, as root, a throwaway user for the sandbox tests' second pass.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test setup clis bwrap chromium testuser lint bench clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	@touch $(STAMP)

setup: $(STAMP)

bwrap:
	@command -v bwrap >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && apt-get install -y -qq bubblewrap; \
	  else echo "bubblewrap is missing: install it (e.g. sudo apt-get install bubblewrap)"; exit 1; fi; }

clis:
	bash scripts/install-clis.sh

# Debian's chromium, for the browser tests of `agentbox serve` (Playwright drives it; no browser download)
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && apt-get install -y -qq chromium; \
	  else echo "chromium is missing: install it (e.g. sudo apt-get install chromium)"; exit 1; fi; }

# as root: a throwaway user and a Python it can run, for the unprivileged pass of tests/security
testuser:
	@bash scripts/setup-test-user.sh

demo: setup bwrap
	$(BIN)/agentbox demo

test: setup bwrap clis chromium testuser
	PATH="$(CURDIR)/.tools/bin:$$PATH" AGENTBOX_REQUIRE_BWRAP=1 AGENTBOX_REQUIRE_REAL_CLIS=1 AGENTBOX_REQUIRE_BROWSER=1 \
	  $(BIN)/python -m pytest -q $(PYTEST_ARGS)

lint: setup
	$(BIN)/ruff check agentbox tests bench
	$(BIN)/mypy

bench: setup bwrap
	$(BIN)/python bench/run_all.py

clean:
	rm -rf $(VENV) .tools .pytest_cache
