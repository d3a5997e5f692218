// The one order in which octet adds partial sums of a tensor-parallel
// (row-parallel) product, so that the result does not change with the TP
// degree (docs/design.md, "TP invariance").
//
// A row-parallel layer's K is cut into a fixed number of blocks, the same at
// every TP degree; each block's dot products are computed as if the block were
// the whole K (kernels/cpu/gemm.h, *BlockSums), and the block sums are added
// by TreeSum: pairwise with doubling strides, for four parts
// (p0 + p1) + (p2 + p3). Cut P = T * L parts into T runs of L consecutive
// parts, L a power of two: TreeSum of each run, then TreeSum of the T
// results, gives exactly TreeSum of all P. One rank holding all blocks and
// T ranks holding L blocks each (then all-reducing with TreeSum over ranks,
// parallel/communicator.h) therefore get the same bits.
#pragma once

#include <cstdint>

namespace octet {
// Internal linkage: the CPU GEMM's instruction-set translation units use it
// too, and must not share an inline function with the rest of the program
// (kernels/cpu/e4m3_simd.h).
namespace {  // NOLINT(build/namespaces): see above

// parts[0 .. n) += the other `count` - 1 vectors of n floats at
// parts + j * stride, j = 1 .. count - 1, in the TreeSum order. The other
// vectors are overwritten with intermediate sums.
inline void TreeSum(float* parts, int64_t count, int64_t stride, int64_t n) {
  for (int64_t s = 1; s < count; s *= 2) {
    for (int64_t j = 0; j + s < count; j += 2 * s) {
      float* dst = parts + j * stride;
      const float* src = parts + (j + s) * stride;
      for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
    }
  }
}

}  // namespace
}  // namespace octet
