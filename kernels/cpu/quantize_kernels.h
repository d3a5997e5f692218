// Internal: the quantizer's per-instruction-set kernels. Each table is defined
// in its own translation unit (quantize_scalar.cc, quantize_avx2.cc,
// quantize_avx512.cc) built with that level's compiler flags; quantize.cc
// picks one at run time and splits the work across threads.
//
// Kernels are single-threaded, take any n >= 0 and any alignment, and must
// give bit-identical results to the scalar table.
#pragma once

#include <cstdint>

#include "base/bf16.h"
#include "kernels/cpu/cpu_features.h"

namespace octet::cpu_internal {

struct QuantizeKernels {
  float (*absmax_f32)(const float* x, int64_t n);
  float (*absmax_bf16)(const Bf16* x, int64_t n);
  void (*quantize_f32)(const float* x, int64_t n, float inv, uint8_t* q);
  void (*quantize_bf16)(const Bf16* x, int64_t n, float inv, uint8_t* q);
  void (*dequantize)(const uint8_t* q, int64_t n, float scale, float* x);
};

extern const QuantizeKernels kQuantizeScalar;
#if defined(OCTET_X86)
extern const QuantizeKernels kQuantizeAvx2;
extern const QuantizeKernels kQuantizeAvx512;
#endif

// `isa` must be resolved (not kAuto) and supported.
const QuantizeKernels& QuantizeKernelsFor(CpuIsa isa);

}  // namespace octet::cpu_internal
