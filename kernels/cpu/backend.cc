// CpuBackend, the Backend of kernels/cpu/backend.h: each operation checks
// what it cheaply can and hands the work to the CPU kernels (gemm.h,
// quantize.h, ops.h), on binary32 activations (which a GEMM over bfloat16
// weights rounds to bfloat16 first: UnquantizedSums). Row groups (one FP8
// scale per sequence) are host memory here, so they are checked for their
// rules and spread into one scale per row before a GEMM. It has block sums
// (GemmBlockSums, ScaleRows: docs/design.md, "TP invariance") and captures
// nothing; its "device" memory is host memory from AlignedAllocator
// (kernels/aligned.h), rounded up to whole cache lines.
#include "kernels/cpu/backend.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <new>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "kernels/aligned.h"
#include "kernels/cpu/activation.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/panels.h"
#include "kernels/cpu/quantize.h"
#include "kernels/fp8.h"

namespace octet {
namespace {

// The [begin, end) rows of each group (RowGroups' rules checked: the map is
// host memory on this backend).
absl::StatusOr<std::vector<std::pair<int64_t, int64_t>>> GroupRanges(
    int64_t rows, const RowGroups& groups, const char* what) {
  if (groups.count < 1 || rows < groups.count ||
      (groups.count > 1 && groups.row_group == nullptr)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", groups.count, " row groups over ", rows,
                     " rows (need 1 <= groups <= rows and a row map)"));
  }
  std::vector<std::pair<int64_t, int64_t>> ranges(groups.count, {0, rows});
  if (groups.row_group == nullptr) return ranges;
  int64_t g = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t next = groups.row_group[r];
    if (r == 0 ? next != 0 : (next != g && next != g + 1)) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": row ", r, " is in group ", next,
                       "; groups must be consecutive rows numbered from 0"));
    }
    if (next != g) {
      ranges[g].second = r;
      ranges[next].first = r;
      g = next;
    }
  }
  if (g != groups.count - 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": rows cover ", g + 1, " of ", groups.count, " groups"));
  }
  return ranges;
}

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
  absl::Status RmsNormHeads(void* x, int64_t rows, int64_t heads,
                            int64_t head_dim, int64_t row_stride,
                            const float* weight, float eps) override {
    cpu::RmsNormHeadsRef(static_cast<float*>(x), rows, heads, head_dim,
                         row_stride, weight, eps);
    return absl::OkStatus();
  }
  absl::Status AddBias(void* x, const float* bias, int64_t rows,
                       int64_t cols) override {
    cpu::AddBiasRef(static_cast<float*>(x), bias, rows, cols);
    return absl::OkStatus();
  }
  absl::Status SiluMul(const void* x, int64_t rows, int64_t cols,
                       void* out) override {
    return cpu::SiluMul(static_cast<const float*>(x), rows, cols,
                        static_cast<float*>(out), options_);
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
    return cpu::Attention(
        static_cast<const float*>(q), q_stride, heads, kv_heads, head_dim, meta,
        static_cast<const float*>(k_cache), static_cast<const float*>(v_cache),
        static_cast<float*>(out), options_);
  }
  // bfloat16 and e4m3 weights become panels (kernels/cpu/panels.h) where
  // the kernels are AVX-512's, for the outer-product GEMMs; the other
  // levels' kernels read rows.
  absl::Status LayOutWeight(LinearWeight& w, int64_t k_blocks) override {
    if (k_blocks < 1 || (w.in > 0 && w.in % k_blocks != 0)) {
      return absl::InvalidArgumentError(absl::StrCat("LayOutWeight: K = ", w.in,
                                                     " does not split into ",
                                                     k_blocks, " blocks"));
    }
    if (w.layout != LinearWeight::Layout::kRows) {
      return absl::FailedPreconditionError(
          "LayOutWeight: the weight is laid out already");
    }
    const bool bf16 = w.dtype == DType::kBf16;
    if ((!bf16 && w.dtype != DType::kE4m3) || !options_.panels ||
        ResolveCpuIsa(options_.isa) != CpuIsa::kAvx512) {
      return absl::OkStatus();
    }
    absl::StatusOr<DeviceBuffer> panels =
        Allocate(bf16 ? Bf16PanelElements(w.out, w.in, k_blocks) * sizeof(Bf16)
                      : E4m3PanelBytes(w.out, w.in, k_blocks));
    if (!panels.ok()) return panels.status();
    absl::Status s =
        bf16 ? PackBf16Panels(w.data.as<Bf16>(), w.out, w.in, k_blocks,
                              panels->as<Bf16>(), threads_)
             : PackE4m3Panels(w.data.as<uint8_t>(), w.out, w.in, k_blocks,
                              panels->as<uint8_t>(), threads_);
    if (!s.ok()) return s;
    w.data = *std::move(panels);
    w.layout = bf16 ? LinearWeight::Layout::kBf16Panels
                    : LinearWeight::Layout::kE4m3Panels;
    w.layout_k_blocks = k_blocks;
    return absl::OkStatus();
  }
  absl::Status Gemm(const void* x, int64_t rows, const LinearWeight& w, void* y,
                    DType y_dtype) override {
    if (y_dtype != DType::kF32) {
      return absl::InvalidArgumentError("CPU Gemm: output must be f32");
    }
    return UnquantizedSums(static_cast<const float*>(x), rows, w, 1,
                           static_cast<float*>(y));
  }
  absl::Status AbsMax(const void* x, int64_t rows, int64_t cols,
                      const RowGroups& groups, float* absmax) override {
    auto ranges = GroupRanges(rows, groups, "AbsMax");
    if (!ranges.ok()) return ranges.status();
    const float* xf = static_cast<const float*>(x);
    for (int64_t g = 0; g < groups.count; ++g) {
      const auto [begin, end] = (*ranges)[g];
      absl::StatusOr<float> m =
          octet::AbsMax(xf + begin * cols, (end - begin) * cols, options_);
      if (!m.ok()) return m.status();
      absmax[g] = *m;
    }
    return absl::OkStatus();
  }
  absl::Status Quantize(const void* x, int64_t rows, int64_t cols,
                        const RowGroups& groups, const float* absmax,
                        uint8_t* q, float* scale) override {
    auto ranges = GroupRanges(rows, groups, "Quantize");
    if (!ranges.ok()) return ranges.status();
    const float* xf = static_cast<const float*>(x);
    for (int64_t g = 0; g < groups.count; ++g) {
      const auto [begin, end] = (*ranges)[g];
      const E4m3Scale s = E4m3ScaleFromAbsmax(absmax[g]);
      scale[g] = s.scale;
      absl::Status st = QuantizeE4m3(xf + begin * cols, (end - begin) * cols,
                                     s.inv, q + begin * cols, options_);
      if (!st.ok()) return st;
    }
    return absl::OkStatus();
  }
  // The CPU makes the values into its own scratch and quantizes them there:
  // the same functions as unfused, so the same bits.
  absl::Status FusedAbsMax(const FusedInput& in, int64_t rows, int64_t cols,
                           const RowGroups& groups, float* absmax) override {
    absl::StatusOr<const float*> x = Produce(in, rows, cols);
    if (!x.ok()) return x.status();
    return AbsMax(*x, rows, cols, groups, absmax);
  }
  absl::Status FusedQuantize(const FusedInput& in, int64_t rows, int64_t cols,
                             const RowGroups& groups, const float* absmax,
                             uint8_t* q, float* scale) override {
    absl::StatusOr<const float*> x = Produce(in, rows, cols);
    if (!x.ok()) return x.status();
    return Quantize(*x, rows, cols, groups, absmax, q, scale);
  }
  absl::Status QuantizeStatic(const void* x, int64_t count, const float* scale,
                              uint8_t* q) override {
    return QuantizeE4m3(static_cast<const float*>(x), count, 1.0f / *scale, q,
                        options_);
  }
  absl::Status GemmE4m3(const uint8_t* q, const float* q_scale,
                        const RowGroups& groups, int64_t rows,
                        const LinearWeight& w, void* y) override {
    if (w.dtype != DType::kE4m3) {
      return absl::InvalidArgumentError("GemmE4m3: weights are not e4m3");
    }
    if (w.layout == LinearWeight::Layout::kE4m3Panels) {
      return PanelGemmE4m3(q, q_scale, groups, rows, w, y);
    }
    const float w_scale = *w.scale.as<float>();
    if (groups.count == 1 && !w.scale_per_row) {
      return octet::GemmE4m3(q, *q_scale, w.data.as<uint8_t>(), w_scale, rows,
                             w.out, w.in, y, DType::kF32, options_);
    }
    absl::Status s = SpreadRowScales(rows, q_scale, groups, "GemmE4m3");
    if (!s.ok()) return s;
    if (w.scale_per_row) {
      return octet::GemmE4m3ChannelScales(
          q, row_scales_.data(), w.data.as<uint8_t>(), w.scale.as<float>(),
          rows, w.out, w.in, y, DType::kF32, options_);
    }
    return octet::GemmE4m3RowScales(q, row_scales_.data(), w.data.as<uint8_t>(),
                                    w_scale, rows, w.out, w.in, y, DType::kF32,
                                    options_);
  }
  bool has_block_sums() const override { return true; }
  absl::Status GemmBlockSums(const void* x, int64_t rows, const LinearWeight& w,
                             int64_t k_blocks, float* sums) override {
    if (w.layout == LinearWeight::Layout::kE4m3Panels) {
      if (!PanelsServe(w, k_blocks)) return PanelsRefuse(w, k_blocks);
      return GemmE4m3PanelBlockSums(static_cast<const uint8_t*>(x),
                                    w.data.as<uint8_t>(), rows, w.out, w.in,
                                    k_blocks, sums, options_);
    }
    if (w.dtype == DType::kE4m3) {
      return octet::GemmE4m3BlockSums(static_cast<const uint8_t*>(x),
                                      w.data.as<uint8_t>(), rows, w.out, w.in,
                                      k_blocks, sums, options_);
    }
    return UnquantizedSums(static_cast<const float*>(x), rows, w, k_blocks,
                           sums);
  }
  absl::Status ScaleRows(const float* sums, int64_t rows, const float* q_scale,
                         const RowGroups& groups, const LinearWeight& w,
                         void* y, DType y_dtype, RowsInto into) override {
    if (y_dtype != DType::kF32) {
      return absl::InvalidArgumentError(
          "ScaleRows: the CPU backend writes binary32");
    }
    float* out = static_cast<float*>(y);
    const bool add = into == RowsInto::kAdd;
    if (add && out == sums) {
      return absl::InvalidArgumentError("ScaleRows: adds into the sums");
    }
    if (q_scale == nullptr) {  // no scales: the sums as they are
      if (add) {
        cpu::AddRef(out, sums, rows * w.out);
      } else if (out != sums) {
        std::memcpy(out, sums, rows * w.out * sizeof(float));
      }
      return absl::OkStatus();
    }
    if (w.dtype != DType::kE4m3) {
      return absl::InvalidArgumentError("ScaleRows: weights are not e4m3");
    }
    absl::Status s = SpreadRowScales(rows, q_scale, groups, "ScaleRows");
    if (!s.ok()) return s;
    const float* w_scale = w.scale.as<float>();
    // The scales' product first, as the GEMMs take it (per-row weight
    // scales: column c's own); the sum rounded, then added as Add adds.
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < w.out; ++c) {
        const float scale = row_scales_[r] * w_scale[w.scale_per_row ? c : 0];
        const float v = sums[r * w.out + c] * scale;
        out[r * w.out + c] = add ? out[r * w.out + c] + v : v;
      }
    }
    return absl::OkStatus();
  }
  // Staging copies the rows and their histories, as CUDA copies them to
  // the device; the logits are host memory: each row is sampled where it
  // lies, with the host reference.
  absl::StatusOr<SampleStaging> StageSample(
      int64_t vocab, absl::Span<const SampleRow> rows,
      const SampleLayout& layout) override {
    absl::StatusOr<SampleStaging> plan = PlanSampleStaging(vocab, rows, layout);
    if (!plan.ok()) return plan.status();
    size_t history = 0;
    for (const SampleRow& r : rows) history += r.history.size();
    staged_history_.clear();
    staged_history_.reserve(history);  // the spans below stay valid
    staged_rows_.assign(rows.begin(), rows.end());
    for (SampleRow& r : staged_rows_) {
      const size_t begin = staged_history_.size();
      staged_history_.insert(staged_history_.end(), r.history.begin(),
                             r.history.end());
      r.history = absl::MakeConstSpan(staged_history_).subspan(begin);
    }
    staged_rows_.resize(plan->rows, kPaddingSampleRow);
    staged_vocab_ = vocab;
    sampled_.clear();
    return plan;
  }
  absl::Status SampleStaged(const float* logits, int64_t vocab) override {
    if (vocab != staged_vocab_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "SampleStaged: vocab ", vocab, ", staged for ", staged_vocab_));
    }
    sampled_.resize(staged_rows_.size());
    for (size_t i = 0; i < staged_rows_.size(); ++i) {
      const SampleRow& r = staged_rows_[i];
      sampled_[i] = SampleOne(
          {logits + r.logits_row * vocab, static_cast<size_t>(vocab)}, r);
    }
    return absl::OkStatus();
  }
  absl::Status TakeSampled(absl::Span<SampledToken> out) override {
    if (out.size() > sampled_.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("TakeSampled: ", out.size(), " tokens asked, ",
                       sampled_.size(), " sampled"));
    }
    std::copy_n(sampled_.begin(), out.size(), out.begin());
    return absl::OkStatus();
  }
  absl::Status InterleaveParts(const float* parts, int64_t num_parts,
                               int64_t rows, int64_t cols,
                               float* out) override {
    for (int64_t p = 0; p < num_parts; ++p) {
      for (int64_t r = 0; r < rows; ++r) {
        std::memcpy(out + r * num_parts * cols + p * cols,
                    parts + (p * rows + r) * cols, cols * sizeof(float));
      }
    }
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
  // An unquantized GEMM's sums over `k_blocks` blocks of K: bfloat16
  // weights take bfloat16 dot products (the activations rounded to
  // bfloat16, as every BF16 engine does; docs/design.md, "FP8 numerics"),
  // binary32 weights binary32 ones.
  absl::Status UnquantizedSums(const float* x, int64_t rows,
                               const LinearWeight& w, int64_t k_blocks,
                               float* sums) {
    if (w.layout == LinearWeight::Layout::kBf16Panels) {
      if (!PanelsServe(w, k_blocks)) return PanelsRefuse(w, k_blocks);
      return GemmRoundedBf16PanelBlockSums(x, w.data.as<Bf16>(), rows, w.out,
                                           w.in, k_blocks, sums, options_);
    }
    if (w.dtype == DType::kBf16) {
      return GemmRoundedBf16BlockSums(x, w.data.as<Bf16>(), rows, w.out, w.in,
                                      k_blocks, sums, options_);
    }
    return GemmF32BlockSums(x, w.data.data(), w.dtype, rows, w.out, w.in,
                            k_blocks, sums, options_);
  }

  // Whether panels packed for w.layout_k_blocks K blocks are those of
  // k_blocks: the same count, or blocks whose length is a multiple of the
  // format's K step in both (each padded block is then the block itself:
  // panels.h).
  static bool PanelsServe(const LinearWeight& w, int64_t k_blocks) {
    if (k_blocks == w.layout_k_blocks) return true;
    const int64_t step = w.layout == LinearWeight::Layout::kE4m3Panels
                             ? kE4m3PanelStep
                             : kBf16PanelStep;
    return k_blocks >= 1 && w.in % k_blocks == 0 &&
           (w.in / k_blocks) % step == 0 &&
           (w.in / w.layout_k_blocks) % step == 0;
  }
  static absl::Status PanelsRefuse(const LinearWeight& w, int64_t k_blocks) {
    return absl::InvalidArgumentError(
        absl::StrCat("CPU GEMM: a weight packed for ", w.layout_k_blocks,
                     " K blocks cannot be summed in ", k_blocks));
  }

  // GemmE4m3 over e4m3 panels: one activation scale per row always (the
  // per-tensor scale in every row gives the same product of scales).
  absl::Status PanelGemmE4m3(const uint8_t* q, const float* q_scale,
                             const RowGroups& groups, int64_t rows,
                             const LinearWeight& w, void* y) {
    absl::Status s = SpreadRowScales(rows, q_scale, groups, "GemmE4m3");
    if (!s.ok()) return s;
    if (w.scale_per_row) {
      return GemmE4m3PanelChannelScales(
          q, row_scales_.data(), w.data.as<uint8_t>(), w.scale.as<float>(),
          rows, w.out, w.in, y, DType::kF32, options_);
    }
    return GemmE4m3PanelRowScales(q, row_scales_.data(), w.data.as<uint8_t>(),
                                  *w.scale.as<float>(), rows, w.out, w.in, y,
                                  DType::kF32, options_);
  }

  // The values `in` produces, in produced_ (grown to the largest call).
  absl::StatusOr<const float*> Produce(const FusedInput& in, int64_t rows,
                                       int64_t cols) {
    if (rows < 0 || cols < 0) {
      return absl::InvalidArgumentError("FusedInput: negative shape");
    }
    produced_.resize(std::max<size_t>(produced_.size(), rows * cols));
    absl::Status s =
        in.op == FusedInput::Op::kRmsNorm
            ? RmsNorm(in.x, in.weight, rows, cols, in.eps, produced_.data())
            : SiluMul(in.x, rows, cols, produced_.data());
    if (!s.ok()) return s;
    return produced_.data();
  }
  std::vector<float> produced_;

  // row_scales_[r] = q_scale[g] for each row r of group g.
  absl::Status SpreadRowScales(int64_t rows, const float* q_scale,
                               const RowGroups& groups, const char* what) {
    auto ranges = GroupRanges(rows, groups, what);
    if (!ranges.ok()) return ranges.status();
    row_scales_.resize(rows);
    for (int64_t g = 0; g < groups.count; ++g) {
      const auto [begin, end] = (*ranges)[g];
      std::fill(row_scales_.begin() + begin, row_scales_.begin() + end,
                q_scale[g]);
    }
    return absl::OkStatus();
  }

  const CpuKernelOptions options_;
  const int threads_;
  absl::flat_hash_map<void*, size_t> sizes_;
  std::vector<float> row_scales_;  // per-row activation scales
  // StageSample's rows, their histories (the rows' spans point here) and
  // vocabulary; SampleStaged's tokens.
  std::vector<SampleRow> staged_rows_;
  std::vector<int32_t> staged_history_;
  int64_t staged_vocab_ = 0;
  std::vector<SampledToken> sampled_;
};

}  // namespace

std::unique_ptr<Backend> NewCpuBackend(const CpuKernelOptions& options) {
  return std::make_unique<CpuBackend>(options);
}

}  // namespace octet
