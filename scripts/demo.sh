#!/usr/bin/env bash
# The README's first command (`make run`): serves a model with
#   coordinator --tp 2 --quantization fp8
# in the foreground, sends it one streaming request once it serves, so that
# the tokens can be seen arriving, and keeps serving until Ctrl-C.
#
# The model is the tiny synthetic preset (random weights: the text is
# gibberish), made on first run; MODEL=DIR serves another one, PORT=N
# another port.
set -euo pipefail

bin="${BUILD_DIR:-build}/bin"
model="${MODEL:-${BUILD_DIR:-build}/demo-model}"
port="${PORT:-50051}"

if [ ! -f "$model/config.json" ]; then
  "$bin/octet" make-model --preset tiny --out "$model"
fi

"$bin/coordinator" --model "$model" --tp 2 --quantization fp8 --port "$port" &
server=$!
trap 'kill -INT "$server" 2>/dev/null; wait "$server" 2>/dev/null || true' EXIT

for _ in $(seq 1 600); do
  if ! kill -0 "$server" 2>/dev/null; then
    echo "demo: the coordinator exited" >&2
    exit 1
  fi
  if "$bin/octet" generate --server "127.0.0.1:$port" --prompt_ids 1 \
       --max_tokens 1 >/dev/null 2>&1; then
    break
  fi
  sleep 0.2
done

echo "demo: octet generate --server 127.0.0.1:$port --prompt 'Once upon a time' --stream"
"$bin/octet" generate --server "127.0.0.1:$port" --prompt "Once upon a time" \
  --max_tokens 48 --temperature 0.8 --stream
echo "demo: still serving on port $port (try the command above); Ctrl-C stops it"
wait "$server"
