# The two commands a new user runs:  `make demo` (the main job) and `make test`.
# Each sets up what it needs: an OpenCL driver (PoCL on a CPU-only machine) and a
# virtual environment in .venv with dlprim installed in editable mode.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: demo test opencl install clean

opencl:
	@bash tools/ensure-opencl.sh

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: setup.cfg pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q --disable-pip-version-check -e '.[test]'
	touch $@

install: opencl $(VENV)/.installed

demo: install
	$(BIN)/python examples/quickstart.py

test: install
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info
