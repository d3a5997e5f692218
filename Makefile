# octet's front door. Everything real is in CMake; these targets only chain
# the steps so that one command works on a fresh machine.
#
#   make test   install missing packages, configure, build, run every test
#   make run    the same set-up, then the demo: coordinator --tp 2
#               --quantization fp8 on a tiny model, one streaming request,
#               serving until Ctrl-C (scripts/demo.sh)
#   make build  every program into build/bin/
#
# CMAKE_FLAGS passes options through, e.g. make build CMAKE_FLAGS=-DOCTET_CUDA=OFF
# DEPS: what `make deps` installs (scripts/install-deps.sh): build for the
# programs, all (what `make test` uses) adds the test tools.

BUILD_DIR ?= build
CMAKE_FLAGS ?=
JOBS ?= $(shell nproc)
DEPS ?= build

.PHONY: all deps configure build test run clean

all: build

deps:
	@BUILD_DIR=$(BUILD_DIR) scripts/install-deps.sh $(DEPS)

configure: deps
	cmake -S . -B $(BUILD_DIR) -G Ninja $(CMAKE_FLAGS)

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

# Every test: unit, slow and gpu (gpu tests report "Skipped" without a GPU).
test: DEPS = all
test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) --timeout 1200

run: build
	BUILD_DIR=$(BUILD_DIR) scripts/demo.sh

clean:
	rm -rf $(BUILD_DIR)
