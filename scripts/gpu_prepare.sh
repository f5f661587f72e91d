#!/usr/bin/env bash
# Gathers what the GPU machine lacks into .gpu/ (ignored by git; carried with the device call), so that
# scripts/gpu_check.sh can build frostd, frostctl, the GPU tests and the benchmarks there against that machine's
# own LibTorch (PyTorch 2.x) with nothing fetched:
#   .gpu/sysroot.tar.xz   Debian bookworm's -dev and runtime packages of gRPC, Protobuf (protoc and the gRPC
#                         plugin), Abseil, yaml-cpp, prometheus-cpp (+ civetweb, the curl headers its CMake
#                         config asks for), RE2, SQLite, cpp-httplib (+ brotli: the HTTP client of frost-loadgen, which
#                         the bench phase builds; frostd's HTTP server is its own), nlohmann-json, sentencepiece, OpenSSL headers, c-ares,
#                         zlib headers, GoogleTest and pkg-config, unpacked under usr/ (relocatable: their CMake
#                         configs and .pc files are prefix-relative; gpu_check.sh points CMAKE_PREFIX_PATH,
#                         PKG_CONFIG_SYSROOT_DIR and LD_LIBRARY_PATH at it)
#   .gpu/reference.json   the stories260K golden (../shared does not travel)
#   .gpu/MANIFEST         what went in, package by package, and the sizes
# Run here (Debian bookworm, apt reachable), before a device call that names .gpu in `carry`.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=.gpu
rm -rf "$OUT" && mkdir -p "$OUT/debs" "$OUT/sysroot"
grep -qx "/.gpu/" .git/info/exclude 2>/dev/null || echo "/.gpu/" >> .git/info/exclude

# The packages: what the build includes and links, what their CMake configs ask for, and the runtime
# libraries behind them (OpenSSL's and zlib's too: their -dev symlinks must resolve inside the sysroot). Left
# out on purpose: glibc / libstdc++ / libgcc (the image's own must win), and curl's runtime dependency chain
# (prometheus-cpp's config only finds curl; frost never links prometheus-cpp::push).
PKGS=(
  libgrpc++-dev libgrpc-dev libgrpc++1.51 libgrpc29 protobuf-compiler-grpc
  libprotobuf-dev libprotobuf32 libprotobuf-lite32 libprotoc32 protobuf-compiler
  libabsl-dev libabsl20220623
  libyaml-cpp-dev libyaml-cpp0.7
  prometheus-cpp-dev libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0 libprometheus-cpp-push1.0
  libcivetweb-dev libcivetweb1 civetweb libcurl4-openssl-dev libcurl4
  libre2-dev libre2-9
  libsqlite3-dev libsqlite3-0
  nlohmann-json3-dev
  libsentencepiece-dev libsentencepiece0
  libssl-dev libssl3
  libc-ares-dev libc-ares2
  zlib1g-dev zlib1g
  libgtest-dev libgmock-dev googletest
  libcpp-httplib-dev libcpp-httplib0.11 libbrotli-dev libbrotli1  # frost-loadgen --http's client only
  pkgconf pkgconf-bin libpkgconf3
)
# ICU: the NFC/NFKC normalizers of tokenizer.json files (Qwen2/Qwen3). About 10 MB more in sysroot.tar.xz, so
# only on request (FROST_GPU_ICU=1); without it the GPU build refuses those tokenizers by name at load.
if [[ ${FROST_GPU_ICU:-0} == 1 ]]; then PKGS+=(libicu-dev libicu72); fi
(cd "$OUT/debs" && apt-get download "${PKGS[@]}" > /dev/null)
: > "$OUT/MANIFEST"
for d in "$OUT"/debs/*.deb; do
  dpkg-deb -x "$d" "$OUT/sysroot"
  echo "$(basename "$d") $(stat -c %s "$d")" >> "$OUT/MANIFEST"
done
# What no build or run needs: documentation, the sources of GoogleTest (its libraries are built), static
# archives other than GoogleTest's.
S="$OUT/sysroot"
rm -rf "$S/usr/share/doc" "$S/usr/share/man" "$S/usr/share/lintian" "$S/usr/src" "$S/usr/share/bug"
find "$S/usr/lib" -name '*.a' ! -name 'libgtest*.a' ! -name 'libgmock*.a' -delete
# Absolute symlinks would point outside the sysroot once unpacked elsewhere: make them relative.
find "$S" -type l | while read -r l; do
  t=$(readlink "$l")
  case "$t" in
    /*) ln -sfn "$(realpath -m --relative-to="$(dirname "$l")" "$S$t")" "$l" ;;
  esac
done
# A -dev symlink whose library is not in the sysroot would make CMake miss it there: none may dangle.
dangling=$(find "$S" -xtype l | grep -v '/usr/share/' || true)
if [ -n "$dangling" ]; then echo "gpu_prepare: dangling links in the sysroot:"; echo "$dangling"; exit 1; fi
# Debian's pkgconf binary is `pkgconf`; CMake asks for pkg-config.
[ -e "$S/usr/bin/pkg-config" ] || ln -s pkgconf "$S/usr/bin/pkg-config"
tar -C "$OUT" -cJf "$OUT/sysroot.tar.xz" sysroot
rm -rf "$OUT/sysroot" "$OUT/debs"
cp "${FROST_SHARED:-../shared}/models/stories260K/reference.json" "$OUT/"
# The prototype GPU test's rows (tests/gpu/prototype_device_test.cc reads the first 160 train and 48 test rows).
E="${FROST_SHARED:-../shared}/data/emobank_valence"
mkdir -p "$OUT/emobank_valence"
head -n 200 "$E/train.jsonl" > "$OUT/emobank_valence/train.jsonl"
head -n 60 "$E/test.jsonl" > "$OUT/emobank_valence/test.jsonl"
cp "$E/meta.json" "$OUT/emobank_valence/"
# The commit the device runs (its copy of the tree has no .git).
echo "$(git rev-parse HEAD)$(git diff --quiet HEAD -- . ':!.gpu' 2>/dev/null || echo '-dirty')" > "$OUT/COMMIT"
echo "sysroot.tar.xz $(stat -c %s "$OUT/sysroot.tar.xz")" >> "$OUT/MANIFEST"
du -sh "$OUT"
