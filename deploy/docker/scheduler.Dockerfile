# pagoda-scheduler (and pagoda-cli, for `kubectl exec ... pagoda-cli status`).
# Build from the repository root (BuildKit reads scheduler.Dockerfile.dockerignore beside this):
#   docker build -f deploy/docker/scheduler.Dockerfile -t pagoda/scheduler:dev .

# ---- build: the project's own dependency script and CMake, on the Debian it is developed on
FROM debian:bookworm AS build
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
WORKDIR /src
# Dependencies first, so this layer is reused until the dependency list changes.
COPY scripts/install-deps.sh scripts/
RUN scripts/install-deps.sh build && rm -rf /var/lib/apt/lists/*
COPY . .
RUN cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DPAGODA_BUILD_TESTS=OFF -DPAGODA_ENABLE_CUDA=OFF \
 && cmake --build /build --target pagoda-scheduler pagoda-cli \
 && deploy/docker/runtime-packages.sh /build/bin/pagoda-scheduler /build/bin/pagoda-cli \
      > /build/runtime-packages.txt

# ---- runtime: the binaries and the shared libraries they load, nothing else
FROM debian:bookworm-slim
LABEL org.opencontainers.image.title="pagoda-scheduler" \
      org.opencontainers.image.description="Pagoda LLM serving: scheduler (public gRPC API, batching, KV page tables)"
COPY --from=build /build/runtime-packages.txt /tmp/runtime-packages.txt
RUN apt-get update \
 && xargs -a /tmp/runtime-packages.txt env DEBIAN_FRONTEND=noninteractive \
      apt-get install -y --no-install-recommends \
 && rm -rf /var/lib/apt/lists/* /tmp/runtime-packages.txt \
 && groupadd --system --gid 10001 pagoda \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin pagoda
COPY --from=build /build/bin/pagoda-scheduler /build/bin/pagoda-cli /usr/local/bin/
USER 10001:10001
# 50051: pagoda.v1.Generation, the worker link, grpc.health.v1; 9090: Prometheus /metrics.
EXPOSE 50051 9090
ENTRYPOINT ["/usr/local/bin/pagoda-scheduler"]
