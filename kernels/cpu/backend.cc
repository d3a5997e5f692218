#include "kernels/cpu/backend.h"

#include <sys/mman.h>

#include <cstring>
#include <limits>
#include <new>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "kernels/aligned.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/quantize.h"
#include "kernels/fp8.h"

namespace octet {
namespace {

class CpuBackend : public Backend {
 public:
  explicit CpuBackend(const CpuKernelOptions& options)
      : options_(options), threads_(cpu_internal::ThreadCount(options)) {}

  DeviceKind kind() const override { return DeviceKind::kCpu; }
  DType activation_dtype() const override { return DType::kF32; }
  // Attention works on rows of any length.
  int64_t max_head_dim() const override {
    return std::numeric_limits<int64_t>::max();
  }
  std::string Describe() const override {
    return absl::StrCat("cpu (", CpuIsaName(ResolveCpuIsa(options_.isa)), ", ",
                        threads_, " threads)");
  }

  absl::StatusOr<DeviceBuffer> Allocate(size_t bytes) override {
    if (bytes == 0) return DeviceBuffer(this, nullptr, 0);
    // Sizes are rounded up to whole cache lines so vector tails never read
    // past the allocation.
    const size_t padded = (bytes + 63) / 64 * 64;
    AlignedAllocator<char> alloc;
    char* p = nullptr;
    try {
      p = alloc.allocate(padded);
    } catch (const std::bad_alloc&) {
      return absl::ResourceExhaustedError(
          absl::StrCat("cannot allocate ", bytes, " bytes of host memory"));
    }
    sizes_[p] = padded;
    return DeviceBuffer(this, p, bytes);
  }
  absl::Status CopyToDevice(void* dst, const void* src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
    return absl::OkStatus();
  }
  absl::Status CopyToHost(void* dst, const void* src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
    return absl::OkStatus();
  }
  absl::Status Synchronize() override { return absl::OkStatus(); }

  absl::Status Embedding(const void* table, DType table_dtype, int64_t rows,
                         int64_t cols, int64_t row_begin, const int32_t* ids,
                         int64_t n, void* out) override {
    if (table_dtype != DType::kF32 && table_dtype != DType::kBf16) {
      return absl::InvalidArgumentError("Embedding: table must be f32 or bf16");
    }
    cpu::EmbeddingRef(table, table_dtype, rows, cols, row_begin, ids, n,
                      static_cast<float*>(out));
    return absl::OkStatus();
  }
  absl::Status RmsNorm(const void* x, const float* weight, int64_t rows,
                       int64_t cols, float eps, void* out) override {
    cpu::RmsNormRef(static_cast<const float*>(x), weight, rows, cols, eps,
                    static_cast<float*>(out), threads_);
    return absl::OkStatus();
  }
  absl::Status Add(void* x, const void* y, int64_t count) override {
    cpu::AddRef(static_cast<float*>(x), static_cast<const float*>(y), count);
    return absl::OkStatus();
  }
  absl::Status Rope(void* x, int64_t rows, int64_t heads, int64_t head_dim,
                    int64_t row_stride, const int32_t* positions,
                    const float* inv_freq) override {
    cpu::RopeRef(static_cast<float*>(x), rows, heads, head_dim, row_stride,
                 positions, inv_freq);
    return absl::OkStatus();
  }
  absl::Status SiluMul(const void* x, int64_t rows, int64_t cols,
                       void* out) override {
    cpu::SiluMulRef(static_cast<const float*>(x), rows, cols,
                    static_cast<float*>(out));
    return absl::OkStatus();
  }
  absl::Status WriteKv(const void* k, const void* v, int64_t row_stride,
                       int64_t kv_heads, int64_t head_dim,
                       const AttentionMetadata& meta, void* k_cache,
                       void* v_cache) override {
    cpu::WriteKvRef(static_cast<const float*>(k), static_cast<const float*>(v),
                    row_stride, kv_heads, head_dim, meta,
                    static_cast<float*>(k_cache), static_cast<float*>(v_cache));
    return absl::OkStatus();
  }
  absl::Status Attention(const void* q, int64_t q_stride, int64_t heads,
                         int64_t kv_heads, int64_t head_dim,
                         const AttentionMetadata& meta, const void* k_cache,
                         const void* v_cache, void* out) override {
    if (kv_heads <= 0 || heads % kv_heads != 0) {
      return absl::InvalidArgumentError(
          "Attention: kv_heads must divide heads");
    }
    cpu::AttentionRef(static_cast<const float*>(q), q_stride, heads, kv_heads,
                      head_dim, meta, static_cast<const float*>(k_cache),
                      static_cast<const float*>(v_cache),
                      static_cast<float*>(out), threads_);
    return absl::OkStatus();
  }
  absl::Status Gemm(const void* x, int64_t rows, const LinearWeight& w, void* y,
                    DType y_dtype) override {
    if (y_dtype != DType::kF32) {
      return absl::InvalidArgumentError("CPU Gemm: output must be f32");
    }
    return GemmF32(static_cast<const float*>(x), w.data.data(), w.dtype, rows,
                   w.out, w.in, static_cast<float*>(y), options_);
  }
  absl::Status AbsMax(const void* x, int64_t count, float* absmax) override {
    absl::StatusOr<float> m =
        octet::AbsMax(static_cast<const float*>(x), count, options_);
    if (!m.ok()) return m.status();
    *absmax = *m;
    return absl::OkStatus();
  }
  absl::Status Quantize(const void* x, int64_t count, const float* absmax,
                        uint8_t* q, float* scale) override {
    const E4m3Scale s = E4m3ScaleFromAbsmax(*absmax);
    *scale = s.scale;
    return QuantizeE4m3(static_cast<const float*>(x), count, s.inv, q,
                        options_);
  }
  absl::Status QuantizeStatic(const void* x, int64_t count, const float* scale,
                              uint8_t* q) override {
    return QuantizeE4m3(static_cast<const float*>(x), count, 1.0f / *scale, q,
                        options_);
  }
  absl::Status GemmE4m3(const uint8_t* q, const float* q_scale, int64_t rows,
                        const LinearWeight& w, void* y) override {
    if (w.dtype != DType::kE4m3) {
      return absl::InvalidArgumentError("GemmE4m3: weights are not e4m3");
    }
    return octet::GemmE4m3(q, *q_scale, w.data.as<uint8_t>(),
                           *w.scale.as<float>(), rows, w.out, w.in, y,
                           DType::kF32, options_);
  }
  absl::Status Argmax(const float* x, int64_t rows, int64_t cols,
                      int32_t* out) override {
    cpu::ArgmaxRef(x, rows, cols, out);
    return absl::OkStatus();
  }
  absl::Status GatherRows(const void* x, int64_t cols, const int32_t* rows,
                          int64_t n, void* out) override {
    cpu::GatherRowsRef(static_cast<const float*>(x), cols, rows, n,
                       static_cast<float*>(out));
    return absl::OkStatus();
  }

 protected:
  void Free(void* data) override {
    auto it = sizes_.find(data);
    if (it == sizes_.end()) return;
    AlignedAllocator<char>().deallocate(static_cast<char*>(data), it->second);
    sizes_.erase(it);
  }

 private:
  const CpuKernelOptions options_;
  const int threads_;
  absl::flat_hash_map<void*, size_t> sizes_;
};

}  // namespace

std::unique_ptr<Backend> NewCpuBackend(const CpuKernelOptions& options) {
  return std::make_unique<CpuBackend>(options);
}

}  // namespace octet
