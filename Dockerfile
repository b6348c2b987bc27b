# gpt-triton tuner image: the CLI and its CPU routes (ONNX Runtime, OpenVINO), tritonclient, and the
# embedded Triton of nvidia-pytriton for local runs. In the Kubernetes Job the server is the NGC Triton
# sidecar (--triton-url 127.0.0.1:8001); for TensorRT routes build with EXTRAS=tensorrt on a host
# whose driver matches the GPU nodes.
#
#   docker build -t REGISTRY/gpt-triton:0.1.0 .
#   docker build --build-arg EXTRAS=tensorrt -t REGISTRY/gpt-triton:0.1.0-trt .
FROM python:3.11-slim AS build
ARG EXTRAS=""
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY gpt_triton ./gpt_triton
# A virtual environment copied whole into the runtime stage: no compilers or pip caches ship.
RUN python -m venv /opt/gpt-triton \
 && /opt/gpt-triton/bin/pip install --upgrade pip \
 && /opt/gpt-triton/bin/pip install ".${EXTRAS:+[$EXTRAS]}"

FROM python:3.11-slim
# libgomp: OpenMP runtime of ONNX Runtime/OpenVINO CPU kernels.
RUN apt-get update \
 && apt-get install -y --no-install-recommends libgomp1 \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 1000 gpt \
 && useradd --uid 1000 --gid 1000 --home-dir /tmp --no-create-home --shell /usr/sbin/nologin gpt
COPY --from=build /opt/gpt-triton /opt/gpt-triton
# The pod runs with readOnlyRootFilesystem: every cache goes to the /tmp emptyDir, no .pyc is written.
ENV PATH=/opt/gpt-triton/bin:$PATH \
    HOME=/tmp \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    MPLCONFIGDIR=/tmp/matplotlib \
    XDG_CACHE_HOME=/tmp/.cache
USER 1000:1000
WORKDIR /tmp
ENTRYPOINT ["gpt-triton"]
CMD ["--help"]
