#!/usr/bin/env bash
# Installs every Debian package frost needs to build, test and run. Idempotent and
# non-interactive: packages already present are skipped without touching apt.
#
# BLAS: libopenblas0-openmp shares LibTorch's OpenMP runtime (one thread pool). The
# pthread build would start a second pool that fights LibTorch's (see docs/conventions.md, "BLAS and threads").
set -euo pipefail

PKGS=(
  build-essential cmake ninja-build ccache pkg-config git
  libtorch-dev
  libopenblas0-openmp libopenblas-openmp-dev
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev prometheus-cpp-dev libyaml-cpp-dev
  libgtest-dev libgmock-dev googletest libbenchmark-dev
  libzmq3-dev cppzmq-dev libmsgpack-cxx-dev
  nlohmann-json3-dev libsentencepiece-dev libre2-dev libicu-dev libsqlite3-dev libssl-dev zlib1g-dev libcpp-httplib-dev
  python3-torch python3-numpy python3-sentencepiece
  python3-grpcio python3-protobuf python3-jinja2 python3-zmq python3-msgpack prometheus openssl
)

bash "$(dirname "$0")/apt_install_missing.sh" install_deps "${PKGS[@]}"

# Make sure the OpenMP OpenBLAS is the BLAS that libtorch's libblas/liblapack resolve to.
if [[ $(id -u) -eq 0 ]]; then
  arch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)
  for alt in libblas.so.3 liblapack.so.3; do
    cand=/usr/lib/$arch/openblas-openmp/$alt
    if [[ -e $cand ]]; then
      update-alternatives --set "$alt-$arch" "$cand" >/dev/null 2>&1 || true
    fi
  done
fi
echo "install_deps: all packages present"
