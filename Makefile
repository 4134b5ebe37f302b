# The two commands a new user runs:  `make demo` (the main job) and `make test`.
# Each sets up what it needs in a virtual environment in .venv: dlprim installed in
# editable mode with the `cpu` extra, which brings PoCL (an OpenCL driver for the CPU)
# from pip, so no system driver, root or apt is needed; a GPU driver, where there is one,
# is found too.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip install -q --disable-pip-version-check
PYTEST_ARGS ?=
# PyTorch's CPU build for the tests (PyPI's Linux wheel is the CUDA one)
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu

.PHONY: demo test opencl clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# dlprim with PoCL and the plot extra: enough to train and draw the curves
$(VENV)/.demo: setup.cfg pyproject.toml | $(BIN)/python
	$(PIP) -e '.[cpu,plot]'
	touch $@

# PyTorch from its CPU index; where that cannot be reached, a torch wheel pip is
# configured to find locally (find-links) with its dependencies from the usual index;
# last, whatever the usual index offers
$(VENV)/.torch: requirements/torch.txt | $(BIN)/python
	$(PIP) -r requirements/torch.txt --index-url $(TORCH_INDEX) --retries 0 --timeout 15 2>/dev/null \
	  || { $(PIP) --no-deps --no-index -r requirements/torch.txt && $(PIP) -r requirements/torch.txt; } \
	  || $(PIP) -r requirements/torch.txt
	touch $@

# dlprim with PoCL, and the test tools and references (requirements/, not an extra)
$(VENV)/.test: setup.cfg pyproject.toml requirements/test.txt $(VENV)/.torch | $(BIN)/python
	$(PIP) -e '.[cpu]' -r requirements/test.txt
	touch $@

# an OpenCL platform must be there once dlprim is installed (else: what to install)
opencl:
	@$(BIN)/python -c "import dlprim; dlprim.Context()" >/dev/null || bash tools/ensure-opencl.sh

# --force: each demo starts afresh over the previous one
demo: $(VENV)/.demo opencl
	$(BIN)/dlprim-train examples/mnist/config.json --out runs/mnist --force

test: $(VENV)/.test opencl
	$(BIN)/python -m pytest -q $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info runs
