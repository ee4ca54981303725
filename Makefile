# Two commands for a fresh machine:  make run   (the daemon)   make test   (the whole suite)
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
ARGS ?=
PYTEST_ARGS ?=

.PHONY: run test bench clean extension-vendor

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Reinstall when the packaging changes.
$(VENV)/.installed: $(BIN)/python pyproject.toml setup.cfg
	$(BIN)/python -m pip install --quiet --quiet --config-settings editable_mode=compat -e .
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed
	$(BIN)/python -m pip install --quiet --quiet --config-settings editable_mode=compat -e '.[test]'
	touch $@

run: $(VENV)/.installed
	$(BIN)/twistd -n --pidfile= gasoline $(ARGS)

# mypy (with mypy-zope) checks gasoline/ as configured in pyproject.toml [tool.mypy]; it runs
# second, before the slower pydoctor, so a type error shows within seconds.
test: $(VENV)/.installed-test
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/pydoctor --quiet gasoline
	$(BIN)/lint-imports
	$(BIN)/python -m pytest $(PYTEST_ARGS)

bench: $(VENV)/.installed-test
	$(BIN)/python bench/ingest.py
	$(BIN)/python bench/roundtrip.py

# Re-vendor the pinned axe-core into extension/vendor/ (the result is committed).
extension-vendor:
	bash extension/scripts/vendor-axe.sh

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis
