# The two commands a new user runs:  `make demo` (the main job) and `make test`.
# Each sets up what it needs in a virtual environment in .venv: dlprim installed in
# editable mode with the `cpu` extra, which brings the CPU's OpenCL drivers from pip (PoCL,
# and Intel's CPU runtime for the CPUs PoCL cannot target), so no system driver, root or
# apt is needed; a GPU driver, where there is one, is found too.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip install -q --disable-pip-version-check
PYTEST_ARGS ?=
# test files spread over two worker processes (pytest-xdist): kernel builds, the most of a
# cold run, then go on both cores; built kernels are shared through the drivers' caches
XDIST ?= -n 2 --dist loadfile
# PyTorch's CPU build for the tests (PyPI's Linux wheel is the CUDA one)
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu

.PHONY: demo test test-quick test-second-driver opencl clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# dlprim with the CPU's drivers and the plot extra: enough to train and draw the curves
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

# dlprim with the CPU's drivers, and the test tools and references (requirements/, not an extra)
$(VENV)/.test: setup.cfg pyproject.toml requirements/test.txt $(VENV)/.torch | $(BIN)/python
	$(PIP) -e '.[cpu]' -r requirements/test.txt
	touch $@

# a device that compiles must be there once dlprim is installed (else: what to install)
opencl:
	@$(BIN)/python -c "import dlprim; dlprim.Context()" >/dev/null || PYTHON=$(BIN)/python bash tools/ensure-opencl.sh

# --force: each demo starts afresh over the previous one
demo: $(VENV)/.demo opencl
	$(BIN)/dlprim-train examples/mnist/config.json --out runs/mnist --force

# every tier (tests/tiers.py): unit, model, system
test: $(VENV)/.test opencl
	$(BIN)/python -m pytest -q $(XDIST) $(PYTEST_ARGS)

# the first tier alone, a developer's inner loop
test-quick: $(VENV)/.test opencl
	$(BIN)/python -m pytest -q -m unit $(XDIST) $(PYTEST_ARGS)

# the GEMM, convolution, pooling, normalization and attention tests once per GPU vendor's
# device facts over the CPU device (--device-facts, tests/vendor_facts.py): each vendor's
# tiles, split models and GPU kernels checked here; VENDOR_K leaves out the CPU-only
# tests, the tuner and the slowest builds. All three modes run; any failure fails
VENDORS ?= amd intel nvidia
VENDOR_TESTS ?= tests/test_vendor_facts.py tests/test_gemm.py tests/test_conv.py \
  tests/test_conv_algo_options.py tests/test_pooling.py tests/test_normalization.py \
  tests/test_batchnorm.py tests/test_attention.py tests/test_inner_product.py \
  tests/test_matmul.py
VENDOR_K ?= not tuner and not wide_tiles and not cpu and not packed_b and not packed_strips \
  and not emulated and not explicit_tiles and not im2col and not direct \
  and not gpu_configuration and not references_match_pytorch and not dropout \
  and not 16bit_nets and not 16bit_storage and not layouts and not rows \
  and not (inner_product and (shape4 or split_gemms)) \
  and not (convolution2d and (k5_s2 or k7_s2 or k1_s2_g2 or rect_kernel or d2_g2 or asym \
  or k5_p0 or tiny_out or depthwise_k or winograd2 or winograd_p0 or t_winograd or auto \
  or outpad))
.PHONY: test-vendors
test-vendors: $(VENV)/.test opencl
	@status=0; for vendor in $(VENDORS); do \
	  echo "test-vendors: $$vendor"; \
	  $(BIN)/python -m pytest -q $(XDIST) --device-facts=$$vendor $(VENDOR_TESTS) -k "$(VENDOR_K)" \
	    $(PYTEST_ARGS) || status=1; \
	done; exit $$status

# the kernel families, a Net's training step and the language models' decoding against
# transformers (its draws too: a sampler bug showed only there, under PoCL) on a second
# OpenCL implementation: a CPU driver other than the one `make test` chose (Intel's CPU
# runtime beside PoCL), where one compiles; the MNIST example is the last check of that
# run (.ci/run)
SECOND_DRIVER_TESTS ?= tests/test_gemm.py tests/test_conv.py tests/test_conv_depthwise.py \
  tests/test_conv_algo_options.py tests/test_pooling.py tests/test_batchnorm.py \
  tests/test_normalization.py tests/test_softmax.py tests/test_loss.py \
  tests/test_attention.py tests/test_recurrent.py tests/test_net.py tests/test_sampling.py \
  tests/test_rotary.py tests/test_weight_storage.py tests/test_llm_generate.py \
  tests/test_llm_fused_step.py tests/test_pocl_builtins.py
# less the GEMM's emulated tensor-core kernels (a test vehicle: CPUs never run them; make
# test runs them on the first driver): 9 of this step's 22 minutes with PoCL's cache empty.
# The attention's emulated kernels stay: PoCL miscompiled one (tests/test_attention.py).
# Less the convolutions' GPU kernels built for a CPU device too (make test and
# test-vendors run them): pip's PoCL took 415 s to build the patch embedding's and 84-118
# s each of the GPU configurations', half of this step's time
# The one-launch decoder blocks: GPT-2's only (Intel's CPU compiler fails on them, so make
# test skips them there; the rest run on the first driver).
SECOND_DRIVER_K ?= not emulated and not gpu_configuration and not patch_embedding and \
  (not test_llm_fused_step or gpt2)
test-second-driver: $(VENV)/.test opencl
	@device="$$($(BIN)/python tools/second_cpu_driver.py)"; \
	if [ -z "$$device" ]; then \
	  echo "test-second-driver: no second CPU driver compiles here; make test ran on the only one"; \
	else \
	  echo "test-second-driver: device $$device"; \
	  DLPRIM_TEST_DEVICE=$$device $(BIN)/python -m pytest -q $(XDIST) $(SECOND_DRIVER_TESTS) -k "$(SECOND_DRIVER_K)" $(PYTEST_ARGS); \
	fi

# every kernel family on small cases under oclgrind, the OpenCL simulator, with its
# data-race and API checks: any report fails (tests/oclgrind/, tools/oclgrind-check.sh,
# which installs oclgrind where it is missing; tests/README.md, "Kernels under oclgrind")
.PHONY: oclgrind
oclgrind: $(VENV)/.test
	PYTHON=$(BIN)/python bash tools/oclgrind-check.sh $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info runs
