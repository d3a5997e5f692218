#!/usr/bin/env bash
# serving_peers.sh: octet's server against llama.cpp's `llama-server` on
# the same GGUF, under the same client workload, side by side. A benchmark
# for people, never run by CI (it builds llama.cpp and takes tens of
# minutes).
#
#   tests/bench/serving_peers.sh [--rounds 2] [--concurrency "1 8 32"]
#       [--prompts 32] [--input 256] [--output 64] [--threads 2]
#       [--servers "octet-fp8 octet-none llama-q8_0 llama-bf16"]
#       [--octet_flags "..."] [--prefix] [--cache .cache/llama.cpp]
#       [--bin build/bin]
#
# Once, into --cache: llama.cpp's tree from the llama-cpp-python sdist on
# PyPI (pinned by hash, as tests/bench/llama_cpp_peer.sh takes it), its
# llama-server and llama-quantize built with their defaults (Release,
# native CPU); SmolLM2-135M-Instruct (scripts/fetch-smollm2.sh, a Q4_1
# GGUF) requantized by llama-quantize to BF16, and from that to Q8_0. Every
# server then serves weights from the BF16 file: octet unquantized (none)
# and FP8 (quantized at load), llama.cpp BF16 and Q8_0. The server
# octet-fp8-nocache is octet FP8 with --noprefix_caching, to measure the
# prefix cache against.
# The client is vLLM's `vllm bench serve` (its code, vllm.benchmarks.serve,
# in the virtualenv tests/pypi_venv.sh's pypi_venv_over makes): random
# prompts of --input tokens, --output tokens each with ignore_eos,
# --prompts requests at each --concurrency, on /v1/completions, streamed.
# Each round starts each server in turn (the order reversed in even rounds,
# so that a drift of the shared machine favours nobody), runs every
# concurrency against it, and stops it. With --prefix, each server also
# gets vLLM's shared-prefix workload (--dataset-name prefix_repetition: 4
# prefixes of --input tokens, suffixes of 64) at the middle concurrency.
#
# It prints each run's output tokens/s, TTFT median and ITL median and p99,
# and per concurrency the median over rounds with the spread (min-max), then
# the ratios octet FP8 / llama.cpp Q8_0, octet FP8 / llama.cpp BF16 and
# octet none / llama.cpp BF16 of output tokens/s, taken round by round,
# and with octet-fp8-nocache the TTFT ratio octet-fp8 / octet-fp8-nocache.
# llama-server runs with -t THREADS --parallel (the largest concurrency)
# and a context of that many sequences; octet with --threads THREADS.
set -euo pipefail

readonly LLAMA_CPP_PYTHON=0.3.36
readonly SDIST_SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e

rounds=2
concurrency="1 8 32"
prompts=32
input=256
output=64
threads=2
servers="octet-fp8 octet-none llama-q8_0 llama-bf16"
octet_flags=""
prefix=false
cache=.cache/llama.cpp
bin=build/bin
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds="$2"; shift 2 ;;
    --concurrency) concurrency="$2"; shift 2 ;;
    --prompts) prompts="$2"; shift 2 ;;
    --input) input="$2"; shift 2 ;;
    --output) output="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --servers) servers="$2"; shift 2 ;;
    --octet_flags) octet_flags="$2"; shift 2 ;;
    --prefix) prefix=true; shift ;;
    --cache) cache="$2"; shift 2 ;;
    --bin) bin="$2"; shift 2 ;;
    *) echo "serving_peers: unknown argument $1" >&2; exit 2 ;;
  esac
done
for n in "$rounds" "$prompts" "$input" "$output" "$threads" $concurrency; do
  case "$n" in ''|*[!0-9]*|0)
    echo "serving_peers: counts must be positive integers, not '$n'" >&2
    exit 2 ;;
  esac
done
for s in $servers; do
  case "$s" in octet-fp8|octet-none|octet-fp8-nocache|llama-q8_0|llama-bf16) ;;
    *) echo "serving_peers: unknown server $s" >&2; exit 2 ;;
  esac
done
[ -x "$bin/coordinator" ] || { echo "serving_peers: no $bin/coordinator (make build)" >&2; exit 2; }
root="$(cd "$(dirname "$0")/../.." && pwd)"
mkdir -p "$cache"
cache="$(cd "$cache" && pwd)"
bin="$(cd "$bin" && pwd)"
say() { echo "serving_peers: $*" >&2; }
most=0
for c in $concurrency; do [ "$c" -gt "$most" ] && most="$c"; done

# ------------------------------------------------------------ llama.cpp
tree="$cache/llama_cpp_python-$LLAMA_CPP_PYTHON/vendor/llama.cpp"
server="$tree/build-server/bin/llama-server"
quantize="$tree/build-server/bin/llama-quantize"
if [ ! -x "$server" ] || [ ! -x "$quantize" ]; then
  sdist="$cache/llama_cpp_python-$LLAMA_CPP_PYTHON.tar.gz"
  if [ ! -f "$sdist" ]; then
    say "downloading llama-cpp-python $LLAMA_CPP_PYTHON (sdist) from PyPI"
    python3 -m pip download --quiet --disable-pip-version-check --no-deps \
      --no-binary :all: "llama-cpp-python==$LLAMA_CPP_PYTHON" -d "$cache" >&2
  fi
  echo "$SDIST_SHA256  $sdist" | sha256sum --check --quiet ||
    { echo "serving_peers: $sdist is not the pinned sdist (sha256)" >&2; exit 1; }
  [ -d "$tree" ] || tar xzf "$sdist" -C "$cache"
  say "building llama-server and llama-quantize in $tree/build-server (minutes)"
  cmake -S "$tree" -B "$tree/build-server" -DCMAKE_BUILD_TYPE=Release \
    -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=ON \
    -DBUILD_SHARED_LIBS=OFF > "$cache/cmake-server.log"
  cmake --build "$tree/build-server" --target llama-server llama-quantize \
    -j "$(nproc)" > "$cache/build-server.log"
fi

# ------------------------------------------------------------ the model
q4="$("$root/scripts/fetch-smollm2.sh")"
models="$cache/models"
mkdir -p "$models"
bf16="$models/SmolLM2-135M-Instruct-bf16.gguf"
q8="$models/SmolLM2-135M-Instruct-q8_0.gguf"
[ -s "$bf16" ] || "$quantize" --allow-requantize "$q4" "$bf16" BF16 \
  > "$cache/quantize-bf16.log" 2>&1
[ -s "$q8" ] || "$quantize" --allow-requantize "$bf16" "$q8" Q8_0 \
  > "$cache/quantize-q8_0.log" 2>&1

# ------------------------------------------------------------ the client
venvs="$root/.venvs"
work="$(mktemp -d)"
pid=""
stop_server() {
  if [ -n "$pid" ]; then
    kill -TERM "$pid" 2> /dev/null || true
    wait "$pid" 2> /dev/null || true
    pid=""
  fi
}
trap 'stop_server; rm -rf "$work"' EXIT
. "$root/tests/pypi_venv.sh"
pypi_venv torch "$venvs/torch" "$work/pip.log" "${TORCH_ORACLE_PINS[@]}"
pypi_venv_over vllm_bench "$venvs/vllm-bench" "$venvs/torch" "$work/pip.log" \
  "${VLLM_BENCH_NODEPS[@]}" "${VLLM_BENCH_PINS[@]}"
gguf_tokenizer_dir serving_peers "$venvs/torch" "$q4" "$work/tokenizer"
cat > "$work/bench.py" <<'PY'
import sys
from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = FlexibleArgumentParser()
add_cli_args(parser)
main(parser.parse_args(sys.argv[1:]))
PY

port=18611
start_server() {
  local log="$work/$1-server.log"
  case "$1" in
    octet-*)
      local quantization="${1#octet-}" more=""
      if [ "$1" = octet-fp8-nocache ]; then
        quantization=fp8 more=--noprefix_caching
      fi
      # shellcheck disable=SC2086
      "$bin/coordinator" --model "$bf16" --tp 1 --device cpu \
        --quantization "$quantization" --threads "$threads" \
        --http_port "$port" --port $((port + 1)) --served_model_name smollm2 \
        $more $octet_flags > "$log" 2>&1 & ;;
    llama-*)
      local file="$bf16"
      [ "$1" = llama-q8_0 ] && file="$q8"
      "$server" -m "$file" -t "$threads" --parallel "$most" \
        -c $((most * (input + output + 64))) --port "$port" \
        --host 127.0.0.1 --alias smollm2 > "$log" 2>&1 & ;;
  esac
  pid=$!
  for _ in $(seq 1 300); do
    curl -sf "http://127.0.0.1:$port/health" > /dev/null && return 0
    kill -0 "$pid" 2> /dev/null || break
    sleep 1
  done
  tail -5 "$log" >&2
  say "$1 did not come up"
  exit 1
}
# The prompts' seed differs by round and concurrency: a run that repeated
# the prompts of an earlier one would find them in a server's prefix cache.
run_client() {  # server round concurrency dataset
  local name="$1-r$2-c$3-$4" extra=()
  if [ "$4" = prefix ]; then
    extra=(--dataset-name prefix_repetition --prefix-repetition-prefix-len "$input"
           --prefix-repetition-suffix-len 64 --prefix-repetition-num-prefixes 4
           --prefix-repetition-output-len "$output")
  else
    extra=(--dataset-name random --random-input-len "$input"
           --random-output-len "$output")
  fi
  "$venvs/vllm-bench/bin/python" "$work/bench.py" --backend openai \
    --base-url "http://127.0.0.1:$port" --endpoint /v1/completions \
    --model smollm2 --tokenizer "$work/tokenizer" "${extra[@]}" --ignore-eos \
    --num-prompts "$prompts" --max-concurrency "$3" --seed "$(( $2 * 1000 + $3 ))" \
    --save-result --result-dir "$work/results" --result-filename "$name.json" \
    > "$work/$name.log" 2>&1 ||
    { tail -5 "$work/$name.log" >&2; say "the client failed on $name"; exit 1; }
}

order=($servers)
for r in $(seq 1 "$rounds"); do
  list=("${order[@]}")
  if [ $((r % 2)) = 0 ]; then
    list=(); for ((i = ${#order[@]} - 1; i >= 0; i--)); do list+=("${order[$i]}"); done
  fi
  for s in "${list[@]}"; do
    say "round $r of $rounds: $s"
    start_server "$s"
    for c in $concurrency; do run_client "$s" "$r" "$c" random; done
    if $prefix; then
      set -- $concurrency
      mid=$(( $# / 2 + 1 ))
      run_client "$s" "$r" "${!mid}" prefix
    fi
    stop_server
  done
done

python3 - "$work/results" "$rounds" "$servers" "$concurrency" "$prefix" <<'PY'
import json, os, statistics, sys

results, rounds = sys.argv[1], int(sys.argv[2])
servers, conc = sys.argv[3].split(), [int(c) for c in sys.argv[4].split()]
prefix = sys.argv[5] == "true"

def load(s, r, c, d):
    return json.load(open(os.path.join(results, f"{s}-r{r}-c{c}-{d}.json")))

def spread(xs, fmt="{:.1f}"):
    return (fmt.format(statistics.median(xs)) +
            f" ({fmt.format(min(xs))}-{fmt.format(max(xs))})")

print("run                          out tok/s  TTFT med ms  ITL med ms  ITL p99 ms  failed")
sets = [("random", c) for c in conc]
if prefix:
    present = [c for c in conc
               if os.path.exists(os.path.join(results, f"{servers[0]}-r1-c{c}-prefix.json"))]
    sets += [("prefix", c) for c in present]
for d, c in sets:
    for s in servers:
        for r in range(1, rounds + 1):
            j = load(s, r, c, d)
            print(f"{s:11} {d:6} c={c:<3} r{r}  {j['output_throughput']:9.1f}  "
                  f"{j['median_ttft_ms']:11.0f}  {j['median_itl_ms']:10.1f}  "
                  f"{j['p99_itl_ms']:10.1f}  {j['failed']:6}")
print()
print("median over rounds (min-max)")
for d, c in sets:
    for s in servers:
        rs = [load(s, r, c, d) for r in range(1, rounds + 1)]
        print(f"{s:11} {d:6} c={c:<3}  out tok/s {spread([j['output_throughput'] for j in rs])}"
              f"  TTFT med ms {spread([j['median_ttft_ms'] for j in rs], '{:.0f}')}"
              f"  ITL med {spread([j['median_itl_ms'] for j in rs])}"
              f"  p99 {spread([j['p99_itl_ms'] for j in rs])}")
print()
print("output tokens/s ratios, round by round: median (min-max)")
for mine, theirs in (("octet-fp8", "llama-q8_0"), ("octet-fp8", "llama-bf16"),
                     ("octet-none", "llama-bf16")):
    if mine not in servers or theirs not in servers:
        continue
    for d, c in sets:
        ratios = [load(mine, r, c, d)["output_throughput"] /
                  load(theirs, r, c, d)["output_throughput"]
                  for r in range(1, rounds + 1)]
        print(f"{mine} / {theirs} {d:6} c={c:<3} {spread(ratios, '{:.2f}')}x")
if "octet-fp8" in servers and "octet-fp8-nocache" in servers:
    print()
    print("TTFT median ratios octet-fp8 / octet-fp8-nocache, round by round")
    for d, c in sets:
        ratios = [load("octet-fp8", r, c, d)["median_ttft_ms"] /
                  load("octet-fp8-nocache", r, c, d)["median_ttft_ms"]
                  for r in range(1, rounds + 1)]
        print(f"{d:6} c={c:<3} {spread(ratios, '{:.2f}')}x")
PY
