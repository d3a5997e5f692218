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
mkdir -p "$(dirname "$dir")"
work="$(mktemp -d "$(dirname "$dir")/fetch-cutlass.XXXXXX")"
trap 'rm -rf "$work"' EXIT
. "$root/scripts/pypi-wheel.sh"
pypi_wheel fetch-cutlass "nvidia-cutlass==$version" "$wheel_sha" "$work"  # 6 MB
python3 - "$work"/nvidia_cutlass-"$version"-*.whl "$work/out" <<'PY'
import sys, zipfile
prefix = "cutlass_library/source/"
with zipfile.ZipFile(sys.argv[1]) as z:
    for name in z.namelist():
        rel = name[len(prefix):] if name.startswith(prefix) else None
        if rel and (rel.startswith("include/") or rel.startswith("tools/util/include/")):
            z.extract(name, sys.argv[2])
PY
mv "$work/out/cutlass_library/source" "$work/cutlass"
rm -rf "$dir"
mv "$work/cutlass" "$dir"
echo "$dir"
