# The project's two entry points: `make test` runs every check and test; `make demo` shows kopf at work.
VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin

.PHONY: test venv controlplane

venv: $(VENV)/.installed

$(VENV)/.installed: requirements.txt setup.py
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r requirements.txt
	touch $@

controlplane:
	bash tests/e2e/controlplane/build.sh

test: venv controlplane
	$(BIN)/ruff check kopf tests
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/python -m pytest
