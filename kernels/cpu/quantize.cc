// Dispatcher for the CPU quantizer: checks arguments, picks the kernel table
// for the instruction set, and splits large tensors across OpenMP threads in
// fixed chunks (absmax is a max, so the split never changes a result).
#include "kernels/cpu/quantize.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/quantize_kernels.h"

namespace octet {
namespace cpu_internal {

const QuantizeKernels& QuantizeKernelsFor(CpuIsa isa) {
#if defined(OCTET_X86)
  if (isa == CpuIsa::kAvx512) return kQuantizeAvx512;
  if (isa == CpuIsa::kAvx2) return kQuantizeAvx2;
#endif
  (void)isa;
  return kQuantizeScalar;
}

}  // namespace cpu_internal

namespace {

using cpu_internal::QuantizeKernels;

// Below this many elements one thread does the work: thread start-up would
// cost more than it saves (activations are a few thousand elements).
constexpr int64_t kParallelThreshold = int64_t{1} << 18;
// Chunk boundaries stay multiples of 64 elements so vector kernels see whole
// vectors except at the very end.
constexpr int64_t kChunkAlign = 64;

absl::StatusOr<const QuantizeKernels*> Prepare(const void* in, int64_t n,
                                               const void* out,
                                               const CpuKernelOptions& options,
                                               const char* what) {
  if (n < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": element count must be >= 0, got ", n));
  }
  if (n > 0 && (in == nullptr || out == nullptr)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": null buffer for ", n, " elements"));
  }
  absl::StatusOr<CpuIsa> isa = cpu_internal::CheckOptions(options, what);
  if (!isa.ok()) return isa.status();
  return &cpu_internal::QuantizeKernelsFor(*isa);
}

// The number of chunks ForChunks splits n elements into.
int ChunkCount(int64_t n, const CpuKernelOptions& options) {
  return n < kParallelThreshold ? 1 : cpu_internal::ThreadCount(options);
}

// Calls body(chunk, begin, end) for each of ChunkCount(n) chunks of [0, n),
// in parallel when there is more than one.
template <typename Body>
void ForChunks(int64_t n, const CpuKernelOptions& options, Body body) {
  const int chunks = ChunkCount(n, options);
  if (chunks == 1) {
    body(0, int64_t{0}, n);
    return;
  }
  int64_t size = (n + chunks - 1) / chunks;
  size = (size + kChunkAlign - 1) / kChunkAlign * kChunkAlign;
#pragma omp parallel for num_threads(chunks) schedule(static)
  for (int c = 0; c < chunks; ++c) {
    const int64_t begin = std::min(n, c * size);
    const int64_t end = std::min(n, begin + size);
    if (begin < end) body(c, begin, end);
  }
}

template <typename T>
float AbsMaxWith(const QuantizeKernels& k, const T* x, int64_t n,
                 const CpuKernelOptions& options) {
  auto kernel = [&](const T* p, int64_t len) {
    if constexpr (std::is_same_v<T, Bf16>) {
      return k.absmax_bf16(p, len);
    } else {
      return k.absmax_f32(p, len);
    }
  };
  std::vector<float> partial(ChunkCount(n, options), 0.0f);
  ForChunks(n, options, [&](int chunk, int64_t begin, int64_t end) {
    partial[chunk] = kernel(x + begin, end - begin);
  });
  float m = 0.0f;
  for (float p : partial) m = fmaxf(m, p);
  return m;
}

template <typename T>
void QuantizeWith(const QuantizeKernels& k, const T* x, int64_t n, float inv,
                  uint8_t* q, const CpuKernelOptions& options) {
  ForChunks(n, options, [&](int, int64_t begin, int64_t end) {
    if constexpr (std::is_same_v<T, Bf16>) {
      k.quantize_bf16(x + begin, end - begin, inv, q + begin);
    } else {
      k.quantize_f32(x + begin, end - begin, inv, q + begin);
    }
  });
}

template <typename T>
absl::StatusOr<float> AbsMaxImpl(const T* x, int64_t n,
                                 const CpuKernelOptions& options) {
  absl::StatusOr<const QuantizeKernels*> k =
      Prepare(x, n, x, options, "AbsMax");
  if (!k.ok()) return k.status();
  return AbsMaxWith(**k, x, n, options);
}

template <typename T>
absl::Status QuantizeImpl(const T* x, int64_t n, float inv, uint8_t* q,
                          const CpuKernelOptions& options) {
  absl::StatusOr<const QuantizeKernels*> k =
      Prepare(x, n, q, options, "QuantizeE4m3");
  if (!k.ok()) return k.status();
  if (!(std::isfinite(inv) && inv >= 0.0f)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "QuantizeE4m3: inverse scale must be finite and >= 0, got ", inv));
  }
  QuantizeWith(**k, x, n, inv, q, options);
  return absl::OkStatus();
}

template <typename T>
absl::StatusOr<E4m3Scale> DynamicImpl(const T* x, int64_t n, uint8_t* q,
                                      const CpuKernelOptions& options) {
  absl::StatusOr<const QuantizeKernels*> k =
      Prepare(x, n, q, options, "QuantizeE4m3Dynamic");
  if (!k.ok()) return k.status();
  const E4m3Scale scale = E4m3ScaleFromAbsmax(AbsMaxWith(**k, x, n, options));
  QuantizeWith(**k, x, n, scale.inv, q, options);
  return scale;
}

}  // namespace

absl::StatusOr<float> AbsMax(const float* x, int64_t n,
                             const CpuKernelOptions& options) {
  return AbsMaxImpl(x, n, options);
}
absl::StatusOr<float> AbsMax(const Bf16* x, int64_t n,
                             const CpuKernelOptions& options) {
  return AbsMaxImpl(x, n, options);
}

absl::Status QuantizeE4m3(const float* x, int64_t n, float inv_scale,
                          uint8_t* q, const CpuKernelOptions& options) {
  return QuantizeImpl(x, n, inv_scale, q, options);
}
absl::Status QuantizeE4m3(const Bf16* x, int64_t n, float inv_scale, uint8_t* q,
                          const CpuKernelOptions& options) {
  return QuantizeImpl(x, n, inv_scale, q, options);
}

absl::StatusOr<E4m3Scale> QuantizeE4m3Dynamic(const float* x, int64_t n,
                                              uint8_t* q,
                                              const CpuKernelOptions& options) {
  return DynamicImpl(x, n, q, options);
}
absl::StatusOr<E4m3Scale> QuantizeE4m3Dynamic(const Bf16* x, int64_t n,
                                              uint8_t* q,
                                              const CpuKernelOptions& options) {
  return DynamicImpl(x, n, q, options);
}

absl::Status DequantizeE4m3(const uint8_t* q, int64_t n, float scale, float* x,
                            const CpuKernelOptions& options) {
  absl::StatusOr<const QuantizeKernels*> k =
      Prepare(q, n, x, options, "DequantizeE4m3");
  if (!k.ok()) return k.status();
  ForChunks(n, options, [&](int, int64_t begin, int64_t end) {
    (*k)->dequantize(q + begin, end - begin, scale, x + begin);
  });
  return absl::OkStatus();
}

}  // namespace octet
