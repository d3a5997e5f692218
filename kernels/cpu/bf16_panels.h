// Bfloat16 weights packed into panels for the outer-product GEMM
// (GemmBf16Panels in gemm.h; docs/decisions/2026-12-06-cpu-gemm-outer-
// product.md).
//
// A weight W[N][K] (out x in) is cut into panels of kBf16PanelColumns
// output columns (the last one narrower, its width rounded up to 16 with
// zero columns). A panel holds its columns as [K / 2][width][2]: the two K
// values of a pair side by side, the pairs of 16 columns in one 64-byte
// vector, so that the GEMM multiplies a broadcast activation pair into 16
// columns' sums at once and reads the panel front to back. K is packed in
// `k_blocks` equal blocks (the row-parallel layers' blocks, gemm.h
// *BlockSums), each padded to an even length with a zero, one after the
// other in every panel; with K blocks of even length the layout is the
// same for every k_blocks.
//
// The layout is a function of (N, K, k_blocks) alone, the same on every
// instruction-set level; the AVX-512 kernels run over it, the others run
// the scalar twin (kernels/cpu/gemm_scalar.cc).
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "base/bf16.h"

namespace octet {

inline constexpr int64_t kBf16PanelColumns = 64;

// The elements (bfloat16) a packed weight takes: N rounded up to 16 times
// K with each block rounded up to even.
int64_t Bf16PanelElements(int64_t n, int64_t k, int64_t k_blocks);

// W [n][k] row-major -> `panels` (Bf16PanelElements of them; padding
// written as zero). k_blocks must divide k.
absl::Status PackBf16Panels(const Bf16* w, int64_t n, int64_t k,
                            int64_t k_blocks, Bf16* panels);

// W[row][col] read back from packed panels (tests, checkpoint export).
Bf16 Bf16PanelAt(const Bf16* panels, int64_t n, int64_t k, int64_t k_blocks,
                 int64_t row, int64_t col);

}  // namespace octet
