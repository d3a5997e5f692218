#!/usr/bin/env bash
# Installs the Debian packages octet builds against, and only those missing.
# Used by `make` (deps target), CI (.ci/run via make test) and, later, the
# container build, so that every build starts from the same package list.
#
# The CUDA toolkit is not a Debian package: when present (nvcc on PATH or in
# /usr/local/cuda) the CUDA backend is built, otherwise it is left out.
set -euo pipefail

packages=(
  build-essential   # g++, make
  cmake
  ninja-build
  pkg-config
  libabsl-dev       # absl::Status, flags, strings, containers
  libgtest-dev      # GoogleTest
  libgmock-dev
  nlohmann-json3-dev      # config.json, safetensors headers
  libsentencepiece-dev    # tokenizer (and training the synthetic one)
  libgloo-dev             # CPU collectives (parallel/)
  libprotobuf-dev         # gRPC protos (proto/)
  protobuf-compiler
  libgrpc++-dev
  protobuf-compiler-grpc
  python3-grpcio          # the Python client example (examples/python)
  python3-protobuf
  clang                   # libFuzzer targets (tests/fuzz)
  libclang-rt-14-dev      # libFuzzer and sanitizer runtimes for clang 14
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" \
    || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
