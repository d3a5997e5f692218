#!/usr/bin/env bash
# Remote workers on separate hosts, as Kubernetes runs them (multi-node
# overlay): three network namespaces on a bridge stand for the coordinator's
# host and two workers' hosts, each with its own address. The workers listen
# on 0.0.0.0 with the shared token; the coordinator reaches them with
# --workers, and they reach its rendezvous store (sent as a wildcard
# address: each must dial the coordinator's address, not its own) and each
# other over Gloo (--host). Passes when a generate request through the
# coordinator returns its tokens.
#
#   remote_hosts_test.sh BIN_DIR
#
# Needs root and iproute2 (network namespaces); without them it exits 77,
# which ctest reports as skipped.
set -euo pipefail
bin="$1"
[ "$(id -u)" -eq 0 ] && command -v ip >/dev/null || {
  echo "remote_hosts_test: needs root and iproute2: skipped"
  exit 77
}
tag="o$$"
work="$(mktemp -d)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  for i in 1 2 3; do ip netns del "$tag$i" 2>/dev/null || true; done
  ip link del "${tag}br" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

if ! ip link add "${tag}br" type bridge 2>/dev/null; then
  echo "remote_hosts_test: cannot make network namespaces here: skipped"
  exit 77
fi
ip link set "${tag}br" up
for i in 1 2 3; do
  ip netns add "$tag$i"
  ip link add "${tag}v$i" type veth peer name eth0 netns "$tag$i"
  ip link set "${tag}v$i" master "${tag}br" up
  # (The bridge has no address: these never meet another run's.)
  ip -n "$tag$i" addr add "10.77.0.1$i/24" dev eth0
  ip -n "$tag$i" link set eth0 up
  ip -n "$tag$i" link set lo up
done
addr() { ip -n "$tag$1" -4 -o addr show eth0 | awk '{print $4}' | cut -d/ -f1; }
coordinator_ip="$(addr 1)"
w0="$(addr 2)"
w1="$(addr 3)"

"$bin/octet" make-model --preset tiny --out "$work/model" >/dev/null
echo "remote-hosts-token" >"$work/token"
chmod 600 "$work/token"
ip netns exec "${tag}2" "$bin/worker" --listen 0.0.0.0:50061 \
  --token_file "$work/token" --host "$w0" >"$work/w0.log" 2>&1 &
pids+=($!)
ip netns exec "${tag}3" "$bin/worker" --listen 0.0.0.0:50061 \
  --token_file "$work/token" --host "$w1" >"$work/w1.log" 2>&1 &
pids+=($!)
ip netns exec "${tag}1" "$bin/coordinator" --model "$work/model" --tp 2 \
  --quantization fp8 --device cpu --workers "$w0:50061,$w1:50061" \
  --token_file "$work/token" --rendezvous_port 50060 --port 50051 \
  >"$work/coordinator.log" 2>&1 &
pids+=($!)

deadline=$((SECONDS + 60))
while [ "$SECONDS" -lt "$deadline" ]; do
  if ip netns exec "${tag}1" timeout 20 "$bin/octet" generate \
       --server 127.0.0.1:50051 --prompt_ids 1,17,33 --max_tokens 8 \
       >"$work/out.txt" 2>&1; then
    cat "$work/out.txt"
    grep -q "8 generated tokens" "$work/out.txt" || {
      echo "remote_hosts_test: unexpected answer" >&2
      exit 1
    }
    echo "remote_hosts_test: coordinator $coordinator_ip, workers $w0 and $w1: served"
    exit 0
  fi
  sleep 0.2
done
echo "remote_hosts_test: no answer within 60 s" >&2
for f in coordinator w0 w1; do
  echo "--- $f.log" >&2
  tail -20 "$work/$f.log" >&2
done
exit 1
