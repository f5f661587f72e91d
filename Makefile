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

.PHONY: deps configure build run test test-asan bench clean

deps:
	@bash scripts/install_deps.sh

configure: deps
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) > $(BUILD).configure.log 2>&1 \
	  || { cat $(BUILD).configure.log; exit 1; }

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# Local generation on the built-in model (the gRPC server arrives with the next issue).
run: build
	$(BUILD)/tools/frost-generate --model builtin:tiny --prompt "Once upon a time" --max-new-tokens 48

# Every test: unit + model (golden) suites, then the checkpoint-parsing tests under ASan.
test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 900
	@$(MAKE) --no-print-directory test-asan

test-asan: deps
	@cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFROST_SANITIZE_ADDRESS=ON \
	  -DFROST_BUILD_SERVER=OFF -DFROST_BUILD_BENCH=OFF > $(ASAN_BUILD).configure.log 2>&1 \
	  || { cat $(ASAN_BUILD).configure.log; exit 1; }
	cmake --build $(ASAN_BUILD) -j $(JOBS) --target frost_loader_tests frost_tokenizer_tests
	# only the binaries built above are registered with ctest in this tree
	cd $(ASAN_BUILD) && ASAN_OPTIONS=$${ASAN_OPTIONS:-detect_leaks=0} ctest --output-on-failure -j $(JOBS)

bench: build
	bash scripts/bench.sh $(BUILD)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(BUILD).configure.log $(ASAN_BUILD).configure.log
