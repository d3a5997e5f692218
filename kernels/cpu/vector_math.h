// Internal: binary32 vectors of the instruction-set level a translation
// unit is compiled for, in GCC's vector extension, and the elementwise math
// the CPU kernels share on them (the attention's softmax, SiLU). Include
// only from a unit built with a level's flags (kernels/CMakeLists.txt):
// everything has internal linkage (anonymous namespace) and calls no
// library function, so each level gets its own copy and the linker can
// never hand an AVX-512 copy to the AVX2 path
// (tests/build/check_isa_symbols.cmake). Elementwise functions give the
// same bits at either width.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace octet::cpu_internal {
namespace {  // NOLINT(build/namespaces): see above

// The level's own vector of floats in GCC's vector extension (AVX-512: 16
// lanes, AVX2: 8). Arrays of them stay in registers, which plain arrays of
// floats did not (the attention kernel, measured: spilled every step);
// memory is accessed through memcpy, unaligned. The helpers are always
// inlined so no vector crosses a call.
#if defined(__AVX512F__)
constexpr int kWidth = 16;
#else
constexpr int kWidth = 8;
#endif
typedef float V __attribute__((vector_size(kWidth * 4)));
typedef int32_t VI __attribute__((vector_size(kWidth * 4)));

#define OCTET_V_INLINE inline __attribute__((always_inline))

OCTET_V_INLINE V Load(const float* p) {
  V v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}
OCTET_V_INLINE void Store(float* p, V v) { __builtin_memcpy(p, &v, sizeof v); }
OCTET_V_INLINE V Splat(float x) { return V{} + x; }

// a * b + c rounded once (a fused multiply-add). The build never fuses on
// its own (-ffp-contract=off, CMakeLists.txt), so that the bits do not
// depend on the optimization level: each fused step is written here.
OCTET_V_INLINE V MulAdd(V a, V b, V c) {
#if defined(__AVX512F__)
  return _mm512_fmadd_ps(a, b, c);
#else
  return _mm256_fmadd_ps(a, b, c);
#endif
}
OCTET_V_INLINE float MulAdd(float a, float b, float c) {
  return __builtin_fmaf(a, b, c);  // inlined: every level has FMA
}

// e^x for x <= 0 (a score minus the row's maximum; -|g| in SiLU),
// branch-free: x = k·ln2 + r with k the nearest integer (the 1.5·2^23
// rounding trick) and |r| <= ln2/2 (ln2 in two parts, Cody and Waite), e^r
// by Cephes' degree-6 polynomial in fused steps (about 1 ulp), times 2^k
// from the exponent bits. Below -87 (e^x under binary32's smallest normal)
// it is 0; NaN stays NaN.
OCTET_V_INLINE V ExpNonPositive(V x) {
  const V c = x < -87.0f ? Splat(-87.0f) : x;
  const V k =
      MulAdd(c, Splat(1.44269504088896341f), Splat(12582912.0f)) - 12582912.0f;
  const V r =
      MulAdd(k, Splat(2.12194440e-4f), MulAdd(-k, Splat(0.693359375f), c));
  V p = Splat(1.9875691500e-4f);
  p = MulAdd(p, r, Splat(1.3981999507e-3f));
  p = MulAdd(p, r, Splat(8.3334519073e-3f));
  p = MulAdd(p, r, Splat(4.1665795894e-2f));
  p = MulAdd(p, r, Splat(1.6666665459e-1f));
  p = MulAdd(p, r, Splat(5.0000001201e-1f));
  p = MulAdd(p * r, r, r) + 1.0f;
  const VI bits = (__builtin_convertvector(k, VI) + 127) << 23;
  const V y = p * __builtin_bit_cast(V, bits);
  return x != x ? x : (x < -87.0f ? Splat(0.0f) : y);
}

// SiLU(g) * u for the `cols` gate values g = x[0, cols) and up values u =
// x[cols, 2 cols) of one row, into out[0, cols): g / (1 + e^-g) * u, with
// e^-|g| from ExpNonPositive (never overflows): g / (1 + t) for g >= 0,
// g * t / (1 + t) below (the same value, e^-g = 1 / t). The last partial
// vector goes through a zero-padded copy: every element takes the same
// operations wherever it lies.
inline void SiluMulRow(const float* x, int64_t cols, float* out) {
  const float* g = x;
  const float* u = x + cols;
  auto silu_mul = [](V gv, V uv) {
    const V t = ExpNonPositive(gv < 0.0f ? gv : -gv);
    const V num = gv < 0.0f ? gv * t : gv;
    return num / (1.0f + t) * uv;
  };
  int64_t c = 0;
  for (; c + kWidth <= cols; c += kWidth) {
    Store(out + c, silu_mul(Load(g + c), Load(u + c)));
  }
  if (c < cols) {
    float gt[kWidth] = {}, ut[kWidth] = {}, ot[kWidth];
    for (int64_t i = c; i < cols; ++i) {
      gt[i - c] = g[i];
      ut[i - c] = u[i];
    }
    Store(ot, silu_mul(Load(gt), Load(ut)));
    for (int64_t i = c; i < cols; ++i) out[i] = ot[i - c];
  }
}

}  // namespace
}  // namespace octet::cpu_internal
