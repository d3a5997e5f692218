// Internal: the CPU's elementwise activation kernels per instruction-set
// level, which the driver (activation.cc) calls row by row. One table per
// level, each in its own translation unit built with that level's flags;
// the scalar level is the reference itself (SiluMulRef, ops.h).
//
// Why a kernel beside the reference: SiluMulRef takes a library exp per
// element; in a 128-token llama-1b prefill that was 6% of the time on one
// thread and 3.4% on two, 28 ms, where the kernel takes 3.6 ms
// (bench_decode --profile, 2026-12-06). The kernel runs vector_math.h's
// polynomial exp on whole vectors. Its bits differ from
// the reference's in the last place (another exp, about 1 ulp), within
// tests/kernels/activation_test.cc's tolerance; they are the same at every
// vector width, batch and thread count (each element on its own).
#pragma once

#include <cstdint>

namespace octet::cpu_internal {

struct ActivationKernels {
  // out[c] = SiLU(x[c]) * x[cols + c] for c in [0, cols): one row of
  // SiluMulRef.
  void (*silu_mul_row)(const float* x, int64_t cols, float* out);
};

#if defined(OCTET_X86)
extern const ActivationKernels kActivationAvx2;
extern const ActivationKernels kActivationAvx512;
#endif

}  // namespace octet::cpu_internal
