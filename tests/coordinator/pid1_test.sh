#!/usr/bin/env bash
# The coordinator as a container runs it: PID 1 of its own PID namespace,
# with the command of deploy/docker/Dockerfile's CMD and of the manifests
# (--model, --port, --metrics_port; --tp 2 --quantization fp8 as the cpu
# overlay). Its spawned workers must load and serve, although their parent
# is PID 1, and the whole namespace must end on SIGTERM.
#
#   pid1_test.sh BIN_DIR
#
# Skips (exit 77) where PID namespaces cannot be made (no root, no unshare).
set -euo pipefail
bin="$1"
work="$(mktemp -d)"
ns=""
cleanup() {
  [ -n "$ns" ] && kill -KILL "$ns" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

if ! command -v unshare >/dev/null || ! unshare --pid --fork --mount-proc true 2>/dev/null; then
  echo "pid1_test: cannot make a PID namespace here: skipped"
  exit 77
fi

"$bin/octet" make-model --preset tiny --out "$work/model" >/dev/null
port="$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
# exec: the coordinator itself is PID 1 of the namespace, as in a container.
unshare --pid --fork --mount-proc \
  sh -c 'echo "pid in namespace: $$" >&2; exec "$0" "$@"' \
  "$bin/coordinator" --model="$work/model" --port="$port" --metrics_port=0 \
  --tp=2 --quantization=fp8 --device=cpu --threads=1 \
  2>"$work/coordinator.log" &
ns=$!

# A request waits in the queue while no worker group is loaded: each try
# gets 10 s, all of them 40 s.
served=0
deadline=$((SECONDS + 40))
while [ "$SECONDS" -lt "$deadline" ]; do
  if timeout 10 "$bin/octet" generate --server "127.0.0.1:$port" \
       --prompt_ids 1,17,33 --max_tokens 4 >"$work/out" 2>&1; then
    served=1
    break
  fi
  sleep 0.2
done
cat "$work/coordinator.log" >&2
grep -q "pid in namespace: 1" "$work/coordinator.log" || {
  echo "pid1_test: the coordinator was not PID 1" >&2; exit 1; }
if [ "$served" -ne 1 ]; then
  echo "pid1_test: no answer within 40 s" >&2
  cat "$work/out" >&2
  exit 1
fi
cat "$work/out"

# SIGTERM to PID 1 (from outside: the unshare process forwards nothing, so
# signal the namespace's init through its host pid).
init="$(pgrep -P "$ns" -f "$bin/coordinator" | head -n 1)"
[ -n "$init" ] || { echo "pid1_test: coordinator pid not found" >&2; exit 1; }
kill -TERM "$init"
for _ in $(seq 1 100); do
  kill -0 "$ns" 2>/dev/null || break
  sleep 0.1
done
if kill -0 "$ns" 2>/dev/null; then
  echo "pid1_test: still running 10 s after SIGTERM" >&2
  exit 1
fi
wait "$ns" || { echo "pid1_test: the coordinator exited with $?" >&2; exit 1; }
ns=""
echo "pid1_test: served as PID 1 and ended on SIGTERM"
