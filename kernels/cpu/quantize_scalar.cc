// Scalar quantizer kernels (*Ref): the contract written as plain loops. The
// reference every faster level and the CUDA kernels are tested against, and
// the fallback on CPUs without AVX2.
#include <cmath>

#include "kernels/cpu/quantize_kernels.h"
#include "kernels/fp8.h"

namespace octet::cpu_internal {
namespace {

template <typename T>
float ToFloat(T v) {
  if constexpr (std::is_same_v<T, Bf16>) {
    return Bf16ToFloat(v);
  } else {
    return v;
  }
}

template <typename T>
float AbsMaxRef(const T* x, int64_t n) {
  float m = 0.0f;
  for (int64_t i = 0; i < n; ++i) m = fmaxf(m, std::fabs(ToFloat(x[i])));
  return m;
}

template <typename T>
void QuantizeRef(const T* x, int64_t n, float inv, uint8_t* q) {
  for (int64_t i = 0; i < n; ++i) q[i] = EncodeE4m3(ToFloat(x[i]) * inv);
}

void DequantizeRef(const uint8_t* q, int64_t n, float scale, float* x) {
  for (int64_t i = 0; i < n; ++i) x[i] = DecodeE4m3(q[i]) * scale;
}

}  // namespace

const QuantizeKernels kQuantizeScalar = {
    AbsMaxRef<float>,  AbsMaxRef<Bf16>, QuantizeRef<float>,
    QuantizeRef<Bf16>, DequantizeRef,
};

}  // namespace octet::cpu_internal
