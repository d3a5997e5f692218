// Scalar GEMM kernels (*Ref): portable loops in K order, the reference
// the CUDA fallback kernel mirrors and the fallback below AVX2. Activations
// and converted weights are exact binary32 in natural K order.
#include <algorithm>

#include "kernels/cpu/gemm_kernels.h"
#include "kernels/cpu/panel_layout.h"
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

// The panels kernels' scalar twins: each output's K pairs added in order
// from zero (the pair's first product, then its second), as the AVX-512
// kernels add them one vdpbf16ps per pair. The reference for them is the
// tests' binary64 bound, not their bits: vdpbf16ps rounds (and flushes
// subnormals) its own way.

template <typename Layout, typename T>
void PanelsRef(const Bf16* a_ptr, int64_t lda, int64_t m, const T* panels,
               int64_t n, int64_t kb_pad, int64_t n0, int64_t n1, float* c_ptr,
               int64_t ldc, const KBlocks& blocks) {
  const int64_t n_pad = (n + 15) / 16 * 16;
  const int64_t panel_k = blocks.count * kb_pad;
  for (int64_t j = 0; j < blocks.count; ++j) {
    const Bf16* a = reinterpret_cast<const Bf16*>(
        reinterpret_cast<const char*>(a_ptr) + j * blocks.a_bytes);
    float* c = c_ptr + j * blocks.c_floats;
    for (int64_t col = n0; col < n1; ++col) {
      const int64_t c0 = col / kPanelColumns * kPanelColumns;
      const int64_t width = std::min(kPanelColumns, n_pad - c0);
      const T* w =
          panels + c0 * panel_k + j * kb_pad * width + Layout::Column(col - c0);
      for (int64_t row = 0; row < m; ++row) {
        const Bf16* x = a + row * lda;
        float acc = 0.0f;
        for (int64_t t = 0; t < kb_pad; ++t) {
          acc += Value(x[t]) * Value(w[Layout::Offset(t, width)]);
        }
        c[row * ldc + col] = acc;
      }
    }
  }
}

void Bf16PanelsRef(const Bf16* a, int64_t lda, int64_t m, const Bf16* panels,
                   int64_t n, int64_t kb_pad, int64_t n0, int64_t n1, float* c,
                   int64_t ldc, const KBlocks& blocks) {
  PanelsRef<Bf16PanelLayout>(a, lda, m, panels, n, kb_pad, n0, n1, c, ldc,
                             blocks);
}

void E4m3PanelsRef(const Bf16* a, int64_t lda, int64_t m, const uint8_t* panels,
                   int64_t n, int64_t kb_pad, int64_t n0, int64_t n1, float* c,
                   int64_t ldc, const KBlocks& blocks) {
  PanelsRef<E4m3PanelLayout>(a, lda, m, panels, n, kb_pad, n0, n1, c, ldc,
                             blocks);
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
    .bf16_panels = Bf16PanelsRef,
    .e4m3_panels = E4m3PanelsRef,
};

}  // namespace octet::cpu_internal
