# pagoda-worker, CPU or CUDA backend, from the repository root (BuildKit reads
# worker.Dockerfile.dockerignore beside this; it also skips the stages the backend does not use):
#   docker build -f deploy/docker/worker.Dockerfile -t pagoda/worker-cpu:dev .
#   docker build -f deploy/docker/worker.Dockerfile --build-arg BACKEND=cuda -t pagoda/worker-cuda:dev .
# The CUDA build compiles for the GPU architectures set in the top-level CMakeLists.txt.
ARG BACKEND=cpu
ARG CUDA_VERSION=13.0.1

# ---- base images per backend: Debian for the CPU build, NVIDIA's CUDA images for the GPU one
FROM debian:bookworm AS build-cpu
FROM debian:bookworm-slim AS runtime-cpu
FROM nvidia/cuda:${CUDA_VERSION}-devel-ubuntu24.04 AS build-cuda
FROM nvidia/cuda:${CUDA_VERSION}-runtime-ubuntu24.04 AS runtime-cuda

# ---- build: the project's own dependency script and CMake
FROM build-${BACKEND} AS build
ARG BACKEND
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
WORKDIR /src
# Dependencies first, so this layer is reused until the dependency list changes.
COPY scripts/install-deps.sh scripts/
RUN scripts/install-deps.sh build && rm -rf /var/lib/apt/lists/*
COPY . .
# A CUDA image whose nvcc CMake cannot use must fail here, not ship a CPU-only worker.
RUN cuda=OFF; if [ "$BACKEND" = cuda ]; then cuda=ON; fi \
 && cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DPAGODA_BUILD_TESTS=OFF -DPAGODA_ENABLE_CUDA="$cuda" | tee /tmp/configure.log \
 && grep -q "Pagoda CUDA backend: $cuda" /tmp/configure.log \
 && cmake --build /build --target pagoda-worker \
 && deploy/docker/runtime-packages.sh /build/bin/pagoda-worker > /build/runtime-packages.txt

# ---- runtime: the binary and the shared libraries it loads (the CUDA runtime image brings the
# CUDA libraries; the GPU driver's come from the host through the NVIDIA container toolkit)
FROM runtime-${BACKEND}
ARG BACKEND
LABEL org.opencontainers.image.title="pagoda-worker" \
      org.opencontainers.image.description="Pagoda LLM serving: worker (model forward pass, KV arena)" \
      io.pagoda.backend="${BACKEND}"
COPY --from=build /build/runtime-packages.txt /tmp/runtime-packages.txt
RUN apt-get update \
 && xargs -a /tmp/runtime-packages.txt env DEBIAN_FRONTEND=noninteractive \
      apt-get install -y --no-install-recommends \
 && rm -rf /var/lib/apt/lists/* /tmp/runtime-packages.txt \
 && groupadd --system --gid 10001 pagoda \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin pagoda
COPY --from=build /build/bin/pagoda-worker /usr/local/bin/
USER 10001:10001
# 8081: grpc.health.v1 (--health-listen); 9091: Prometheus /metrics (--metrics-listen).
EXPOSE 8081 9091
ENTRYPOINT ["/usr/local/bin/pagoda-worker"]
