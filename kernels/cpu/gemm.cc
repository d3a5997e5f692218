// The CPU GEMM driver: argument checks, activation preparation, the choice
// between streaming and converted weights (gemm_kernels.h), threading and the
// epilogue. The arithmetic itself is in the per-instruction-set kernels.
//
// Threads split the output columns (N) only, and every output is one dot
// product computed the same way whatever the split, so results do not depend
// on the thread count.
#include "kernels/cpu/gemm.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/gemm_kernels.h"
#include "kernels/fp8.h"
#include "kernels/gemm_args.h"

namespace octet {
namespace {

using cpu_internal::GemmKernels;

// Column chunks handed to threads stay multiples of this (whole cache lines
// of binary32 sums, whole tiles).
constexpr int64_t kColumnAlign = 16;
// Weight bytes per converted block of the e4m3 large-M path (fits in L2).
constexpr int64_t kConvertedBlockBytes = int64_t{256} << 10;
// Below this many multiply-adds a GEMM runs on the calling thread.
constexpr int64_t kParallelMinWork = int64_t{1} << 18;

const GemmKernels& GemmKernelsFor(CpuIsa isa) {
#if defined(OCTET_X86)
  if (isa == CpuIsa::kAvx512) return cpu_internal::kGemmAvx512;
  if (isa == CpuIsa::kAvx2) return cpu_internal::kGemmAvx2;
#endif
  (void)isa;
  return cpu_internal::kGemmScalar;
}

// The epilogue: y[row, col] = (c[row * ldc + col - col0] * dot_scale) *
// out_scale for rows [0, m) and columns [col0, col1). Each element is read
// before it is written, so c may be y itself (binary32, same layout).
void Finish(const float* c, int64_t ldc, int64_t m, int64_t col0, int64_t col1,
            float dot_scale, float out_scale, void* y, DType y_dtype,
            int64_t ldy) {
  for (int64_t row = 0; row < m; ++row) {
    const float* src = c + row * ldc;
    for (int64_t col = col0; col < col1; ++col) {
      const float v = (src[col - col0] * dot_scale) * out_scale;
      if (y_dtype == DType::kBf16) {
        static_cast<Bf16*>(y)[row * ldy + col] = FloatToBf16(v);
      } else {
        static_cast<float*>(y)[row * ldy + col] = v;
      }
    }
  }
}

// Scratch buffers that grow and are kept per thread and per use, so that
// steady-state calls allocate nothing. The calling thread also runs parallel
// tasks, so each use has its own slot.
enum class Scratch { kPreparedA, kSums, kConvertedB };

template <Scratch kUse>
char* ThreadScratch(size_t bytes) {
  thread_local std::vector<char> buffer;
  if (buffer.size() < bytes) buffer.resize(bytes);
  return buffer.data();
}

// One GEMM's operands as the driver sees them. A and B are either both e4m3
// codes or both bfloat16.
template <typename Src>
struct Problem {
  const Src* a;
  const Src* b;
  int64_t m, n, k;
  float out_scale;
  void* y;
  DType y_dtype;
};

template <typename Src>
void RunKernels(const GemmKernels& kern, const Problem<Src>& p, int threads) {
  constexpr bool kE4m3 = std::is_same_v<Src, uint8_t>;
  const int64_t k_pad = (p.k + kern.k_align - 1) / kern.k_align * kern.k_align;
  const int64_t row_bytes = k_pad * static_cast<int64_t>(kern.dot_bytes);

  char* a = ThreadScratch<Scratch::kPreparedA>(p.m * row_bytes);
  if constexpr (kE4m3) {
    kern.prepare_a_e4m3(p.a, p.m, p.k, a);
  } else {
    kern.prepare_a_bf16(p.a, p.m, p.k, a);
  }
  // The kernels write raw sums; into y itself when it is binary32.
  float* sums = p.y_dtype == DType::kF32
                    ? static_cast<float*>(p.y)
                    : reinterpret_cast<float*>(ThreadScratch<Scratch::kSums>(
                          p.m * p.n * sizeof(float)));
  const float dot_scale = kE4m3 ? kern.e4m3_dot_scale : 1.0f;
  const bool convert = kE4m3 && p.m > cpu_internal::kStreamMaxM;

  int64_t chunk = (p.n + threads - 1) / threads;
  chunk = (chunk + kColumnAlign - 1) / kColumnAlign * kColumnAlign;
  const int64_t chunks = (p.n + chunk - 1) / chunk;
#pragma omp parallel for num_threads(threads) schedule(static) if (chunks > 1)
  for (int64_t t = 0; t < chunks; ++t) {
    const int64_t col0 = t * chunk;
    const int64_t col1 = std::min(p.n, col0 + chunk);
    if constexpr (kE4m3) {
      if (convert) {
        // Decode each weight once into an L2-sized block, then run the
        // prepared kernel over it.
        const int64_t block =
            std::max<int64_t>(kColumnAlign, kConvertedBlockBytes / row_bytes);
        char* b = ThreadScratch<Scratch::kConvertedB>(block * row_bytes);
        for (int64_t c0 = col0; c0 < col1; c0 += block) {
          const int64_t rows = std::min(block, col1 - c0);
          kern.convert_b_e4m3(p.b + c0 * p.k, rows, p.k, b);
          kern.prepared_rows(a, k_pad, p.m, b, k_pad, k_pad, 0, rows, sums + c0,
                             p.n);
        }
      } else {
        kern.e4m3_rows(a, k_pad, p.m, p.b, p.k, p.k, col0, col1, sums, p.n);
      }
    } else {
      kern.bf16_rows(a, k_pad, p.m, p.b, p.k, p.k, col0, col1, sums, p.n);
    }
    Finish(sums + col0, p.n, p.m, col0, col1, dot_scale, p.out_scale, p.y,
           p.y_dtype, p.n);
  }
}

template <typename Src>
absl::Status Run(const Problem<Src>& p, const CpuKernelOptions& options,
                 const char* what) {
  absl::Status args =
      CheckGemmArgs(p.a, p.b, p.m, p.n, p.k, p.y, p.y_dtype, what);
  if (!args.ok()) return args;
  absl::StatusOr<CpuIsa> isa = cpu_internal::CheckOptions(options, what);
  if (!isa.ok()) return isa.status();
  if (p.m == 0 || p.n == 0) return absl::OkStatus();
  if (p.k == 0) {  // an empty sum: Y = 0 (all-zero bits in f32 and bf16)
    std::memset(p.y, 0, p.m * p.n * DTypeSize(p.y_dtype));
    return absl::OkStatus();
  }
  const int threads = p.m * p.n * p.k < kParallelMinWork
                          ? 1
                          : cpu_internal::ThreadCount(options);
  RunKernels(GemmKernelsFor(*isa), p, threads);
  return absl::OkStatus();
}

}  // namespace

absl::Status GemmE4m3(const uint8_t* qa, float scale_a, const uint8_t* qb,
                      float scale_b, int64_t m, int64_t n, int64_t k, void* y,
                      DType y_dtype, const CpuKernelOptions& options) {
  return Run(Problem<uint8_t>{qa, qb, m, n, k, scale_a * scale_b, y, y_dtype},
             options, "GemmE4m3");
}

absl::Status GemmBf16(const Bf16* a, const Bf16* b, int64_t m, int64_t n,
                      int64_t k, void* y, DType y_dtype,
                      const CpuKernelOptions& options) {
  return Run(Problem<Bf16>{a, b, m, n, k, 1.0f, y, y_dtype}, options,
             "GemmBf16");
}

}  // namespace octet
