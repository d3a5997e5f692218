// Scalar GEMM kernels (*Ref): portable loops in K order, the reference
// the CUDA fallback kernel mirrors and the fallback below AVX2. Activations
// and converted weights are exact binary32 in natural K order.
#include <algorithm>

#include "kernels/cpu/gemm_kernels.h"
#include "kernels/fp8.h"

namespace octet::cpu_internal {
namespace {

inline float Value(uint8_t q) { return kE4m3DecodeTable[q]; }
inline float Value(Bf16 v) { return Bf16ToFloat(v); }
inline float Value(float v) { return v; }

template <typename Src>
void PrepareRef(const Src* src, int64_t rows, int64_t k, int64_t ld,
                void* dst) {
  float* out = static_cast<float*>(dst);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < k; ++i) out[r * ld + i] = Value(src[r * k + i]);
  }
}

template <typename W>
void RowsRef(const void* a_ptr, int64_t lda, int64_t m, const W* b_ptr,
             int64_t ldb, int64_t k, int64_t n0, int64_t n1, float* c_ptr,
             int64_t ldc, const KBlocks& blocks) {
  for (int64_t j = 0; j < blocks.count; ++j) {
    const float* a = reinterpret_cast<const float*>(
        static_cast<const char*>(a_ptr) + j * blocks.a_bytes);
    const W* b = reinterpret_cast<const W*>(
        reinterpret_cast<const char*>(b_ptr) + j * blocks.b_bytes);
    float* c = c_ptr + j * blocks.c_floats;
    for (int64_t col = n0; col < n1; ++col) {
      for (int64_t row = 0; row < m; ++row) {
        float acc = 0.0f;
        for (int64_t i = 0; i < k; ++i) {
          acc += a[row * lda + i] * Value(b[col * ldb + i]);
        }
        c[row * ldc + col] = acc;
      }
    }
  }
}

void PreparedRowsRef(const void* a, int64_t lda, int64_t m, const void* b,
                     int64_t ldb, int64_t k, int64_t n0, int64_t n1, float* c,
                     int64_t ldc, const KBlocks& blocks) {
  RowsRef(a, lda, m, static_cast<const float*>(b), ldb, k, n0, n1, c, ldc,
          blocks);
}

// The panels kernel's scalar twin: each output's K pairs added in order
// from zero (the pair's first product, then its second), as the AVX-512
// kernel adds them one vdpbf16ps per pair. The reference for it is the
// tests' binary64 bound, not its bits: vdpbf16ps rounds (and flushes
// subnormals) its own way.
void PanelsRef(const Bf16* a_ptr, int64_t lda, int64_t m, const Bf16* panels,
               int64_t n, int64_t kb_pad, int64_t n0, int64_t n1, float* c_ptr,
               int64_t ldc, const KBlocks& blocks) {
  const int64_t n_pad = (n + 15) / 16 * 16;
  const int64_t panel_k = blocks.count * kb_pad;
  for (int64_t j = 0; j < blocks.count; ++j) {
    const Bf16* a = reinterpret_cast<const Bf16*>(
        reinterpret_cast<const char*>(a_ptr) + j * blocks.a_bytes);
    float* c = c_ptr + j * blocks.c_floats;
    for (int64_t col = n0; col < n1; ++col) {
      const int64_t c0 = col / kBf16PanelColumns * kBf16PanelColumns;
      const int64_t width = std::min(kBf16PanelColumns, n_pad - c0);
      const Bf16* w =
          panels + c0 * panel_k + j * kb_pad * width + (col - c0) * 2;
      for (int64_t row = 0; row < m; ++row) {
        float acc = 0.0f;
        for (int64_t pair = 0; pair < kb_pad / 2; ++pair) {
          const Bf16* x = a + row * lda + 2 * pair;
          acc += Value(x[0]) * Value(w[pair * width * 2]);
          acc += Value(x[1]) * Value(w[pair * width * 2 + 1]);
        }
        c[row * ldc + col] = acc;
      }
    }
  }
}

}  // namespace

const GemmKernels kGemmScalar = {
    .k_align = 1,
    .dot_bytes = 4,
    .prepare_a_e4m3 = PrepareRef<uint8_t>,
    .prepare_a_bf16 = PrepareRef<Bf16>,
    .e4m3_rows = RowsRef<uint8_t>,
    .stream_max_m = 8,
    .bf16_rows = RowsRef<Bf16>,
    .convert_b_e4m3 = PrepareRef<uint8_t>,
    .prepared_rows = PreparedRowsRef,
    .prepared_rows_per_tile = 1,
    .converted_k_is_padded = false,
    .e4m3_dot_scale = 1.0f,
    .adds_k_blocks = false,
    .e4m3_rows_converting = nullptr,
    .converting_max_m = 0,
    .bf16_panels = PanelsRef,
};

}  // namespace octet::cpu_internal
