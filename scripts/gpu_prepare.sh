#!/usr/bin/env bash
# Gathers what the GPU machine lacks into .gpu/ (ignored by git; carried with the device call): GoogleTest's
# source, the nlohmann/json headers and the stories260K golden. Run here, before scripts/gpu_check.sh there.
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .gpu && mkdir -p .gpu/include
cp -r /usr/src/googletest .gpu/googletest
cp -r /usr/include/nlohmann .gpu/include/
cp "${FROST_SHARED:-../shared}/models/stories260K/reference.json" .gpu/
grep -qx "/.gpu/" .git/info/exclude 2>/dev/null || echo "/.gpu/" >> .git/info/exclude
du -sh .gpu
