#!/usr/bin/env bash
# The GPU machine's check (docs/cuda.md): build the CUDA decoder alone (no LibTorch, gRPC or Abseil there),
# run every `gpu` test, then the device benchmark beside PyTorch eager on the same shapes, and a memcheck pass.
# Expects .gpu/ (scripts/gpu_prepare.sh: GoogleTest source, nlohmann/json headers, the stories260K golden).
# Writes logs and JSON under $OUT (default /tmp/gpu_out). GPU_CHECK_BENCH=0 skips the benchmarks.
set -uo pipefail
OUT=${OUT:-/tmp/gpu_out}
mkdir -p "$OUT"
B=${GPU_BUILD:-/tmp/build-gpu}
t0=$(date +%s)
stamp() { echo "[gpu_check +$(( $(date +%s) - t0 ))s] $*"; }
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
stamp "nvcc: $NVCC"; "$NVCC" --version | tail -1
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv,noheader
stamp configure
cmake -S . -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=Release -DFROST_CUDA=ON -DFROST_CUDA_ONLY=ON \
  -DCMAKE_CUDA_COMPILER="$NVCC" -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DFROST_GTEST_SOURCE="$PWD/.gpu/googletest" -DFROST_JSON_INCLUDE="$PWD/.gpu/include" > "$OUT/build.log" 2>&1 \
  || { tail -40 "$OUT/build.log"; exit 1; }
stamp build
cmake --build "$B" -j "$(nproc)" >> "$OUT/build.log" 2>&1 || { grep -E "error|Error" "$OUT/build.log" | head -40; exit 1; }
stamp tests
FROST_STORIES_REFERENCE="$PWD/.gpu/reference.json" "$B/tests/gpu/frost_gpu_tests" \
  --gtest_output="json:$OUT/gpu_tests.json" > "$OUT/gpu_tests.log" 2>&1
rc_tests=$?
grep -E "^\[  (PASSED|FAILED|SKIPPED) |^  (gpu vs|stories)|Failure|error|Expected|Which is|actual" "$OUT/gpu_tests.log" | head -60
stamp "tests rc=$rc_tests"
if [ "${GPU_CHECK_BENCH:-1}" = 1 ]; then
stamp bench
timeout 240 "$B/bench/cuda/frost-cuda-bench" --shape 15m --shape 1b --out "$OUT/cuda_bench.json" 2>&1 >/dev/null | tee "$OUT/bench.log"
stamp "eager baseline"
PYTHONUNBUFFERED=1 timeout 180 python3 bench/cuda/torch_eager_bench.py --shape 15m --shape 1b \
  --out "$OUT/torch_eager.json" >> "$OUT/bench.log" 2>&1 || echo "eager baseline failed (see bench.log)"
python3 bench/cuda/compare.py "$OUT/cuda_bench.json" "$OUT/torch_eager.json" --json "$OUT/compare.json" \
  | tee "$OUT/summary.md"
fi
if command -v compute-sanitizer > /dev/null; then
  stamp memcheck
  timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 "$B/tests/gpu/frost_gpu_tests" \
    --gtest_filter='CudaOps.*:CudaOpsKv*:CudaModel.BatchedSteps*:CudaModel.CudaGraph*' > "$OUT/memcheck.log" 2>&1
  echo "memcheck rc=$?"; grep -E "ERROR SUMMARY|Invalid|out of bounds" "$OUT/memcheck.log" | head -10
fi
stamp "done (tests rc=$rc_tests)"
exit $rc_tests
