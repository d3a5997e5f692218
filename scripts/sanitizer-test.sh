#!/usr/bin/env bash
# Runs ctest in a sanitizer build (OCTET_SANITIZE) and fails on a sanitizer
# report from any process the tests started. `make test-asan` and
# `make test-tsan` call it.
#
#   scripts/sanitizer-test.sh address|thread BUILD_DIR [CTEST_ARGS...]
#
# Every sanitized process writes its reports to BUILD_DIR/sanitizer-logs/
# (log_path), so a report from a worker or a coordinator that a test started
# counts too, even when the test goes on and passes (a test that kills
# workers on purpose cannot tell a crashed one from a killed one). After
# ctest the reports are printed, and any report fails the run, as does any
# failed test. UBSan is fatal in these builds (-fno-sanitize-recover), so a
# report also fails the process that made it.
set -euo pipefail
[ $# -ge 2 ] || {
  echo "usage: scripts/sanitizer-test.sh address|thread BUILD_DIR [CTEST_ARGS...]" >&2
  exit 2
}
kind="$1"
build="$(cd "$2" && pwd)"
shift 2
root="$(cd "$(dirname "$0")/.." && pwd)"
logs="$build/sanitizer-logs"
rm -rf "$logs"
mkdir -p "$logs"

case "$kind" in
  address)
    export ASAN_OPTIONS="log_path=$logs/asan:detect_leaks=1:check_initialization_order=1:strict_init_order=1:detect_stack_use_after_return=1"
    export UBSAN_OPTIONS="log_path=$logs/ubsan:print_stacktrace=1:halt_on_error=1"
    ;;
  thread)
    # abseil built with TSan (scripts/tsan-abseil.sh): Debian's hides every
    # absl::Mutex from TSan.
    export LD_LIBRARY_PATH="$build/absl-tsan/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    # ignore_noninstrumented_modules: what Debian's uninstrumented libraries
    # (gRPC, protobuf, libstdc++) read and write through intercepted calls
    # (memcpy, free, send...) is not checked, since TSan cannot see those
    # libraries' own synchronization and would report each of their
    # internal hand-offs; their pthread calls still count. tests/tsan.supp
    # has the rest, each with its reason. history_size=7 (the most) keeps
    # enough history for TSan to restore the earlier access's stack, which
    # the suppressions match against.
    export TSAN_OPTIONS="log_path=$logs/tsan:second_deadlock_stack=1:history_size=7:ignore_noninstrumented_modules=1:suppressions=$root/tests/tsan.supp"
    # libgomp is not built with TSan, so TSan cannot see its barriers and
    # would report every OpenMP region in the kernels as a race. One thread
    # per region (the `num_threads` clauses are capped by the limit) runs
    # each region in the calling thread; the kernels' own threading is not
    # what these tests are for.
    export OMP_THREAD_LIMIT=1
    ;;
  *)
    echo "sanitizer-test: unknown sanitizer '$kind' (address or thread)" >&2
    exit 2
    ;;
esac

# CoordinatorTest.SigtermDrainsRunningAndQueuedRequests drains 16 long
# streams within the coordinator's --drain_timeout (60 s by default), which
# the sanitizers' slowdown (ASan ~2-3x, TSan ~5-10x, with another test
# beside it) can outlast.
export OCTET_TEST_DRAIN_TIMEOUT=300s

status=0
(cd "$build" && ctest --output-on-failure --timeout 1200 "$@") || status=$?

reports=("$logs"/*)
if [ -e "${reports[0]}" ]; then
  for f in "${reports[@]}"; do
    echo "=== sanitizer report: $f"
    head -c 20000 "$f"
  done
  echo "sanitizer-test: ${#reports[@]} processes wrote sanitizer reports (above)" >&2
  exit 1
fi
echo "sanitizer-test: no sanitizer reports"
exit "$status"
