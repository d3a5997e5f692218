#!/bin/sh
# bench_once.sh [--model OCTET] [--expect ERE]... -- PROGRAM [ARGS...]
# Runs PROGRAM once and shows its output. Fails when it exits non-zero or
# when an --expect pattern (grep -E) matches no line of its output; exits
# 77 when PROGRAM does (it could not run on this machine: ctest's
# SKIP_RETURN_CODE counts that as skipped). With
# --model, first makes the tiny preset with OCTET in a temporary folder and
# adds --model=DIR to the arguments. Used by tests/bench/CMakeLists.txt.
set -u
octet=""
work="$(mktemp -d)" || exit 1
trap 'rm -rf "$work"' EXIT
: >"$work/expect"
while [ $# -gt 0 ]; do
  case "$1" in
    --model) octet="$2"; shift 2 ;;
    --expect) printf '%s\n' "$2" >>"$work/expect"; shift 2 ;;
    --) shift; break ;;
    *) echo "bench_once.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[ $# -gt 0 ] || { echo "bench_once.sh: no program" >&2; exit 2; }
if [ -n "$octet" ]; then
  "$octet" make-model --preset tiny --out "$work/model" >/dev/null || exit 1
  set -- "$@" "--model=$work/model"
fi
"$@" >"$work/out" 2>&1
code=$?
cat "$work/out"
if [ "$code" -eq 77 ]; then
  echo "bench_once.sh: $1 could not run here (exit 77): skipped" >&2
  exit 77
fi
if [ "$code" -ne 0 ]; then
  echo "bench_once.sh: $1 exited with $code" >&2
  exit 1
fi
while IFS= read -r pattern; do
  if ! grep -Eq -- "$pattern" "$work/out"; then
    echo "bench_once.sh: no line of the output matches '$pattern'" >&2
    exit 1
  fi
done <"$work/expect"
