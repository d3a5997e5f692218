#!/usr/bin/env bash
# Runs every `gpu` test and the GEMM benchmark on a machine with an NVIDIA
# GPU (sm_89 or sm_90), from the bundle scripts/gpu-bundle.sh made: the gpu
# tests, bench_gemm, and octet generate on the llama-1b preset (decode speed
# with fp8 vs none). Each step has its own time limit; the whole should take
# 3-4 minutes.
#
#   .gpu-bundle/gpu-check.sh [OUTPUT_DIR]
#
# Logs (tests.log, octet.log) and the benchmark table go to OUTPUT_DIR
# (default: $OUT, else ./gpu-check-out). Exits non-zero if a test fails, a test was skipped
# (no usable GPU is a failure here, not a pass), or the benchmark fails.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-${OUT:-gpu-check-out}}"
mkdir -p "$out"
export LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

status=0
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | tee "$out/nvidia-smi.txt"

for path in "$here"/bin/*_test; do
  t=$(basename "$path")
  echo "== $t"
  log=$(mktemp)
  timeout 300 "$path" > "$log" 2>&1
  rc=$?
  { echo "== $t"; cat "$log"; } >> "$out/tests.log"
  grep -E "^\[ measured \]|FAILED|Failure" "$log" | head -n 40
  tail -n 3 "$log"
  if [ $rc -ne 0 ]; then
    echo "gpu-check: $t FAILED (exit $rc)"; status=1
  elif grep -q "SKIPPED" "$log"; then
    echo "gpu-check: $t skipped tests: no usable GPU"; status=1
  fi
done

echo "== bench_gemm --backend=cuda"
timeout 300 "$here/bin/bench_gemm" --backend=cuda --min_time_ms=100 2>&1 | tee "$out/bench_gemm.txt"
rc=${PIPESTATUS[0]}
if [ $rc -ne 0 ]; then echo "gpu-check: bench_gemm FAILED (exit $rc)"; status=1; fi

echo "== the model on the GPU: llama-1b preset, decode with fp8 vs none"
model="$(mktemp -d)/llama-1b"
if timeout 120 "$here/bin/octet" make-model --preset llama-1b --out "$model" > "$out/octet.log" 2>&1; then
  timeout 120 "$here/bin/octet" generate --model "$model" --device cuda --quantization fp8 \
    --prompt "The quick brown fox" --max_tokens 32 --ignore_eos >> "$out/octet.log" 2>&1 \
    || { echo "gpu-check: octet generate FAILED"; status=1; }
  for batch in 1 16; do
    timeout 180 "$here/bin/bench_decode" --model "$model" --device cuda --steps 64 \
      --batch "$batch" >> "$out/octet.log" 2>&1 \
      || { echo "gpu-check: bench_decode --batch $batch FAILED"; status=1; }
  done
  grep -E "^octet:|^bench_decode:|median|speedup" "$out/octet.log"
  rm -rf "$model"
else
  echo "gpu-check: octet make-model FAILED"; cat "$out/octet.log"; status=1
fi

echo "gpu-check: $([ $status -eq 0 ] && echo PASSED || echo FAILED)"
exit $status
