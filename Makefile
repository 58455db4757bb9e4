# The project's two entry points: `make test` runs every check and test; `make demo` shows kopf at work.
VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin

.PHONY: test venv controlplane demo

venv: $(VENV)/.installed

$(VENV)/.installed: requirements.txt setup.py
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r requirements.txt
	touch $@

controlplane: venv
	$(BIN)/python -m kopf.testing build

test: venv controlplane
	$(BIN)/ruff check kopf tests examples tools benchmarks
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/sphinx-build -W -q -b html docs docs/_build/html
	$(BIN)/python -m pytest

# The demo builds the control plane itself, and explains what to do where Go is missing.
demo: venv
	$(BIN)/python tools/demo.py
