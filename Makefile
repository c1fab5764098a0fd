# The two commands of the README: `make demo` and `make test`. Everything else supports them.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: demo test lint install system-deps bench clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ".[dev]"
	touch $@

install: $(BIN)/.installed

# MariaDB for the real-MySQL tests (Debian's package; the suite starts its own throwaway server).
system-deps:
	@command -v mariadbd >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mariadb-server >/dev/null; \
	  else sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mariadb-server >/dev/null; fi; }

demo: install
	$(BIN)/falcon demo $(if $(KEEP),--keep-running,)

test: install system-deps lint
	$(BIN)/pytest -q

# Style, types (mypy --strict on both packages) and the layering contracts in .importlinter.
lint: install
	$(BIN)/ruff check src tests flows blocks benchmarks
	$(BIN)/ruff format --check src tests flows blocks benchmarks
	$(BIN)/mypy
	$(BIN)/lint-imports

bench: install
	$(BIN)/python benchmarks/bench_scheduling.py

clean:
	rm -rf .falcon .pytest_cache .mypy_cache .ruff_cache
