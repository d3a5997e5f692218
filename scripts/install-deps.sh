#!/usr/bin/env bash
# Installs what octet builds and tests with, and only what is missing.
# Used by `make` (deps target), CI (.ci/run via make test) and the container
# build (deploy/docker/Dockerfile), so that every build starts from the same
# package list.
#
#   scripts/install-deps.sh [all|build]
#
#   build  the Debian packages the programs and tests compile against
#          (the container image's build stage)
#   all    (default) also the test set-up: the Python client's packages,
#          clang's fuzzing runtime, kubectl, and kubernetes-validate from
#          PyPI in $BUILD_DIR/tools-venv (scripts/check-deploy.sh)
#
# The CUDA toolkit is not a Debian package: when present (nvcc on PATH or in
# /usr/local/cuda) the CUDA backend is built, otherwise it is left out; with
# it, CUTLASS's and FlashInfer's headers come from PyPI
# (scripts/fetch-cutlass.sh, scripts/fetch-flashinfer.sh).
set -euo pipefail

group="${1:-all}"
case "$group" in
  all | build) ;;
  *)
    echo "install-deps: unknown group '$group' (all or build)" >&2
    exit 2
    ;;
esac

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
  libpcre2-dev            # tokenizer.json's pre-tokenizer regexes
  libutf8proc-dev         # tokenizer.json's Unicode normalizers (NFC ...)
  libgloo-dev             # CPU collectives (parallel/)
  libprotobuf-dev         # gRPC protos (proto/)
  protobuf-compiler
  libgrpc++-dev
  protobuf-compiler-grpc
  prometheus-cpp-dev      # the coordinator's /metrics
  libcpp-httplib-dev      # the coordinator's OpenAI-compatible HTTP API
)
if [ "$group" = all ]; then
  packages+=(
    python3-grpcio          # the Python client example (examples/python)
    python3-protobuf
    python3-venv            # the tools venv below
    clang                   # libFuzzer targets (tests/fuzz)
    libclang-rt-14-dev      # libFuzzer and sanitizer runtimes for clang 14
  )
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" \
    || missing+=("$p")
done

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  sudo="sudo"
fi
updated=0
# One apt-get update, before the first lookup or install.
apt_update() {
  if [ -n "$sudo" ] && ! command -v sudo >/dev/null; then
    echo "install-deps: need root or sudo to install $*" >&2
    exit 1
  fi
  if [ "$updated" -eq 0 ]; then
    $sudo apt-get update -q
    updated=1
  fi
}
apt_install() {
  apt_update "$@"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q \
    --no-install-recommends "$@"
}

if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  apt_install "${missing[@]}"
fi

# CUTLASS's headers (PyPI, pinned) for the CUDA backend's CUTLASS GEMM and
# FlashInfer's for its prefill attention, where the CUDA toolkit is; without
# PyPI the build leaves them out.
if command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then
  "$(dirname "$0")/fetch-cutlass.sh" > /dev/null ||
    echo "install-deps: no CUTLASS headers: the CUTLASS GEMM is left out" >&2
  "$(dirname "$0")/fetch-flashinfer.sh" > /dev/null ||
    echo "install-deps: no FlashInfer headers: its prefill attention is left out" >&2
fi

[ "$group" = all ] || exit 0

# kubectl renders the Kubernetes overlays (kubectl kustomize). Debian's own
# (kubernetes-client) is 1.20, whose kustomize is too old for them; a
# current one comes from an apt source that has "kubectl", where there is
# one. scripts/check-deploy.sh says which it found.
if ! command -v kubectl >/dev/null; then
  apt_update kubectl
  if apt-cache show kubectl >/dev/null 2>&1; then
    echo "install-deps: installing kubectl"
    apt_install kubectl
  else
    echo "install-deps: installing kubernetes-client (Debian's kubectl)"
    apt_install kubernetes-client
  fi
fi

# kubernetes-validate (PyPI), pinned, in a venv of Debian's python3.
venv="${BUILD_DIR:-build}/tools-venv"
validate_version="1.37.0"
if ! "$venv/bin/kubernetes-validate" --version 2>/dev/null |
    grep -q "$validate_version"; then
  echo "install-deps: kubernetes-validate $validate_version into $venv"
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  /usr/bin/python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check \
    "kubernetes-validate==$validate_version"
fi
