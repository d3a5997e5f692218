// Weights packed into panels for the outer-product GEMMs (GemmBf16Panels,
// GemmE4m3Panel* in gemm.h; docs/decisions/2026-12-06-cpu-gemm-outer-
// product.md): bfloat16 weights, and float8 e4m3 codes for the decoder of
// e4m3_simd.h.
//
// A weight W[N][K] (out x in) is cut into panels of kPanelColumns output
// columns (the last one narrower, its width rounded up to 16 with zero
// columns), one after another. K is packed in `k_blocks` equal blocks (the
// row-parallel layers' blocks, gemm.h *BlockSums), each padded with zeros
// to a multiple of the format's K step, one after the other in every
// panel. A panel holds a block's K steps in order, each step as 64-byte
// vectors of 16 columns:
//  - bfloat16, step 2 (a "pair"): a vector holds K values (2 p, 2 p + 1) of
//    its 16 columns side by side, [K / 2][width][2], so that the GEMM
//    multiplies a broadcast activation pair into 16 columns' sums at once
//    and reads the panel front to back;
//  - e4m3, step 4: a vector (64 codes) holds K values 4 s .. 4 s + 3 of its
//    16 columns, byte 16 L + 8 h + 2 q + t being column 4 L + q of the
//    vector and K value 4 s + 2 h + t, so that the decoder's byte
//    interleave (within 128-bit lanes) turns it into the bfloat16 layout's
//    pairs (4 s, 4 s + 1) and (4 s + 2, 4 s + 3) of the same 16 columns.
// With K blocks whose length is a multiple of the step, the layout is the
// same for every k_blocks.
//
// The layouts are functions of (N, K, k_blocks) alone, the same on every
// instruction-set level; the AVX-512 kernels run over them, the others the
// scalar twins (kernels/cpu/gemm_scalar.cc).
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "base/bf16.h"

namespace octet {

inline constexpr int64_t kPanelColumns = 64;
// The K values of a step, to a multiple of which each block is padded.
inline constexpr int64_t kBf16PanelStep = 2;
inline constexpr int64_t kE4m3PanelStep = 4;

// The elements (bfloat16, or e4m3 bytes) a packed weight takes: N rounded
// up to 16 times K with each block rounded up to the format's step.
int64_t Bf16PanelElements(int64_t n, int64_t k, int64_t k_blocks);
int64_t E4m3PanelBytes(int64_t n, int64_t k, int64_t k_blocks);

// W [n][k] row-major -> `panels` (as many elements as above; padding
// written as zero). k_blocks must divide k. `threads` pack panels side by
// side (the same bytes at any count).
absl::Status PackBf16Panels(const Bf16* w, int64_t n, int64_t k,
                            int64_t k_blocks, Bf16* panels, int threads = 1);
absl::Status PackE4m3Panels(const uint8_t* w, int64_t n, int64_t k,
                            int64_t k_blocks, uint8_t* panels, int threads = 1);

// And back: `panels` -> W [n][k] row-major (tests, checkpoint export).
void UnpackBf16Panels(const Bf16* panels, int64_t n, int64_t k,
                      int64_t k_blocks, Bf16* w);
void UnpackE4m3Panels(const uint8_t* panels, int64_t n, int64_t k,
                      int64_t k_blocks, uint8_t* w);

// W[row][col] read back from packed panels.
Bf16 Bf16PanelAt(const Bf16* panels, int64_t n, int64_t k, int64_t k_blocks,
                 int64_t row, int64_t col);
uint8_t E4m3PanelAt(const uint8_t* panels, int64_t n, int64_t k,
                    int64_t k_blocks, int64_t row, int64_t col);

}  // namespace octet
