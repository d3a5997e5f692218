#!/usr/bin/env bash
# Fetches CUTLASS's headers, once, from PyPI's nvidia-cutlass wheel, pinned
# by version and SHA-256, into a cache folder, and prints the folder. The
# CUDA backend's third way of the FP8 GEMM with per-sequence scales
# (kernels/cuda/gemm_cutlass.h) is built from them; without them CMake
# leaves it out and says so.
#
#   scripts/fetch-cutlass.sh [DIR]    (default: .cache/cutlass-4.2.0.0)
#
# DIR/include holds CUTLASS and CuTe, DIR/tools/util/include CUTLASS's
# utilities. Exits 77 saying why when PyPI cannot be reached, 1 on any
# other failure.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
version=4.2.0.0
wheel_sha=f9599ada45c7bcb6bf53f7d3f0a7d154183e53451c01bfa59eecd37dd4a693f6
dir="${1:-$root/.cache/cutlass-$version}"

if [ -s "$dir/include/cutlass/cutlass.h" ]; then
  echo "$dir"
  exit 0
fi
. "$root/scripts/pypi-wheel.sh"
pypi_wheel_parts fetch-cutlass "nvidia-cutlass==$version" "$wheel_sha" \
  "$dir" cutlass_library/source/include/=include \
  cutlass_library/source/tools/util/include/=tools/util/include  # 6 MB
echo "$dir"
