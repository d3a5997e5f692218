#!/usr/bin/env bash
# The GPU check: one command, run on a machine with an NVIDIA GPU (sm_89 or
# sm_90) from the bundle scripts/gpu-bundle.sh made, that fits a short first
# lease of the machine (under 5 minutes on an H200). In order:
#
#   step        what                                            budget (s)
#   (unpack)    payload.tar.gz into a temporary folder              ~2
#   libraries   ldd on every bundled program: CUDA's libraries       5
#               (cuBLASLt, NCCL) found on this machine, or
#               one line per missing one and exit 2
#   system      nvidia-smi -q, the driver, the resolved CUDA       15
#               libraries and their versions, nvcc, the OS
#   (background) octet make-model: the mistral-7b preset       210, 90
#               (14.5 GB of random bf16 weights), llama-1b and
#               tiny, written while the next steps run
#   tests       every `gpu` test program (each at most 90 s);     130
#               a skipped test fails the check, except one that
#               needs more GPUs than the machine has (said so)
#   mission     the README's command, `coordinator --tp 2          90
#               --gpus 0,0 --quantization fp8`, on tiny and
#               llama-1b, asked through `octet generate
#               --server`: its greedy tokens against TP = 1 on
#               the GPU, FP8 and none (gpu-mission.sh)
#   codes       `octet logits --activation_codes` on the GPU       45
#               against the CPU, tiny and llama-1b: each FP8
#               input's equal codes; the first input at least
#               95% equal (compare_codes.py, python3)
#   gemm        bench_gemm --backend=cuda on Mistral-7B's four     90
#               shapes, M = 1..2048: BF16, FP8, FP8 with
#               quantization, quantization alone, FP8 with K in
#               8 blocks (--k_blocks: the row-parallel layers'
#               TP-invariant sums), which GEMM path (cuBLASLt
#               or the fallback) ran each cell; then
#               bench_attention --device=cuda on Mistral-7B's
#               heads: octet's attention against FlashInfer's for
#               prefills of 512 and 2048 tokens, and octet's
#               for decodes of 8 such sequences (into
#               bench_gemm.txt)
#   decode      bench_decode on mistral-7b, batch 1, 8, 32:       110
#               FP8 against BF16 (none), steps interleaved,
#               the models loaded once; --profile: each batch
#               size's step profile (CUDA events around every
#               operation: ms and share per part, the gap to the
#               graph-replayed step)
#   serving     bench_serving on llama-1b, TP=1 on the GPU:        90
#               16 requests (Poisson, 4/s), 128 prompt + 32
#               output tokens, FP8 against none in ABBA rounds
#   pack        gpu-check.tar.gz of the results                    10
#
# The budgets are what each step is sure to get; the whole run ends by
# 600 s however the steps go. A step's time limit is what is left before
# then less the budgets of the steps after it (and 10 s for packing), so
# time an early step leaves unused goes to the later ones, and a step that
# hangs takes no later step's time. A step with no time left fails. (Each
# test program is held to 90 s, the model making to its own budget.)
# Without a usable GPU the tests skip (a failure) and the benchmark steps
# fail at once, saying so.
#
#   .gpu-bundle/gpu-check.sh [OUTPUT_DIR]
#
# OUTPUT_DIR (default: $OUT, else ./gpu-check-out) receives at most 10
# files, all of them also in gpu-check.tar.gz: summary.txt (each step, its
# time and result, the key tables), system.txt, tests.log, mission.txt,
# codes.txt, bench_gemm.txt (its table, then bench_attention's),
# bench_gemm.csv, decode.txt, serving.txt. Models are made in a temporary
# folder under $TMPDIR (default /tmp; ~17 GB free needed), removed at the
# end. Prints a final PASSED or FAILED line; exits 0 when every step
# passed, 2 when a library is missing, 1 otherwise.
#
# For trying the script on a machine without a GPU (the numbers mean
# nothing): GPU_CHECK_DEVICE=cpu runs the benchmarks on the CPU with small
# shapes, GPU_CHECK_DECODE_PRESET and GPU_CHECK_SERVING_PRESET (e.g. tiny)
# choose the models.
set -uo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-${OUT:-gpu-check-out}}"
mkdir -p "$out" || exit 2
out="$(cd "$out" && pwd)"
device="${GPU_CHECK_DEVICE:-cuda}"
decode_preset="${GPU_CHECK_DECODE_PRESET:-mistral-7b}"
serving_preset="${GPU_CHECK_SERVING_PRESET:-llama-1b}"

total_budget=600  # seconds for everything, packing included
pack_reserve=10   # kept back from every step for the packing
budget_mission=90 budget_codes=45
budget_gemm=90 budget_decode=110 budget_serving=90
budget_mistral=210 budget_small_model=90  # background make-model
deadline=$((SECONDS + total_budget))

results=(summary.txt system.txt tests.log mission.txt codes.txt bench_gemm.txt
  bench_gemm.csv decode.txt serving.txt)
for f in "${results[@]}" gpu-check.tar.gz; do rm -f "$out/$f"; done
: > "$out/tests.log"

steps=()   # "name|PASSED or FAILED|seconds|detail", for summary.txt
failed=0
work=""
background=()  # process groups of the background jobs (make-model)
current=""     # process group of the step running now

say() { echo "gpu-check: $*"; }

# Records a step's result: name, PASSED/FAILED, its start ($SECONDS), detail.
record() {
  local name=$1 result=$2 started=$3 detail=${4:-}
  steps+=("$name|$result|$((SECONDS - started))|$detail")
  [ "$result" = PASSED ] || failed=1
  say "$name: $result ($((SECONDS - started)) s)${detail:+: $detail}"
}

# The time limit of a step: what is left before the deadline less the
# packing's reserve and $1, the budgets of the steps after it; 0 if none.
limit_before() {
  local left=$((deadline - pack_reserve - $1 - SECONDS))
  if [ "$left" -lt 0 ]; then echo 0; else echo "$left"; fi
}
# The smaller of two numbers.
min() { if [ "$1" -lt "$2" ]; then echo "$1"; else echo "$2"; fi; }

# Runs a command with a time limit in its own process group, so that
# whatever it started (a coordinator and its workers) ends with it:
#   limited SECONDS LOGFILE COMMAND...    returns the command's exit code
# (124 for a timeout).
limited() {
  local seconds=$1 log=$2 pid rc
  shift 2
  if [ "$seconds" -lt 1 ]; then  # timeout 0 would mean no limit
    echo "gpu-check: not run, no time left" >> "$log"
    return 124
  fi
  if command -v setsid > /dev/null; then
    setsid timeout -k 5 "$seconds" "$@" >> "$log" 2>&1 &
  else
    timeout -k 5 "$seconds" "$@" >> "$log" 2>&1 &
  fi
  pid=$!
  current=$pid
  wait "$pid"
  rc=$?
  kill -KILL -- "-$pid" 2> /dev/null
  current=""
  return "$rc"
}

# shellcheck disable=SC2317  # run by the EXIT trap
cleanup() {
  local pid
  for pid in "${background[@]}" ${current:+"$current"}; do kill -KILL -- "-$pid" "$pid" 2> /dev/null; done
  [ -n "$work" ] && rm -rf "$work"
}
trap cleanup EXIT
trap 'say "interrupted"; exit 130' INT TERM

# The summary's last section: issue 25's measures in one table, each beside
# its target, from bench_gemm.csv, decode.txt and serving.txt.
numbers() {
  echo; echo "== numbers (FP8 against BF16 in the same run; targets from issue 25)"
  if [ -s "$out/bench_gemm.csv" ]; then
    local median
    median=$(awk -F, 'NR > 1 && $1 == "cuda" { print $6 / $8 }' "$out/bench_gemm.csv" |
      sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)] }')
    awk -F, -v med="${median:-0}" 'NR > 1 && $1 == "cuda" {
        n++; x = $6 / $8; q = $7 / $8
        if (n == 1 || x < xmin) xmin = x; if (n == 1 || x > xmax) xmax = x
        if (n == 1 || q < qmin) qmin = q; if (n == 1 || $9 > umax) umax = $9
        below += (x < 1.4); far += (q < 0.9)
        if ($27 > 0) { r = $27 / $7; rg++; ways[$28]++
          if (rg == 1 || r < rmin) rmin = r; if (rg == 1 || r > rmax) rmax = r }
        if ($32 > 0) { gq++; if ($32 > q1max) q1max = $32; if ($33 > q3max) q3max = $33
          s = $33 / $32; if (gq == 1 || s < smin) smin = s; if (gq == 1 || s > smax) smax = s }
      }
      END {
        if (n == 0) { print "gemm    no CUDA cells"; exit }
        printf "gemm    fp8+quant / bf16: %.2f-%.2fx, median %.2fx; %d of %d cells below 1.4x (target >= 1.4x in every cell)\n", xmin, xmax, med, below, n
        printf "gemm    fp8+quant / pre-quantized fp8: worst %.2fx; %d cells more than 10%% slower (target: none)\n", qmin, far
        printf "gemm    quantization alone: at most %.1f us (target <= 5 us)\n", umax
        if (rg > 0) {
          printf "gemm    per-sequence scales, fastest way / fp8: %.2f-%.2fx; fastest:", rmin, rmax
          for (w in ways) printf " %s %d", w, ways[w]; print " cells"
        }
        if (gq > 0) printf "gemm    per-sequence quantization, one launch: at most %.1f us; three launches over one: %.2f-%.2fx (at most %.1f us)\n", q1max, smin, smax, q3max
      }' "$out/bench_gemm.csv"
  fi
  # Only the CUDA table's rows (its header names the device) are octet's
  # attention against FlashInfer's.
  if grep -qE '^bench_attention: .* cuda:' "$out/bench_gemm.txt" 2> /dev/null; then
    awk '/^bench_attention: .* cuda:/ { gpu = 1 }
      gpu && /^prefill .*x / { printf "attn    prefill of %s tokens: octet %s ms, flashinfer %s ms a layer (%s; its host plan %s ms a forward)\n", $3, $4, $5, $6, $8 }' "$out/bench_gemm.txt"
  fi
  if [ -s "$out/decode.txt" ]; then
    awk '/^batch [0-9]+:/ { b = $2; sub(":", "", b) }
      /^none +median/ { none[b] = $3 } /^fp8 +median/ { fp8[b] = $3 }
      /^fp8 decode speedup/ { x[b] = $6 }
      /^roofline/ { r = $0; sub(/.*measured now\): /, "", r); roof[b] = r }
      END {
        for (b in none) printf "decode  batch %s: none %s ms, fp8 %s ms a step; fp8 tokens/s %s over none; roofline %s\n", b, none[b], fp8[b], x[b], roof[b]
      }' "$out/decode.txt" | sort -k3,3n
    echo "decode  targets: batch 1 none <= 3.9 ms, fp8 <= 2.2 ms and >= 1.75x; batch 8 and 32 fp8 >= 1.5x"
  fi
  if [ -s "$out/serving.txt" ]; then
    grep -m 1 'speedup over none' "$out/serving.txt" |
      sed 's/.*all rounds: /serving none \/ fp8 (TP=1): /'
    echo "serving targets: none / fp8 ITL >= 1.43x (fp8 ITL <= 0.7x none's), TTFT >= 1.25x (<= 0.8x)"
  fi
}

# Writes summary.txt, packs the results and exits with the verdict.
finish() {
  local code=$1 line name result secs detail verdict
  [ "$code" -eq 0 ] && [ "$failed" -ne 0 ] && code=1
  verdict=$([ "$code" -eq 0 ] && echo PASSED || echo FAILED)
  {
    echo "gpu-check $verdict, $(date -u +%Y-%m-%dT%H:%M:%SZ), $SECONDS s in all"
    echo "GPU: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2> /dev/null | head -n 1 || true)"
    [ -f "$here/bundle.txt" ] && cat "$here/bundle.txt"
    grep -m 1 -o 'NCCL version .*' "$out/tests.log"
    grep -E '^(libcublasLt|libnccl|libcuda)[^ ]* ' "$out/system.txt" 2> /dev/null
    echo
    printf '%-10s %-7s %5s  %s\n' step result secs detail
    for line in "${steps[@]}"; do
      IFS='|' read -r name result secs detail <<< "$line"
      printf '%-10s %-7s %5s  %s\n' "$name" "$result" "$secs" "$detail"
    done
    if [ -s "$out/mission.txt" ]; then
      echo; echo "== mission (mission.txt)"
      grep -E '^mission ' "$out/mission.txt"
    fi
    if [ -s "$out/codes.txt" ]; then
      echo; echo "== codes (codes.txt)"
      grep -E '^== |^codes:|^logits:' "$out/codes.txt"
    fi
    if [ -s "$out/bench_gemm.txt" ]; then
      echo; echo "== bench_gemm (bench_gemm.txt, bench_gemm.csv)"
      grep -E '^ +[0-9]+ |^\*|^ +M |^bench_attention|^case |^(prefill|decode) ' "$out/bench_gemm.txt"
    fi
    if [ -s "$out/decode.txt" ]; then
      echo; echo "== decode (decode.txt)"
      grep -E '^bench_decode:|^wrote|^ *batch|^(none|fp8) +median|^ +[0-9]+ |speedup|^profile|^roofline' "$out/decode.txt"
    fi
    if [ -s "$out/serving.txt" ]; then
      echo; echo "== serving (serving.txt)"
      grep -E '^bench_serving:|^wrote|^ *round|^config|TP=[0-9]+ |speedup|per round' "$out/serving.txt"
    fi
    numbers
  } > "$out/summary.txt" 2>&1
  local present=()
  for line in "${results[@]}"; do [ -f "$out/$line" ] && present+=("$line"); done
  tar czf "$out/gpu-check.tar.gz" -C "$out" "${present[@]}" ||
    say "packing gpu-check.tar.gz failed"
  say "results in $out: ${present[*]} gpu-check.tar.gz"
  say "$verdict"
  exit "$code"
}

# ---------------------------------------------------------------- unpack
# The programs and libraries travel compressed (payload.tar.gz, a third of
# their size); a bundle already unpacked (bin/ beside this script) is used
# as it is. Models and logs go to the same temporary folder.
work_base="${TMPDIR:-/tmp}"
work=$(mktemp -d "$work_base/gpu-check.XXXXXX") || { say "cannot make a folder in $work_base"; exit 2; }
if [ -d "$here/bin" ]; then
  bundle=$here
elif tar xzf "$here/payload.tar.gz" -C "$work"; then
  bundle=$work
else
  say "cannot unpack $here/payload.tar.gz into $work: is this the bundle scripts/gpu-bundle.sh made?"
  exit 2
fi
bin="$bundle/bin"
lib="$bundle/lib"

# ---------------------------------------------------------------- libraries
# Where the programs' libraries are looked for: the bundle's, then what the
# environment says, then the CUDA toolkit, then the pip packages of a
# Python venv (nvidia-cublas, nvidia-nccl-cu13: site-packages/nvidia/*/lib).
started=$SECONDS
echo "== libraries"
lib_dirs=()
add_dirs() {
  local d known
  for d in "$@"; do
    if [ -z "$d" ] || [ ! -d "$d" ]; then continue; fi
    for known in "${lib_dirs[@]}"; do [ "$known" = "$d" ] && continue 2; done
    lib_dirs+=("$d")
  done
}
add_dirs "$lib"
IFS=: read -r -a env_dirs <<< "${LD_LIBRARY_PATH:-}"
add_dirs "${env_dirs[@]}"
add_dirs /usr/local/cuda/lib64 /usr/local/cuda-13*/lib64 \
  /usr/local/cuda/targets/x86_64-linux/lib
site_dirs=()
for py in /opt/torch/.venv/bin/python3 "$(command -v python3 || true)"; do
  if [ -z "$py" ] || [ ! -x "$py" ]; then continue; fi
  sp=$(timeout 20 "$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2> /dev/null) &&
    site_dirs+=("$sp")
done
site_dirs+=(/opt/torch/.venv/lib/python3*/site-packages)
for sp in "${site_dirs[@]}"; do add_dirs "$sp"/nvidia/*/lib; done

join_dirs() { local IFS=:; echo "$*"; }

# What the dynamic loader would miss for every bundled program with the
# library path $1: "missing LIB" and "version MESSAGE" lines.
library_problems() {
  local f
  for f in "$bin"/*; do
    if command -v ldd > /dev/null; then
      LD_LIBRARY_PATH="$1" ldd "$f" 2>&1
    elif [ "${f%.so}" = "$f" ]; then
      LD_LIBRARY_PATH="$1" LD_TRACE_LOADED_OBJECTS=1 "$f" 2>&1
    fi
  done | awk '/=> not found/ {print "missing " $1; next}
              /version .* not found/ {print "version " $0}' | sort -u
}

# The bundle's C++ runtime (Debian 12's, which needs glibc 2.36) unless
# only the system's loads everything.
cxx="the bundle's"
ld_path="$(join_dirs "$lib" "$lib/cxx" "${lib_dirs[@]:1}")"
problems=$(library_problems "$ld_path")
if grep -q '^version' <<< "$problems"; then
  system_path="$(join_dirs "${lib_dirs[@]}")"
  system_problems=$(library_problems "$system_path")
  if [ -z "$system_problems" ]; then
    cxx="the system's (the bundled one needs a newer glibc)"
    ld_path=$system_path
    problems=""
  fi
fi
export LD_LIBRARY_PATH="$ld_path"
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
echo "C++ runtime: $cxx"
if [ -n "$problems" ]; then
  while read -r kind rest; do
    if [ "$kind" = missing ]; then
      say "$rest not found (looked in: ${lib_dirs[*]} and the system's ld.so.cache)"
    else
      say "$rest"
    fi
  done <<< "$problems"
  say "cuBLASLt and NCCL come from this machine: the CUDA 13 toolkit's lib64, or the pip packages nvidia-cublas and nvidia-nccl-cu13 (set LD_LIBRARY_PATH to their lib folder)"
  record libraries FAILED "$started" "$(grep -c . <<< "$problems") library problem(s): $(awk '{print $2}' <<< "$problems" | sort -u | tr '\n' ' ')"
  finish 2
fi
record libraries PASSED "$started" "every program's libraries resolve; C++ runtime: $cxx"

# ---------------------------------------------------------------- system
started=$SECONDS
echo "== system"
# The driver's library, which the (static) CUDA runtime loads by name.
driver_dirs=(/usr/lib/x86_64-linux-gnu /usr/lib64 /usr/local/nvidia/lib64
  /usr/local/nvidia/lib /usr/lib/wsl/lib)
find_lib() {
  local d
  for d in "${lib_dirs[@]}" "${driver_dirs[@]}"; do
    [ -e "$d/$1" ] && { readlink -f "$d/$1"; return 0; }
  done
  { ldconfig -p || /sbin/ldconfig -p; } 2> /dev/null |
    awk -v n="$1" '$1 == n {print $NF; exit}' | xargs -r readlink -f
}
# No usable GPU: no driver library, or nvidia-smi lists none, or (without
# nvidia-smi) no /dev/nvidiactl. The gpu tests have the last word.
have_gpu=1
gpu_problem=""
libcuda=$(find_lib libcuda.so.1)
if [ -z "$libcuda" ]; then
  have_gpu=0
  gpu_problem="libcuda.so.1 (the driver's library) not found (looked in: ${lib_dirs[*]} ${driver_dirs[*]} and the system's ld.so.cache)"
fi
if command -v nvidia-smi > /dev/null; then
  if ! timeout 30 nvidia-smi -L > /dev/null 2>&1; then
    have_gpu=0
    gpu_problem="${gpu_problem:+$gpu_problem; }nvidia-smi -L lists no GPU"
  fi
elif [ ! -e /dev/nvidiactl ]; then
  have_gpu=0
  gpu_problem="${gpu_problem:+$gpu_problem; }no nvidia-smi and no /dev/nvidiactl"
fi
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host: $(uname -n), $(uname -srm)"
  # shellcheck disable=SC1091
  echo "os: $(. /etc/os-release 2> /dev/null && echo "$PRETTY_NAME")"
  echo "glibc: $(ldd --version 2> /dev/null | head -n 1)"
  echo "cpus: $(nproc), memory: $(free -g 2> /dev/null | awk '/^Mem:/ {print $2 " GiB"}')"
  echo "temporary folder: ${TMPDIR:-/tmp}, $(df -Ph "${TMPDIR:-/tmp}" | awk 'NR == 2 {print $4}') free"
  echo
  cat "$here/bundle.txt" 2> /dev/null
  echo
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  echo "C++ runtime: $cxx"
  echo "libcuda.so.1 (driver): ${libcuda:-not found}"
  # The CUDA libraries as the programs resolve them (the runtime from the
  # bundle's lib/).
  for f in "$bin"/*; do ldd "$f" 2> /dev/null; done |
    awk '/libcublas|libnccl|libcudart|libnvJitLink/ && /=>/ {print $1, $3}' | sort -u |
    while read -r name path; do echo "$name => $path => $(readlink -f "$path")"; done
  if [ -f /usr/local/cuda/version.json ]; then
    echo "/usr/local/cuda/version.json: $(grep -A 3 -E '"(cuda|libcublas|nccl)"' /usr/local/cuda/version.json |
      grep -E '"(name|version)"' | sed 's/.*: *"\(.*\)".*/\1/' | paste -sd ' ' -)"
  fi
  echo "libcudart: the bundle's ($(grep -o 'nvcc release [0-9.]*' "$here/bundle.txt" 2> /dev/null || echo 'see bundle.txt'))"
  for d in "${lib_dirs[@]:1}"; do ls "$d"/libcudart.so.* 2> /dev/null; done |
    xargs -r readlink -f | sort -u | head -n 3 |
    while read -r f; do echo "  (also on this machine: $f)"; done
  nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  echo "nvcc: $("$nvcc" --version 2> /dev/null | tail -n 2 | tr '\n' ' ' || true)"
  for sp in "${site_dirs[@]}"; do
    [ -d "$sp" ] && find "$sp" -maxdepth 1 -iname 'nvidia*.dist-info' -printf "pip: %f\n" 2> /dev/null
  done | sort -u
  echo
  echo "== nvidia-smi"
  if command -v nvidia-smi > /dev/null; then
    timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap,clocks.max.sm --format=csv 2>&1
    echo
    echo "== nvidia-smi -q"
    timeout 20 nvidia-smi -q 2>&1
  else
    echo "nvidia-smi: not installed"
  fi
} > "$out/system.txt"
grep -E '^(os|glibc|libcuda|libcublas|libnccl|libcudart|nvcc):|=>' "$out/system.txt" | head -n 12
grep -A2 '^== nvidia-smi$' "$out/system.txt" | tail -n 2
if [ "$have_gpu" -eq 1 ]; then
  record system PASSED "$started" "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2> /dev/null | head -n 1)"
else
  record system FAILED "$started" "no usable GPU: $gpu_problem"
fi

# ---------------------------------------------------------------- models
# Made in the background while the tests and bench_gemm run (make-model is
# one CPU thread and the disk; those steps are the GPU's).
declare -A model_pid model_started model_budget model_rc
bench_device=$device
[ "$device" = cuda ] && [ "$have_gpu" -eq 0 ] && bench_device=""  # nothing to run on
start_model() {  # PRESET BUDGET
  local preset=$1 budget
  budget=$(min "$2" "$(limit_before $((budget_mission + budget_codes + budget_decode + budget_serving)))")
  model_started[$preset]=$SECONDS
  model_budget[$preset]=$budget
  if [ "$budget" -lt 5 ]; then
    echo "not made: no time left" > "$work/$preset.log"
    return
  fi
  if [ "$preset" = mistral-7b ] &&
    [ "$(df -Pk "$work" | awk 'NR == 2 {print $4}')" -lt $((17 << 20)) ]; then
    echo "not enough disk: mistral-7b needs ~15 GB in $work ($(df -Ph "$work" | awk 'NR == 2 {print $4}') free)" > "$work/$preset.log"
    return
  fi
  if command -v setsid > /dev/null; then
    setsid timeout -k 5 "$budget" "$bin/octet" make-model --preset "$preset" --out "$work/$preset" > "$work/$preset.log" 2>&1 &
  else
    timeout -k 5 "$budget" "$bin/octet" make-model --preset "$preset" --out "$work/$preset" > "$work/$preset.log" 2>&1 &
  fi
  model_pid[$preset]=$!
  background+=("$!")
}
# Waits for a model (once; later calls say the same): 0 when it is there.
wait_model() {
  local preset=$1 rc=1
  if [ -z "${model_rc[$preset]:-}" ]; then
    [ -n "${model_pid[$preset]:-}" ] && { wait "${model_pid[$preset]}"; rc=$?; }
    [ "$rc" -eq 124 ] && echo "make-model timed out after ${model_budget[$preset]} s" >> "$work/$preset.log"
    model_rc[$preset]=$rc
    echo "make-model $preset: exit $rc, $((SECONDS - model_started[$preset])) s after it started"
  fi
  cat "$work/$preset.log"
  return "${model_rc[$preset]}"
}
if [ -n "$bench_device" ]; then
  start_model "$decode_preset" "$budget_mistral"
  [ "$serving_preset" != "$decode_preset" ] && start_model "$serving_preset" "$budget_small_model"
  for preset in tiny; do
    [ "$preset" != "$serving_preset" ] && [ "$preset" != "$decode_preset" ] &&
      start_model "$preset" "$budget_small_model"
  done
fi

# ---------------------------------------------------------------- tests
started=$SECONDS
echo "== tests"
tests_end=$((SECONDS + $(limit_before $((budget_mission + budget_codes + budget_gemm + budget_decode + budget_serving)))))
tests_failed=()
tests_not_here=()  # programs with tests that need more GPUs than this machine has
tests_run=0
# The skips in a test log whose reason is a want of GPUs ("needs 2 GPUs,
# this machine has 1"): the only skips that do not fail the check.
skips_for_want_of_gpus() {
  grep -A 1 ': Skipped$' "$1" | grep -c -E '^needs [0-9]+ GPUs'
}
if [ -f "$here/gpu-tests.txt" ]; then
  mapfile -t gpu_tests < "$here/gpu-tests.txt"
else
  gpu_tests=()
  for path in "$bin"/*_test; do gpu_tests+=("$(basename "$path")"); done
fi
for t in "${gpu_tests[@]}"; do
  t_started=$SECONDS
  left=$((tests_end - SECONDS))
  [ "$left" -gt 90 ] && left=90
  if [ "$left" -lt 1 ]; then
    say "test $t: FAILED: not run, the tests' time is spent"
    tests_failed+=("$t(not run)")
    continue
  fi
  log="$work/$t.log"
  limited "$left" "$log" env GTEST_COLOR=no NCCL_DEBUG="${NCCL_DEBUG:-VERSION}" "$bin/$t"
  rc=$?
  { echo "== $t (exit $rc, $((SECONDS - t_started)) s)"; cat "$log"; echo; } >> "$out/tests.log"
  tests_run=$((tests_run + 1))
  grep -E '^\[ measured \]' "$log" | head -n 8  # all of them in tests.log
  passed=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -n 1)
  skipped=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$log" | tail -n 1)
  not_here=$(skips_for_want_of_gpus "$log")
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    say "test $t: FAILED: timed out after $left s (last line: $(tail -n 1 "$log"))"
    tests_failed+=("$t(timeout)")
  elif [ "$rc" -ne 0 ]; then
    say "test $t: FAILED (exit $rc)"
    grep -E '^\[  FAILED  \]|Failure$|Expected|Which is|Value of' "$log" | head -n 20
    tests_failed+=("$t")
  elif [ "${skipped:-0}" -gt "$not_here" ]; then
    say "test $t: FAILED: $((skipped - not_here)) test(s) skipped: $(grep -A 1 ': Skipped$' "$log" | grep -v -m 1 -E ': Skipped$|^needs [0-9]+ GPUs|^--$')"
    tests_failed+=("$t(skipped)")
  elif [ "$not_here" -gt 0 ]; then
    say "test $t: passed (${passed:-?} tests, $((SECONDS - t_started)) s); $not_here not run: they need more GPUs than this machine has"
    tests_not_here+=("$t($not_here)")
  else
    say "test $t: passed (${passed:-?} tests, $((SECONDS - t_started)) s)"
  fi
done
if [ "${#gpu_tests[@]}" -eq 0 ]; then
  record tests FAILED "$started" "no gpu test programs in the bundle"
elif [ "${#tests_failed[@]}" -eq 0 ]; then
  record tests PASSED "$started" "${#gpu_tests[@]} programs: ${gpu_tests[*]}${tests_not_here[*]:+; tests needing more GPUs, not run: ${tests_not_here[*]}}"
else
  record tests FAILED "$started" "${#tests_failed[@]} of ${#gpu_tests[@]} programs failed: ${tests_failed[*]}"
fi

# The presets the mission and codes steps run: tiny and the serving one.
mission_presets=(tiny)
[ "$serving_preset" != tiny ] && mission_presets+=("$serving_preset")

# ---------------------------------------------------------------- mission
started=$SECONDS
echo "== mission: coordinator --tp 2 against --tp 1 on $bench_device (${mission_presets[*]})"
if [ -z "$bench_device" ]; then
  record mission FAILED "$started" "not run: no usable GPU"
else
  mission_failed=()
  for preset in "${mission_presets[@]}"; do
    if ! wait_model "$preset" >> "$out/mission.txt" 2>&1; then
      mission_failed+=("$preset(make-model)")
      continue
    fi
    budget=$(limit_before $((budget_codes + budget_gemm + budget_decode + budget_serving)))
    limited "$budget" "$out/mission.txt" "$here/gpu-mission.sh" "$bin" "$work/$preset" "$bench_device"
    rc=$?
    [ "$rc" -eq 0 ] || mission_failed+=("$preset$([ "$rc" -eq 124 ] && echo '(timeout)')")
  done
  grep -E '^mission ' "$out/mission.txt"
  if [ "${#mission_failed[@]}" -eq 0 ]; then
    record mission PASSED "$started" "TP=2 gave TP=1's greedy tokens, fp8 and none: ${mission_presets[*]}"
  else
    record mission FAILED "$started" "TP=2 tokens differ from TP=1's or a server failed: ${mission_failed[*]} (mission.txt)"
  fi
fi

# ---------------------------------------------------------------- codes
started=$SECONDS
echo "== codes: FP8 activation codes, $bench_device against cpu (${mission_presets[*]})"
python=""
for py in "$(command -v python3 || true)" /opt/torch/.venv/bin/python3; do
  [ -n "$py" ] && [ -x "$py" ] && { python=$py; break; }
done
if [ -z "$bench_device" ]; then
  record codes FAILED "$started" "not run: no usable GPU"
elif [ -z "$python" ]; then
  record codes FAILED "$started" "not run: no python3 for compare_codes.py"
else
  codes_failed=()
  prompts='[[1,17,33,90,5,200,311,42,7,9,11,13,300,301,302,303],[2,3,4,5,6,7,8]]'
  devices=(cpu)
  [ "$bench_device" != cpu ] && devices+=("$bench_device")
  for preset in "${mission_presets[@]}"; do
    echo "== $preset" >> "$out/codes.txt"
    budget=$(limit_before $((budget_gemm + budget_decode + budget_serving)))
    for dev in "${devices[@]}"; do
      log="$work/codes-$preset-$dev.log"
      rm -f "$log"
      limited "$budget" "$log" "$bin/octet" logits \
        --model "$work/$preset" --prompts_json "$prompts" --quantization fp8 \
        --device "$dev" --activation_codes
      # stdout and stderr share the log; the JSON, flushed at exit, comes
      # after every line of stderr (what was loaded, and any error).
      sed -n '/^{"quantization_scheme"/,$p' "$log" > "$work/codes-$preset-$dev.json"
      sed '/^{"quantization_scheme"/,$d' "$log" | tail -n 3 >> "$out/codes.txt"
    done
    if ! limited 60 "$out/codes.txt" "$python" "$here/compare_codes.py" \
      "$work/codes-$preset-cpu.json" "$work/codes-$preset-$bench_device.json"; then
      codes_failed+=("$preset")
    fi
  done
  grep -E '^== |^codes:|^logits:' "$out/codes.txt"
  if [ "${#codes_failed[@]}" -eq 0 ]; then
    record codes PASSED "$started" "first FP8 input at least 95% equal codes: ${mission_presets[*]}"
  else
    record codes FAILED "$started" "first input below 95% equal codes, or a run failed: ${codes_failed[*]} (codes.txt)"
  fi
fi

# ---------------------------------------------------------------- gemm
started=$SECONDS
echo "== bench_gemm"
if [ -z "$bench_device" ]; then
  record gemm FAILED "$started" "not run: no usable GPU"
else
  if [ "$bench_device" = cuda ]; then
    gemm_args=(--backend=cuda --min_time_ms=50)
  else
    gemm_args=(--backend=cpu '--shapes=256x256,96x160' '--m=1,8' --min_time_ms=5 --rotate_mib=0)
  fi
  budget=$(limit_before $((budget_decode + budget_serving)))
  # --k_blocks=8: each cell also times the FP8 GEMM as Mistral-7B's
  # row-parallel layers sum it at TP = 1 (K in 8 blocks, TreeSum order);
  # --row_groups=64: with per-sequence scales, each row its own sequence up
  # to M = 64 (a decode batch), each way CublasLtGemm has.
  # 20 s of the step's time kept for bench_attention.
  gemm_budget=$((budget > 20 ? budget - 20 : 0))
  limited "$gemm_budget" "$out/bench_gemm.txt" "$bin/bench_gemm" "${gemm_args[@]}" --k_blocks=8 --row_groups=64 --csv_out="$out/bench_gemm.csv"
  rc=$?
  cat "$out/bench_gemm.txt"
  cells=$(($(wc -l < "$out/bench_gemm.csv" 2> /dev/null || echo 1) - 1))
  fallback=$(grep -c ',fallback,' "$out/bench_gemm.csv" 2> /dev/null)
  # shellcheck disable=SC2054  # the commas are bench_attention's lists
  if [ "$bench_device" = cuda ]; then
    attention_args=(--device=cuda --lengths=512,2048 --heads=32 --kv_heads=8 --head_dim=128 --decode_batch=8 --rounds=5)
  else
    attention_args=(--device=cpu --lengths=64 --heads=4 --kv_heads=2 --head_dim=64 --decode_batch=2 --rounds=1)
  fi
  echo >> "$out/bench_gemm.txt"
  limited "$(limit_before $((budget_decode + budget_serving)))" "$out/bench_gemm.txt" "$bin/bench_attention" "${attention_args[@]}"
  attention_rc=$?
  grep -E '^bench_attention|^case |^(prefill|decode) ' "$out/bench_gemm.txt"
  if [ "$rc" -eq 0 ] && [ "$attention_rc" -ne 0 ]; then
    record gemm FAILED "$started" "$cells cells; bench_attention exit $attention_rc (bench_gemm.txt)"
  elif [ "$rc" -eq 0 ]; then
    flashinfer_rows=0
    [ "$bench_device" = cuda ] && flashinfer_rows=$(grep -cE '^prefill .*x ' "$out/bench_gemm.txt")
    record gemm PASSED "$started" "$cells cells, ${fallback:-0} on the fallback GEMM; attention: $flashinfer_rows prefills on FlashInfer"
  else
    record gemm FAILED "$started" "exit $rc$([ "$rc" -eq 124 ] && echo ", timed out after $gemm_budget s"), $cells cells written"
  fi
fi

# ---------------------------------------------------------------- decode
started=$SECONDS
echo "== decode: bench_decode on $decode_preset, batch 1, 8, 32"
if [ -z "$bench_device" ]; then
  record decode FAILED "$started" "not run: no usable GPU"
else
  # Without the decode preset (make-model failed or ran out of time), the
  # serving preset's model gives decode numbers still; the step fails.
  decode_model=$decode_preset
  if ! wait_model "$decode_preset" >> "$out/decode.txt" 2>&1; then
    tail -n 3 "$out/decode.txt"
    say "decode: octet make-model --preset $decode_preset failed; measuring $serving_preset instead"
    decode_model=$serving_preset
    wait_model "$serving_preset" > /dev/null 2>&1 || decode_model=""
  fi
  grep '^wrote' "$out/decode.txt"
  budget=$(limit_before "$budget_serving")
  if [ -z "$decode_model" ]; then
    record decode FAILED "$started" "octet make-model failed (decode.txt)"
  elif [ "$budget" -lt 10 ]; then
    record decode FAILED "$started" "not run: out of time"
  else
    limited "$budget" "$out/decode.txt" "$bin/bench_decode" --model "$work/$decode_model" \
      --device="$bench_device" --steps=32 --prompt_tokens=16 --batch=1,8,32 \
      --profile --profile_steps=4
    rc=$?
    grep -E '^bench_decode|^ *batch|^(none|fp8) +median|^ +[0-9]+ |speedup|^profile' "$out/decode.txt"
    if [ "$rc" -eq 0 ] && [ "$decode_model" != "$decode_preset" ]; then
      record decode FAILED "$started" "make-model $decode_preset failed; measured on $decode_model instead"
    elif [ "$rc" -eq 0 ]; then
      record decode PASSED "$started" "$decode_model, $(grep -c 'speedup over none' "$out/decode.txt") batch sizes"
    else
      tail -n 5 "$out/decode.txt"
      record decode FAILED "$started" "bench_decode exit $rc$([ "$rc" -eq 124 ] && echo ", timed out after $budget s")"
    fi
  fi
fi
# The decode model (14.5 GB for mistral-7b) is no longer needed.
[ "$serving_preset" != "$decode_preset" ] && rm -rf "${work:?}/$decode_preset"

# ---------------------------------------------------------------- serving
started=$SECONDS
echo "== serving: bench_serving on $serving_preset, TP=1"
if [ -z "$bench_device" ]; then
  record serving FAILED "$started" "not run: no usable GPU"
elif ! wait_model "$serving_preset" >> "$out/serving.txt" 2>&1; then
  tail -n 3 "$out/serving.txt"
  record serving FAILED "$started" "octet make-model --preset $serving_preset failed (serving.txt)"
else
  budget=$(limit_before 0)
  if [ "$budget" -lt 10 ]; then
    record serving FAILED "$started" "not run: out of time"
  else
    limited "$budget" "$out/serving.txt" "$bin/bench_serving" --model "$work/$serving_preset" \
      --device="$bench_device" --tp=1 --requests=16 --rate=4 --prompt_tokens=128 \
      --output_tokens=32 --rounds=2
    rc=$?
    grep -E '^bench_serving|^ *round|^config|^(none|fp8) TP|speedup|per round' "$out/serving.txt"
    if [ "$rc" -eq 0 ]; then
      record serving PASSED "$started" "$(grep -m 1 'speedup over none' "$out/serving.txt" | sed 's/.*all rounds: //')"
    else
      tail -n 5 "$out/serving.txt"
      record serving FAILED "$started" "bench_serving exit $rc$([ "$rc" -eq 124 ] && echo ", timed out after $budget s")"
    fi
  fi
fi

finish 0
