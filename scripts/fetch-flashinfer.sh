#!/usr/bin/env bash
# Fetches FlashInfer's headers, once, from PyPI's flashinfer-python wheel,
# pinned by version and SHA-256, into a cache folder, and prints the folder.
# The CUDA backend's prefill attention (kernels/cuda/attention_flashinfer.h)
# is built from them; without them CMake leaves it out and says so.
#
#   scripts/fetch-flashinfer.sh [DIR]    (default: .cache/flashinfer-0.7.4)
#
# DIR/include holds FlashInfer's headers, DIR/libcudacxx the CUDA C++
# library they were written against (newer than the toolkit's: their
# fastdiv needs cuda::fast_mod_div). Exits 77 saying why when PyPI cannot be
# reached, 1 on any other failure.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
version=0.7.4
wheel_sha=a051a62e09a2738e8b0de47a1944fd2f0f3eff01b728b662141ea660cb09dd32
dir="${1:-$root/.cache/flashinfer-$version}"

if [ -s "$dir/include/flashinfer/attention/prefill.cuh" ]; then
  echo "$dir"
  exit 0
fi
. "$root/scripts/pypi-wheel.sh"
pypi_wheel_parts fetch-flashinfer "flashinfer-python==$version" "$wheel_sha" \
  "$dir" flashinfer/data/include/=include \
  flashinfer/data/cccl/libcudacxx/include/=libcudacxx  # a 101 MB wheel
echo "$dir"
