#!/usr/bin/env bash
# Runs every `gpu` test and the GEMM benchmark on a machine with an NVIDIA
# GPU (sm_89 or sm_90), from the bundle scripts/gpu-bundle.sh made. Each step
# has its own time limit (5 min); the whole should take 2-3 minutes.
#
#   .gpu-bundle/gpu-check.sh [OUTPUT_DIR]
#
# Logs and the benchmark table go to OUTPUT_DIR (default: $OUT, else
# ./gpu-check-out). Exits non-zero if a test fails, a test was skipped
# (no usable GPU is a failure here, not a pass), or the benchmark fails.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-${OUT:-gpu-check-out}}"
mkdir -p "$out"
export LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

status=0
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | tee "$out/nvidia-smi.txt"

for t in cuda_quantize_test cuda_gemm_test; do
  echo "== $t"
  timeout 300 "$here/bin/$t" --gtest_brief=1 > "$out/$t.log" 2>&1
  rc=$?
  tail -n 25 "$out/$t.log"
  if [ $rc -ne 0 ]; then
    echo "gpu-check: $t FAILED (exit $rc)"; status=1
  elif grep -q "SKIPPED" "$out/$t.log"; then
    echo "gpu-check: $t skipped tests: no usable GPU"; status=1
  fi
done

echo "== bench_gemm --backend=cuda"
timeout 300 "$here/bin/bench_gemm" --backend=cuda --min_time_ms=100 2>&1 | tee "$out/bench_gemm.txt"
rc=${PIPESTATUS[0]}
if [ $rc -ne 0 ]; then echo "gpu-check: bench_gemm FAILED (exit $rc)"; status=1; fi

echo "gpu-check: $([ $status -eq 0 ] && echo PASSED || echo FAILED)"
exit $status
