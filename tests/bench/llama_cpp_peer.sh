#!/usr/bin/env bash
# llama_cpp_peer.sh: octet against llama.cpp on one model, side by side, on
# the CPU. A benchmark for people, never run by CI (it builds llama.cpp).
#
#   tests/bench/llama_cpp_peer.sh --model DIR [--rounds 3] [--threads 2]
#                                 [--cache .cache/llama.cpp] [--bin build/bin]
#
# DIR is a Hugging Face checkpoint with a SentencePiece tokenizer, e.g.
# `octet make-model --preset llama-1b --out DIR`. Once, into --cache:
#   - llama.cpp from PyPI: the llama-cpp-python sdist (LLAMA_CPP_PYTHON, pinned
#     by hash) carries llama.cpp's tree in vendor/llama.cpp; its llama-bench
#     is built there with its defaults (Release, native CPU);
#   - DIR converted to GGUF by that tree's own convert_hf_to_gguf.py, BF16
#     and Q8_0 (with a python that has torch: PYTHON, else tests/bench/
#     torch_venv.sh's; its other imports, at that tree's pins, go into
#     --cache/pydeps).
# Then --rounds rounds, each measuring in turn prefill of 128 tokens
# (pp128), of 512 (pp512) and decode (tg64), each measure side by side:
#   llama-bench -p 128|512 -n 0 (or -p 0 -n 64) -r 1 -t THREADS on the BF16
#   and Q8_0 files;
#   bench_decode on DIR (unquantized and FP8 models loaded once per run):
#   3 prefills of 128 or 512 tokens (--prefill_reps), or 64 decode steps of
#   one sequence with a third model there: FP8 with its lm_head in FP8 too
#   (--quantize_lm_head, "fp8+head"; Q8_0 quantizes llama.cpp's output
#   tensor as well, octet's default keeps it bfloat16);
# llama.cpp first in odd rounds, octet first in even ones. A VM's memory
# bandwidth drifts from minute to minute (bench_decode read 32 GB/s and 54
# GB/s within three minutes on 2026-12-06), so each ratio takes two runs a
# minute apart, and the order alternates so that a drift favours neither.
# It prints each round's tokens/s and, per measure, the median over rounds
# of the ratios octet unquantized / llama.cpp BF16, octet FP8 / llama.cpp
# Q8_0, octet FP8 / llama.cpp BF16 and, for decode, octet fp8+head /
# llama.cpp Q8_0, with their spread (min-max).
#
# llama-bench's tg64 generates from an empty context; octet's decode steps
# follow a 16-token prompt. Both use THREADS threads.
set -euo pipefail

readonly LLAMA_CPP_PYTHON=0.3.36
readonly SDIST_SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e

model=""
rounds=3
threads=2
cache=.cache/llama.cpp
bin=build/bin
while [ $# -gt 0 ]; do
  case "$1" in
    --model) model="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --cache) cache="$2"; shift 2 ;;
    --bin) bin="$2"; shift 2 ;;
    *) echo "llama_cpp_peer: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -n "$model" ] && [ -f "$model/config.json" ] ||
  { echo "llama_cpp_peer: --model DIR: a Hugging Face checkpoint directory" >&2; exit 2; }
[ -f "$model/tokenizer.model" ] ||
  { echo "llama_cpp_peer: $model has no tokenizer.model (make it with octet make-model --tokenizer sentencepiece)" >&2; exit 2; }
case "$rounds$threads" in *[!0-9]*) echo "llama_cpp_peer: --rounds and --threads are counts" >&2; exit 2 ;; esac
[ -x "$bin/bench_decode" ] || { echo "llama_cpp_peer: no $bin/bench_decode (make build)" >&2; exit 2; }
mkdir -p "$cache"
cache="$(cd "$cache" && pwd)"
say() { echo "llama_cpp_peer: $*" >&2; }

# ------------------------------------------------------------ llama.cpp
python="${PYTHON:-}"
if [ -z "$python" ]; then
  python="$(tests/bench/torch_venv.sh)"
fi
tree="$cache/llama_cpp_python-$LLAMA_CPP_PYTHON/vendor/llama.cpp"
bench="$tree/build/bin/llama-bench"
if [ ! -x "$bench" ]; then
  sdist="$cache/llama_cpp_python-$LLAMA_CPP_PYTHON.tar.gz"
  if [ ! -f "$sdist" ]; then
    say "downloading llama-cpp-python $LLAMA_CPP_PYTHON (sdist) from PyPI"
    "$python" -m pip download --quiet --disable-pip-version-check --no-deps \
      --no-binary :all: "llama-cpp-python==$LLAMA_CPP_PYTHON" -d "$cache" >&2
  fi
  echo "$SDIST_SHA256  $sdist" | sha256sum --check --quiet ||
    { echo "llama_cpp_peer: $sdist is not the pinned sdist (sha256)" >&2; exit 1; }
  tar xzf "$sdist" -C "$cache"
  say "building llama-bench in $tree/build (a few minutes)"
  cmake -S "$tree" -B "$tree/build" -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DBUILD_SHARED_LIBS=OFF > "$cache/cmake.log"
  cmake --build "$tree/build" --target llama-bench -j "$(nproc)" > "$cache/build.log"
fi
name="$(basename "$model")"
pydeps="$cache/pydeps"
for type in bf16 q8_0; do
  gguf="$cache/models/$name-$type.gguf"
  if [ ! -f "$gguf" ] || [ "$gguf" -ot "$model/config.json" ]; then
    # The converter's imports beyond torch, at the tree's own pins
    # (requirements/requirements-convert_legacy_llama.txt), and gguf-py's
    # dependencies (pyproject.toml).
    [ -f "$pydeps/.installed" ] || {
      "$python" -m pip install --quiet --disable-pip-version-check --target "$pydeps" \
        'sentencepiece>=0.1.98,<0.3.0' 'transformers==4.57.6' \
        'protobuf>=4.21.0,<5.0.0' pyyaml tqdm requests >&2 &&
        touch "$pydeps/.installed"; }
    mkdir -p "$cache/models"
    say "converting $model to $type with llama.cpp's convert_hf_to_gguf.py"
    PYTHONPATH="$pydeps:$tree/gguf-py" "$python" "$tree/convert_hf_to_gguf.py" "$model" \
      --outtype "$type" --outfile "$gguf" > "$cache/convert-$type.log" 2>&1 ||
      { tail -5 "$cache/convert-$type.log" >&2; exit 1; }
  fi
done

# ------------------------------------------------------------ rounds
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
# llama.cpp's BF16 and Q8_0 runs of one measure (pp128, pp512 or tg64) in
# round $2.
llama_measure() {
  local shape
  case "$1" in
    pp*) shape=(-p "${1#pp}" -n 0) ;;
    tg*) shape=(-p 0 -n "${1#tg}") ;;
  esac
  for type in bf16 q8_0; do
    "$bench" -m "$cache/models/$name-$type.gguf" "${shape[@]}" -r 1 -t "$threads" \
      -o json > "$out/llama-$type-$1-$2.json" 2> "$out/llama-$type-$1-$2.err" ||
      { tail -5 "$out/llama-$type-$1-$2.err" >&2; say "llama-bench failed"; exit 1; }
  done
}
# octet's run of the same measure.
octet_measure() {
  local flags
  case "$1" in
    pp*) flags=(--prompt_tokens "${1#pp}" --prefill_reps 3 --steps 1) ;;
    tg*) flags=(--prompt_tokens 16 --steps "${1#tg}" --quantize_lm_head) ;;
  esac
  "$bin/bench_decode" --model "$model" --device cpu --threads "$threads" \
    --batch 1 "${flags[@]}" > "$out/octet-$1-$2.txt" 2>&1 ||
    { tail -5 "$out/octet-$1-$2.txt" >&2; say "bench_decode failed"; exit 1; }
}
for r in $(seq 1 "$rounds"); do
  say "round $r of $rounds ($([ $((r % 2)) = 1 ] && echo "llama.cpp" || echo "octet") first)"
  for measure in pp128 pp512 tg64; do
    if [ $((r % 2)) = 1 ]; then
      llama_measure "$measure" "$r"
      octet_measure "$measure" "$r"
    else
      octet_measure "$measure" "$r"
      llama_measure "$measure" "$r"
    fi
  done
done

"$python" - "$out" "$rounds" <<'EOF'
import json, re, statistics, sys

out, rounds = sys.argv[1], int(sys.argv[2])

MEASURES = ("pp128", "pp512", "tg64")

def llama(type_, r):
    """{"pp128": t/s, "pp512": t/s, "tg64": t/s} of one round's llama-bench
    runs, one per measure."""
    got = {}
    for measure in MEASURES:
        for t in json.load(open(f"{out}/llama-{type_}-{measure}-{r}.json")):
            key = f"pp{t['n_prompt']}" if t["n_gen"] == 0 else f"tg{t['n_gen']}"
            got[key] = t["avg_ts"]
    return got

def octet(r):
    """{"none": {...}, "fp8": {...}, "fp8+head": {...}} tokens/s of one
    round's bench_decode runs (fp8+head: decode only)."""
    got = {"none": {}, "fp8": {}, "fp8+head": {}}
    for p in (128, 512):
        for line in open(f"{out}/octet-pp{p}-{r}.txt"):
            m = re.match(r"(none|fp8) +prefill median .* = ([0-9.]+) tokens/s", line)
            if m:
                got[m.group(1)][f"pp{p}"] = float(m.group(2))
    for line in open(f"{out}/octet-tg64-{r}.txt"):
        m = re.match(r"(none|fp8|fp8\+head) +median .* = ([0-9.]+) tokens/s", line)
        if m:
            got[m.group(1)]["tg64"] = float(m.group(2))
    return got

rows = []
for r in range(1, rounds + 1):
    b, q, o = llama("bf16", r), llama("q8_0", r), octet(r)
    rows.append((b, q, o))
    for key in MEASURES:
        head = f"  fp8+head {o['fp8+head'][key]:8.1f}" if key in o["fp8+head"] else ""
        print(f"round {r} {key:5}  llama.cpp bf16 {b[key]:8.1f}  q8_0 {q[key]:8.1f}   "
              f"octet none {o['none'][key]:8.1f}  fp8 {o['fp8'][key]:8.1f}{head}  tokens/s")
print()
print(f"{'measure':8} {'none/bf16':>18} {'fp8/q8_0':>18} {'fp8/bf16':>18} "
      f"{'fp8+head/q8_0':>18}   (median of {rounds} rounds, min-max)")
for key in MEASURES:
    cells = []
    for mine, theirs in (("none", "bf16"), ("fp8", "q8_0"), ("fp8", "bf16"),
                         ("fp8+head", "q8_0")):
        if key not in rows[0][2][mine]:
            cells.append("-")
            continue
        ratios = [o[mine][key] / (b if theirs == "bf16" else q)[key] for b, q, o in rows]
        cells.append(f"{statistics.median(ratios):6.2f}x ({min(ratios):.2f}-{max(ratios):.2f})")
    print(f"{key:8} {cells[0]:>18} {cells[1]:>18} {cells[2]:>18} {cells[3]:>18}")
EOF
