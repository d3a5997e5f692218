#!/usr/bin/env bash
# Packs what scripts/gpu-check.sh runs on a GPU machine into .gpu-bundle/:
# the `gpu` test programs and bench_gemm built here, and the non-CUDA shared
# libraries they load (abseil, OpenMP, the C++ runtime). The GPU machine
# brings its own driver and CUDA 13 libraries (cuBLASLt); the CUDA runtime
# is linked statically.
#
#   scripts/gpu-bundle.sh            # builds first (make build)
#   then, on the GPU machine:  .gpu-bundle/gpu-check.sh
set -euo pipefail
cd "$(dirname "$0")/.."

make build
if [ ! -x build/bin/cuda_gemm_test ]; then
  echo "gpu-bundle: no CUDA test programs in build/bin: is the CUDA toolkit installed?" >&2
  exit 1
fi

out=.gpu-bundle
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
# Every gpu-labelled test program, the benchmarks and the CLI.
programs=(bench_gemm bench_decode octet)
for t in build/bin/*_test; do
  case "$(basename "$t")" in *cuda*|*nccl*|backend_table_test) programs+=("$(basename "$t")") ;; esac
done
for p in "${programs[@]}"; do cp "build/bin/$p" "$out/bin/"; done
# SentencePiece is a module the programs load from their own folder
# (model/sentencepiece_bridge.h).
cp build/bin/liboctet_sentencepiece.so "$out/bin/"
programs+=(liboctet_sentencepiece.so)
cp scripts/gpu-check.sh "$out/"

# Shared libraries to carry: everything ldd resolves except the C library
# family (the GPU machine's is newer and compatible) and CUDA's own.
for p in "${programs[@]}"; do
  ldd "build/bin/$p" | awk '/=> \// {print $3}'
done | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|ld-linux*) ;;
    libcuda.so*|libcudart*|libcublas*|libnccl*|libnvJitLink*) ;;
    *) cp -L "$lib" "$out/lib/" ;;
  esac
done
du -sh "$out"
