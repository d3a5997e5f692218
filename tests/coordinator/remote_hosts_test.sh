#!/usr/bin/env bash
# Remote workers on separate hosts, as Kubernetes runs them (multi-node
# overlay): three network namespaces on a bridge stand for the coordinator's
# host and two workers' hosts, each with its own address. The workers listen
# on 0.0.0.0 with the shared token; the coordinator reaches them with
# --workers, and they reach its rendezvous store (sent as a wildcard
# address: each must dial the coordinator's address, not its own) and each
# other over Gloo (--host). Then the coordinator is killed (-9) and a new
# one started: the loaded workers exit at its first Load, a supervisor loop
# (Kubernetes' part) restarts them, and the new coordinator's next attempt
# loads them. Passes when a generate request returns its tokens through
# each coordinator.
#
# With --tls, every link takes TLS, with certificates made for this run
# (make_test_certs.sh: a CA and one certificate naming the three hosts'
# addresses): the API (--tls_cert; a plaintext client is refused), the
# workers (--tls_*: mutual TLS, the token never in clear text) and the
# rendezvous store they dial back (verified against the coordinator's
# address).
#
#   remote_hosts_test.sh BIN_DIR [--tls]
#
# Needs root and iproute2 (network namespaces); without them it exits 77,
# which ctest reports as skipped.
set -euo pipefail
bin="$1"
tls="${2:-}"
here="$(cd "$(dirname "$0")" && pwd)"
[ "$(id -u)" -eq 0 ] && command -v ip >/dev/null || {
  echo "remote_hosts_test: needs root and iproute2: skipped"
  exit 77
}
tag="o$$"
work="$(mktemp -d)"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for i in 1 2 3; do  # whatever still runs on the "hosts"
    ip netns pids "$tag$i" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
  done
  wait 2>/dev/null || true
  for i in 1 2 3; do ip netns del "$tag$i" 2>/dev/null || true; done
  ip link del "${tag}br" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 143' TERM INT  # (ctest's timeout) so that cleanup still runs

if ! ip netns add "${tag}1" 2>/dev/null ||
   ! ip link add "${tag}br" type bridge 2>/dev/null; then
  echo "remote_hosts_test: cannot make network namespaces here: skipped"
  exit 77
fi
ip link set "${tag}br" up
for i in 1 2 3; do
  [ "$i" -eq 1 ] || ip netns add "$tag$i"
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
worker_tls=()
coordinator_tls=()
client_tls=()
if [ "$tls" = "--tls" ]; then
  "$here/make_test_certs.sh" "$work/certs" "$coordinator_ip" "$w0" "$w1"
  c="$work/certs"
  worker_tls=(--tls_cert "$c/server.pem" --tls_key "$c/server.key" --tls_ca "$c/ca.pem")
  # Its API certificate is also the one it shows the workers.
  coordinator_tls=(--tls_cert "$c/server.pem" --tls_key "$c/server.key"
                   --worker_tls_ca "$c/ca.pem")
  client_tls=(--tls_ca "$c/ca.pem")
fi
# Each worker under a supervisor that restarts it when it exits.
supervise() {  # NAMESPACE HOST LOG
  while :; do
    ip netns exec "$1" "$bin/worker" --listen 0.0.0.0:50061 \
      --token_file "$work/token" --host "$2" ${worker_tls[@]+"${worker_tls[@]}"} \
      >>"$3" 2>&1 || true
    sleep 0.2
  done
}
supervise "${tag}2" "$w0" "$work/w0.log" &
pids+=($!)
supervise "${tag}3" "$w1" "$work/w1.log" &
pids+=($!)

start_coordinator() {  # LOG
  ip netns exec "${tag}1" "$bin/coordinator" --model "$work/model" --tp 2 \
    --quantization fp8 --device cpu --workers "$w0:50061,$w1:50061" \
    --token_file "$work/token" --rendezvous_port 50060 --port 50051 \
    ${coordinator_tls[@]+"${coordinator_tls[@]}"} >"$1" 2>&1 &
  coordinator=$!
  pids+=($coordinator)
}

# Until a request through the coordinator gets its 8 tokens (60 s).
served() {  # LOG
  local deadline=$((SECONDS + 60))
  while [ "$SECONDS" -lt "$deadline" ]; do
    if ip netns exec "${tag}1" timeout 20 "$bin/octet" generate \
         --server 127.0.0.1:50051 --prompt_ids 1,17,33 --max_tokens 8 \
         ${client_tls[@]+"${client_tls[@]}"} >"$work/out.txt" 2>&1; then
      cat "$work/out.txt"
      grep -q "8 generated tokens" "$work/out.txt" && return 0
      echo "remote_hosts_test: unexpected answer" >&2
      return 1
    fi
    sleep 0.2
  done
  echo "remote_hosts_test: no answer within 60 s" >&2
  for f in "$1" "$work/w0.log" "$work/w1.log"; do
    echo "--- $f" >&2
    tail -20 "$f" >&2
  done
  return 1
}

start_coordinator "$work/coordinator1.log"
served "$work/coordinator1.log"
echo "remote_hosts_test: coordinator $coordinator_ip, workers $w0 and $w1: served"
if [ "$tls" = "--tls" ]; then
  if ip netns exec "${tag}1" timeout 20 "$bin/octet" generate \
       --server 127.0.0.1:50051 --prompt_ids 1 --max_tokens 1 >/dev/null 2>&1; then
    echo "remote_hosts_test: a plaintext client was served by a TLS API" >&2
    exit 1
  fi
  grep -q "listening on 0.0.0.0:50061 (mutual TLS)" "$work/w0.log" || {
    echo "remote_hosts_test: worker 0 does not say it takes mutual TLS" >&2
    exit 1
  }
  ! grep -q "clear text" "$work/coordinator1.log" "$work/w0.log" || {
    echo "remote_hosts_test: a program warns of clear text under TLS" >&2
    exit 1
  }
  echo "remote_hosts_test: TLS on every link; a plaintext client refused"
else
  grep -q "token crosses the network in clear text" "$work/coordinator1.log" || {
    echo "remote_hosts_test: no clear-text warning without TLS" >&2
    exit 1
  }
fi

kill -9 "$coordinator"
wait "$coordinator" 2>/dev/null || true
start=$SECONDS
start_coordinator "$work/coordinator2.log"
served "$work/coordinator2.log"
grep -q "fresh one can join" "$work/coordinator2.log" || {
  echo "remote_hosts_test: the new coordinator did not meet the old group" >&2
  exit 1
}
echo "remote_hosts_test: a new coordinator served after $((SECONDS - start)) s" \
  "(the workers of the old group exited and were restarted)"
