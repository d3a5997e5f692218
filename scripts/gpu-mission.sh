#!/usr/bin/env bash
# The mission, run as a user runs it (a step of gpu-check.sh): the README's
# command `coordinator --model DIR --tp 2 --quantization fp8` (on the GPU
# with `--gpus 0,0`: both ranks on GPU 0, their collectives staged through
# shared memory), asked through `octet generate --server` for greedy
# tokens, against TP = 1 on the same device; FP8 and unquantized.
#
#   gpu-mission.sh BIN_DIR MODEL_DIR DEVICE     (DEVICE: cuda or cpu)
#
# Prints every configuration's token ids, then one line per method:
#   mission MODEL fp8: tp=2 == tp=1 (32 tokens)     or   ... DIFFER at token N
# Exits 0 when TP = 2 gave TP = 1's tokens for both methods, 1 otherwise
# (a server that did not answer counts as a difference), 2 on bad usage.
set -uo pipefail

if [ "$#" -ne 3 ] || { [ "$3" != cuda ] && [ "$3" != cpu ]; }; then
  echo "usage: gpu-mission.sh BIN_DIR MODEL_DIR cuda|cpu" >&2
  exit 2
fi
bin=$1 model=$2 device=$3
name=$(basename "$model")
prompt=1,17,33,90,5,200,311,42  # ids every preset's vocabulary has
tokens=32
log_dir=$(mktemp -d "${TMPDIR:-/tmp}/gpu-mission.XXXXXX") || exit 2
server=""
trap '[ -n "$server" ] && kill -KILL "$server" 2> /dev/null; rm -rf "$log_dir"' EXIT

# A TCP port nothing listens on (the kernel's choice when python3 is there).
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2> /dev/null ||
    echo $((20000 + RANDOM % 10000))
}

# Serves MODEL with the coordinator flags given, asks it for the greedy
# tokens (waiting up to 120 s for it to serve) and prints their ids, or
# nothing when it did not answer.
greedy_ids() {
  local port log out="" i
  port=$(free_port)
  log="$log_dir/$(echo "$*" | tr -c 'a-z0-9=\n' _).log"
  "$bin/coordinator" --model "$model" --port "$port" --device "$device" \
    "$@" > "$log" 2>&1 &
  server=$!
  for ((i = 0; i < 240; i++)); do
    if out=$("$bin/octet" generate --server "127.0.0.1:$port" \
      --prompt_ids "$prompt" --max_tokens "$tokens" --temperature 0 \
      --ignore_eos --print_ids 2>> "$log"); then
      break
    fi
    out=""
    kill -0 "$server" 2> /dev/null || break
    sleep 0.5
  done
  kill -TERM "$server" 2> /dev/null
  wait "$server" 2> /dev/null
  server=""
  if [ -z "$out" ]; then
    echo "gpu-mission: coordinator $* did not answer; its log:" >&2
    tail -n 5 "$log" >&2
  fi
  sed -n 's/^ids: //p' <<< "$out"
}

gpus=()
[ "$device" = cuda ] && gpus=(--gpus 0,0)
failed=0
for method in fp8 none; do
  one=$(greedy_ids --tp 1 --quantization "$method")
  two=$(greedy_ids --tp 2 "${gpus[@]}" --quantization "$method")
  echo "$name $method tp=1 on $device: ${one:-(no answer)}"
  echo "$name $method tp=2 on $device${gpus[*]:+ (${gpus[*]})}: ${two:-(no answer)}"
  if [ -n "$one" ] && [ "$one" = "$two" ]; then
    echo "mission $name $method: tp=2 == tp=1 ($tokens tokens)"
  else
    IFS=, read -r -a a <<< "$one"
    IFS=, read -r -a b <<< "$two"
    at=0
    while [ "$at" -lt "${#a[@]}" ] && [ "${a[$at]}" = "${b[$at]:-}" ]; do
      at=$((at + 1))
    done
    echo "mission $name $method: tp=2 DIFFER from tp=1 at token $at"
    failed=1
  fi
done
exit "$failed"
