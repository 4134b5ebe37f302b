# The two commands a new user runs:  `make demo` (the main job) and `make test`.
# Each sets up what it needs: an OpenCL driver (PoCL on a CPU-only machine) and a
# virtual environment in .venv with dlprim installed in editable mode.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip install -q --disable-pip-version-check
PYTEST_ARGS ?=

.PHONY: demo test opencl clean

opencl:
	@bash tools/ensure-opencl.sh

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# dlprim with the plot extra: enough to train and draw the curves
$(VENV)/.demo: setup.cfg pyproject.toml | $(BIN)/python
	$(PIP) -e '.[plot]'
	touch $@

# dlprim with the test extras (pytest, PyTorch CPU as a reference, h5py, matplotlib)
$(VENV)/.test: setup.cfg pyproject.toml | $(BIN)/python
	$(PIP) -e '.[test]'
	touch $@

# --force: each demo starts afresh over the previous one
demo: opencl $(VENV)/.demo
	$(BIN)/dlprim-train examples/mnist/config.json --out runs/mnist --force

test: opencl $(VENV)/.test
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info runs
