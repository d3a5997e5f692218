#!/usr/bin/env bash
# Packs what scripts/gpu-check.sh runs on a GPU machine into .gpu-bundle/:
# every `gpu`-labelled test program (as ctest lists them), the benchmarks
# (bench_gemm, bench_attention, bench_decode, bench_serving with the
# coordinator and worker it starts), the octet CLI (make-model), and the
# non-CUDA shared libraries they load (abseil, gRPC, protobuf, OpenMP,
# Gloo, the C++ runtime...).
#
# CUDA's own libraries do not travel: libcublasLt.so.13 alone is 540 MB and
# the bundle must fit, with the working tree, in the 64 MiB that goes to the
# GPU machine. That machine brings its driver (libcuda.so.1), cuBLASLt and
# NCCL (its CUDA 13 toolkit, or the pip packages nvidia-cublas and
# nvidia-nccl-cu13 in its Python venv); gpu-check.sh finds them and says
# which are missing. The CUDA runtime (libcudart.so.13, 0.7 MB) travels: the
# programs get the one they were built with.
#
# The C++ runtime (libstdc++, libgcc_s) goes in lib/cxx/, apart: Debian 12's
# libstdc++ needs glibc 2.36, so on an older system (Ubuntu 22.04: 2.35)
# gpu-check.sh uses the system's instead. The C library family itself never
# travels.
#
#   flock /tmp/octet-build.lock scripts/gpu-bundle.sh   # builds first (make build)
#   then, on the GPU machine:  .gpu-bundle/gpu-check.sh [OUTPUT_DIR]
#
# The programs and libraries (~125 MiB) travel as payload.tar.gz (~45 MiB),
# which gpu-check.sh unpacks into a temporary folder. Prints the bundle's
# size and fails above 48 MiB (the rest of the 64 MiB is the working tree's
# and headroom).
set -euo pipefail
cd "$(dirname "$0")/.."

max_bytes=$((48 << 20))

make build
if [ ! -x build/bin/cuda_gemm_test ]; then
  echo "gpu-bundle: no CUDA test programs in build/bin: is the CUDA toolkit installed?" >&2
  exit 1
fi

# The gpu-labelled test programs, from ctest's own list (each program once).
mapfile -t gpu_tests < <(ctest --test-dir build -N -V -L gpu 2>/dev/null |
  awk '/Test command:/ {print $4}' | xargs -r -n1 basename | sort -u)
if [ "${#gpu_tests[@]}" -eq 0 ]; then
  echo "gpu-bundle: ctest lists no gpu-labelled tests in build/" >&2
  exit 1
fi

out=.gpu-bundle
stage="$out/stage"  # what payload.tar.gz holds: bin/ and lib/
rm -rf "$out"
mkdir -p "$stage/bin" "$stage/lib/cxx"
# tp_rank: the rank processes tensor_parallel_cuda_test starts.
programs=(bench_gemm bench_attention bench_decode bench_serving coordinator worker octet
  tp_rank "${gpu_tests[@]}")
for p in "${programs[@]}"; do cp "build/bin/$p" "$stage/bin/"; done
# SentencePiece is a module the programs load from their own folder
# (model/sentencepiece_bridge.h); the CUDA kernels are a library they find
# there (their RUNPATH is $ORIGIN).
cp build/bin/liboctet_sentencepiece.so build/bin/liboctet_cuda_device_code.so \
  "$stage/bin/"
programs+=(liboctet_sentencepiece.so liboctet_cuda_device_code.so)
cp scripts/gpu-check.sh scripts/gpu-mission.sh scripts/compare_codes.py "$out/"
printf '%s\n' "${gpu_tests[@]}" > "$out/gpu-tests.txt"

# Shared libraries to carry: everything ldd resolves but octet's own (in
# bin/), the C library family (the GPU machine's own) and CUDA's (too big;
# the machine has them), except the CUDA runtime (0.7 MB): the one the
# programs were built with. CUDA libraries the programs need from the
# machine are listed for gpu-check.sh's report.
: > "$out/cuda-libs.txt"
for p in "${programs[@]}"; do
  ldd "build/bin/$p" | awk '/=> / {print $1, $3}'
done | sort -u | while read -r name path; do
  case "$name" in
    libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|ld-linux*) ;;
    liboctet_*) ;;
    libcudart.so*) cp -L "$path" "$stage/lib/" ;;
    libcuda.so*|libcublas*|libnccl*|libnvJitLink*|libnvrtc*)
      echo "$name" >> "$out/cuda-libs.txt" ;;
    libstdc++.so*|libgcc_s.so*) cp -L "$path" "$stage/lib/cxx/" ;;
    *)
      if [ ! -f "$path" ]; then
        echo "gpu-bundle: $name not found here (ldd: $path)" >&2
        exit 1
      fi
      cp -L "$path" "$stage/lib/" ;;
  esac
done
sort -u -o "$out/cuda-libs.txt" "$out/cuda-libs.txt"
mapfile -t cuda_libs < "$out/cuda-libs.txt"

{
  echo "bundle made $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n)"
  echo "commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
  nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  echo "built with nvcc $("$nvcc" --version 2>/dev/null | grep -o 'release [0-9.]*' || echo unknown)"
  echo "CUDA libraries the GPU machine must have: ${cuda_libs[*]}"
  echo "programs: ${programs[*]}"
} > "$out/bundle.txt"

unpacked=$(du -sb "$stage" | cut -f1)
libraries=$(find "$stage/lib" -type f | wc -l)
tar czf "$out/payload.tar.gz" -C "$stage" bin lib
rm -rf "$stage"

mib() { awk -v b="$1" 'BEGIN {printf "%.1f MiB", b / 1048576}'; }
bytes=$(du -sb "$out" | cut -f1)
echo "gpu-bundle: $out: ${#programs[@]} programs and $libraries libraries, $(mib "$unpacked") unpacked; the bundle is $(mib "$bytes") (at most $((max_bytes >> 20)) MiB)"
echo "gpu-bundle: the GPU machine must provide: ${cuda_libs[*]} and libcuda.so.1 (the driver)"
if [ "$bytes" -gt "$max_bytes" ]; then
  echo "gpu-bundle: FAILED: $out is $((bytes >> 20)) MiB, over the $((max_bytes >> 20)) MiB limit (it travels with the working tree in 64 MiB)" >&2
  exit 1
fi
