#!/usr/bin/env bash
# `make compile-check`: every C++ translation unit of a build (its compile_commands.json) compiled once more,
# syntax only, the way a GPU machine would meet it:
#   - against LibTorch 2.x headers (Debian trixie's libtorch-dev 2.6.0) instead of the build's 1.13: the API
#     frost uses must compile on both (differences belong in core/common/torch_compat.h);
#   - with clang over libstdc++ 14's headers (trixie's libstdc++-14-dev): a newer standard library no longer
#     pulls in what GCC 12's did transitively (<cstdint> above all), and the GPU machine's compiler is newer.
# The two packages come from deb.debian.org (cached in build-compat/); nothing is installed. The CUDA sources
# (.cu) are left to nvcc, which the normal build runs. Prints one line per failing unit and a summary; exit 1
# when any unit fails. Usage: scripts/compile_check.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
CACHE=${COMPILE_CHECK_CACHE:-build-compat}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
CLANG=${CLANG:-$(command -v clang++-14 || command -v clang++ || true)}
[ -n "$CLANG" ] || { echo "compile_check: clang++ not found (apt-get install clang-14)"; exit 1; }
[ -f "$BUILD/compile_commands.json" ] || { echo "compile_check: no $BUILD/compile_commands.json (build first)"; exit 1; }
mkdir -p "$CACHE"
fetch() {  # fetch PACKAGE: the trixie .deb, unpacked into $CACHE/root
  local pkg=$1
  if [ ! -f "$CACHE/$pkg.deb" ]; then
    [ -f "$CACHE/Packages" ] || curl -fsSL "$MIRROR/dists/trixie/main/binary-amd64/Packages.xz" | xz -dc > "$CACHE/Packages"
    local file
    file=$(awk -v p="$pkg" '$1=="Package:"{cur=$2} cur==p && $1=="Filename:"{print $2; exit}' "$CACHE/Packages")
    [ -n "$file" ] || { echo "compile_check: $pkg not in trixie's index"; exit 1; }
    curl -fsSL "$MIRROR/$file" -o "$CACHE/$pkg.deb"
  fi
  dpkg-deb -x "$CACHE/$pkg.deb" "$CACHE/root"
}
fetch libtorch-dev
fetch libstdc++-14-dev
T="$PWD/$CACHE/root/usr/include"
GCC_OMP=$(dirname "$(gcc -print-file-name=include/omp.h)")
# GCC's omp.h (LibTorch's OpenMP header) for clang: its __malloc__(deallocator) attributes are GCC 11's.
mkdir -p "$CACHE/omp" && sed -E 's/__malloc__ *\([^)]*\)/__malloc__/g' "$GCC_OMP/omp.h" > "$CACHE/omp/omp.h"
V=$(awk '/define TORCH_VERSION_(MAJOR|MINOR|PATCH)/{printf "%s%s", sep, $3; sep="."}' "$T/torch/csrc/api/include/torch/version.h")
echo "compile_check: LibTorch $V headers, $("$CLANG" --version | head -1), libstdc++ 14"
python3 - "$BUILD/compile_commands.json" "$T" "$PWD/$CACHE/omp" "$CLANG" "${JOBS:-$(nproc)}" "${COMPILE_CHECK_FILTER:-}" <<'PY'
import json, re, shlex, subprocess, sys
from concurrent.futures import ThreadPoolExecutor
db, T, omp, clang, jobs, flt = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), sys.argv[6]
units = []
for e in json.load(open(db)):
    f = e["file"]
    if not f.endswith((".cc", ".cpp")) or (flt and not re.search(flt, f)):
        continue
    args = shlex.split(e["command"])[1:]
    out, skip = [], False
    for i, a in enumerate(args):
        if skip:
            skip = False
            continue
        if a in ("-o",):
            skip = True
            continue
        if a == "-c" or a.startswith("-Wshadow=") or a == "-fno-semantic-interposition":
            continue
        if a == "/usr/include/torch/csrc/api/include" and out and out[-1] == "-isystem":
            out.pop()
            continue
        out.append(a)
    cmd = [clang, "-fsyntax-only", "-nostdinc++", "-isystem", f"{T}/c++/14", "-isystem",
           f"{T}/x86_64-linux-gnu/c++/14", "-isystem", T, "-isystem", f"{T}/torch/csrc/api/include",
           "-isystem", omp, "-Wno-unknown-warning-option", "-Wno-unused-command-line-argument", *out]
    units.append((f, cmd, e["directory"]))

def run(u):
    f, cmd, d = u
    p = subprocess.run(cmd, cwd=d, capture_output=True, text=True)
    return f, p.returncode, p.stderr

bad = 0
with ThreadPoolExecutor(jobs) as ex:
    for f, rc, err in ex.map(run, units):
        if rc != 0:
            bad += 1
            first = [l for l in err.splitlines() if "error:" in l][:3]
            print(f"FAIL {f}\n  " + "\n  ".join(first), flush=True)
print(f"compile_check: {len(units) - bad} of {len(units)} translation units compile against LibTorch 2.x "
      f"headers with clang + libstdc++ 14" + ("" if bad == 0 else f"; {bad} fail"))
sys.exit(1 if bad else 0)
PY
