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

# MariaDB for the real-MySQL tests, PostgreSQL for the chaos run's Prefect server, Chromium for
# the Prefect UI test, promtool (in `prometheus`) for the alert rules and shellcheck for the edge
# bootstrap script (Debian's packages; the suite starts its own throwaway servers).
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
system-deps:
	@missing="$$(command -v mariadbd >/dev/null 2>&1 || echo mariadb-server) \
	  $$(ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || echo postgresql) \
	  $$(command -v chromium >/dev/null 2>&1 || echo chromium) \
	  $$(command -v promtool >/dev/null 2>&1 || echo prometheus) \
	  $$(command -v shellcheck >/dev/null 2>&1 || echo shellcheck)"; \
	if [ -n "$$(echo $$missing)" ]; then \
	  $(SUDO) apt-get update -qq && $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; fi

demo: install
	$(BIN)/falcon demo $(if $(KEEP),--keep-running,)

# Three workers on two cores: most tests wait on servers, not on the CPU. The chaos run starts
# first (tests/conftest.py) and the other workers steal the rest of its share meanwhile.
test: install system-deps lint
	$(BIN)/pytest -q -n 3 --dist worksteal

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
