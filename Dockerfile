# frost's container image: frostd (gRPC 50051, Prometheus /metrics 9090, OpenAI HTTP API 8000) and frostctl, on
# Debian bookworm.
#
#   make image                       # docker, podman or buildah, whichever works (IMAGE=frost:latest)
#   docker run --rm -p 50051:50051 -p 9090:9090 -p 8000:8000 frost:latest     # the built-in stories260K
#   docker run --rm -p 50051:50051 -v /srv/my-model:/models:ro frost:latest --model /models
#
# deploy/image/README.md has the rest (volumes, the user, health, OpenBLAS). tests/deploy/image_test.py checks
# the facts below against the build tree (runtime libraries) and configs/default.yaml (ports).

# ---- build: the same path as `make build` -------------------------------------------------------------------
FROM debian:bookworm AS build
ENV DEBIAN_FRONTEND=noninteractive
# make, then the packages scripts/install_deps.sh names (its own layer: cached until the script changes).
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends make ca-certificates
WORKDIR /src
COPY scripts/install_deps.sh scripts/apt_install_missing.sh scripts/
RUN bash scripts/install_deps.sh
# The sources of the build only (CMakeLists.txt's add_subdirectory() list, without tests/ and bench/, which are
# configured off): editing docs, tests or deploy/ does not invalidate the compile. tests/deploy/image_test.py
# checks this list against CMakeLists.txt.
COPY Makefile CMakeLists.txt ./
COPY cmake cmake
COPY kernels kernels
COPY core core
COPY tools tools
COPY proto proto
COPY server server
COPY client client
# `make configure` (deps again: a no-op now, then CMake with the Makefile's generator and build type), then
# only what the image ships: frostd, frostctl and libfrost_spm.so, the sentencepiece shim frostd dlopen()s
# (core/model/spm_backend.h). FROST_MARCH keeps its portable default (x86-64-v3 with AVX-512 kernels chosen at
# run time, cmake/frost_flags.cmake): never "native", the image runs on other machines.
ARG CMAKE_FLAGS="-DFROST_BUILD_TESTS=OFF -DFROST_BUILD_BENCH=OFF"
RUN make configure CMAKE_FLAGS="$CMAKE_FLAGS" \
 && grep -q '^FROST_MARCH:STRING=x86-64-v3$' build/CMakeCache.txt \
 && cmake --build build -j "$(nproc)" --target frostd frostctl frost_spm \
 && strip build/server/frostd build/client/frostctl \
 && strip --strip-unneeded build/core/libfrost_spm.so

# ---- runtime: libraries only --------------------------------------------------------------------------------
FROM debian:bookworm AS runtime
ENV DEBIAN_FRONTEND=noninteractive
# The runtime packages, from the one list the test checks against the binaries' libraries. The BLAS
# alternatives are pointed at the OpenMP OpenBLAS as scripts/install_deps.sh does (LibTorch's thread pool).
COPY deploy/image/runtime-packages.txt /tmp/runtime-packages.txt
RUN set -eu; \
    pkgs=$(sed -e 's/#.*//' /tmp/runtime-packages.txt | tr -s ' \t\n' ' '); \
    [ -n "${pkgs# }" ] || { echo "runtime-packages.txt lists no packages" >&2; exit 1; }; \
    apt-get update -qq; \
    apt-get install -y -qq --no-install-recommends $pkgs; \
    arch=$(dpkg --print-architecture | sed 's/^amd64$/x86_64/; s/^arm64$/aarch64/')-linux-gnu; \
    for alt in libblas.so.3 liblapack.so.3; do \
      update-alternatives --set "$alt-$arch" "/usr/lib/$arch/openblas-openmp/$alt"; \
    done; \
    rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb /tmp/runtime-packages.txt

# The user frostd runs as: numeric, so Kubernetes' runAsNonRoot can verify it (deploy/k8s uses 10001 too).
RUN groupadd --gid 10001 frost \
 && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /var/lib/frost --shell /usr/sbin/nologin frost \
 && mkdir -p /var/lib/frost /models /opt/frost/models \
 && chown 10001:10001 /var/lib/frost

COPY --from=build /src/build/server/frostd /src/build/client/frostctl /usr/local/bin/
# frostd dlopen()s libfrost_spm.so by name (after its build-tree path, absent here): /usr/local/lib, in the
# loader's cache.
COPY --from=build /src/build/core/libfrost_spm.so /usr/local/lib/
RUN ldconfig
COPY deploy/image/frost-entrypoint.sh /usr/local/bin/frost-entrypoint
# configs/default.yaml with the listeners on 0.0.0.0, the HTTP API on (8000) and the state directory in the
# volume (deploy/image/make-config.sh).
COPY configs/default.yaml deploy/image/make-config.sh /tmp/frost-config/
RUN mkdir -p /etc/frost \
 && sh /tmp/frost-config/make-config.sh /tmp/frost-config/default.yaml /etc/frost/frost.yaml \
 && rm -rf /tmp/frost-config
# The built-in default model (part of the project, 1 MB; configs/default.yaml's model.path is relative to the
# working directory). Every other model is mounted at /models, never copied in.
COPY models/stories260K /opt/frost/models/stories260K
WORKDIR /opt/frost

# The state directory (job journal, checkpoints, artifacts): /var/lib/frost/state, kept in a volume.
VOLUME ["/var/lib/frost"]
# gRPC, /metrics and the OpenAI-compatible HTTP API: server.listen and server.metrics_listen of
# configs/default.yaml, and server.http.listen, which make-config.sh turns on at 0.0.0.0:8000 (the port
# `make run` uses). The HEALTHCHECK stays on gRPC: the same readiness Kubernetes probes.
EXPOSE 50051 9090 8000
USER 10001:10001
ENV HOME=/var/lib/frost

# Healthy = the model is loaded and warm (the readiness service Kubernetes probes too). Loading stories260K
# takes seconds; a large checkpoint from /models may need a longer --start-period at `docker run`.
HEALTHCHECK --interval=15s --timeout=5s --start-period=120s --retries=3 \
  CMD ["/usr/local/bin/frostctl", "--addr", "127.0.0.1:50051", "--timeout", "4", "health", "--service", "frost.v1.Generation"]

# frostd --config /etc/frost/frost.yaml, through a shell wrapper that picks OpenBLAS's core type for the host
# (deploy/image/frost-entrypoint.sh). Arguments given to `docker run` are appended: frostd flags such as
# --model /models override the config (a flag given twice keeps the last value).
ENTRYPOINT ["/usr/local/bin/frost-entrypoint", "--config", "/etc/frost/frost.yaml"]
CMD []
