#!/usr/bin/env bash
# The Python client example (examples/python/client.py) against a running
# coordinator (tiny preset, TP = 2, FP8), unary and streaming, with Debian's
# python3-grpcio. Fails, never skips, when something is missing.
#   python_client_test.sh BIN_DIR PYTHON_STUBS_DIR EXAMPLE
set -euo pipefail
bin="$1"; stubs="$2"; example="$3"
python=/usr/bin/python3  # Debian's, with python3-grpcio (not a pyenv one)
work="$(mktemp -d)"
server=""
cleanup() {
  [ -n "$server" ] && kill -TERM "$server" 2>/dev/null && wait "$server" || true
  rm -rf "$work"
}
trap cleanup EXIT

"$bin/octet" make-model --preset tiny --out "$work/tiny" >/dev/null
port="$("$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
"$bin/coordinator" --model "$work/tiny" --tp 2 --quantization fp8 \
  --device cpu --threads 1 --kv_cache_tokens 2048 --port "$port" \
  2>"$work/coordinator.log" &
server=$!
for _ in $(seq 1 300); do
  if "$bin/octet" generate --server "127.0.0.1:$port" --prompt_ids 1 \
       --max_tokens 1 >/dev/null 2>&1; then break; fi
  sleep 0.2
done

for mode in "" "--stream"; do
  PYTHONPATH="$stubs" "$python" "$example" --server "127.0.0.1:$port" \
    --prompt-ids 1,17,33 --max-new-tokens 8 $mode >"$work/out" 2>"$work/err"
  cat "$work/err"
  grep -q "model tiny (LlamaForCausalLM), fp8, TP=2" "$work/err"
  grep -q "finish_reason FINISH_REASON_LENGTH, 8 tokens" "$work/err"
done
# A bad request comes back as the API's error, naming the field.
if PYTHONPATH="$stubs" "$python" "$example" --server "127.0.0.1:$port" \
     --prompt-ids 1,99999 >/dev/null 2>"$work/err"; then
  echo "a bad token id was accepted" >&2; exit 1
fi
grep -q "INVALID_ARGUMENT: input.token_ids\[1\]" "$work/err"
echo "python client: OK"
