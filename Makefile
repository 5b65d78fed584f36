# The README's commands.  Each target creates .venv if needed and reinstalls
# shardvol (compiling its C/Cython core) when a source file changed.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
SOURCES := pyproject.toml setup.py constraints.txt $(wildcard csrc/*.c csrc/*.h shardvol/_ext/*.pyx shardvol/_ext/*.pxd)

.PHONY: demo test lint bench docs clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.installed-demo: $(BIN)/python $(SOURCES)
	$(BIN)/pip install --quiet -c constraints.txt -e ".[demo]"
	touch $@

$(VENV)/.installed-test: $(BIN)/python $(SOURCES)
	$(BIN)/pip install --quiet -c constraints.txt -e ".[test,dask,demo]"
	touch $@ $(VENV)/.installed-demo

demo: $(VENV)/.installed-demo
	$(BIN)/python -m shardvol.demo

test: $(VENV)/.installed-test
	$(BIN)/python -m pytest

$(VENV)/.installed-lint: $(VENV)/.installed-test
	$(BIN)/pip install --quiet -c constraints.txt -e ".[test,dask,demo,lint]"
	touch $@

# ruff (rules in pyproject.toml) over the code, tests and benchmarks; mypy over shardvol/
lint: $(VENV)/.installed-lint
	$(BIN)/ruff check --no-cache shardvol tests benchmarks
	$(BIN)/mypy

$(VENV)/.installed-bench: $(VENV)/.installed-test
	$(BIN)/pip install --quiet -c constraints.txt -e ".[test,dask,demo,bench]"
	touch $@

bench: $(VENV)/.installed-bench
	$(BIN)/python -m shardvol bench

$(VENV)/.installed-docs: $(BIN)/python $(SOURCES)
	$(BIN)/pip install --quiet -c constraints.txt -e ".[docs]"
	touch $@

# the documentation site (mkdocs.yml, docs/) into build/site; strict: a broken link,
# reference or docstring path fails the build
docs: $(VENV)/.installed-docs
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

clean:
	rm -rf $(VENV) build *.egg-info shardvol/_ext/*.so shardvol/_ext/*.c .mypy_cache .ruff_cache
