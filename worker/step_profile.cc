#include "worker/step_profile.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"

namespace octet {

const char* StepPartName(StepPart part) {
  static constexpr std::array<const char*, kNumStepParts> kNames = {
      "qkv",       "o",          "gate_up",   "down",     "lm_head",
      "quantize",  "norm",       "rope",      "kv_write", "attention",
      "silu_mul",  "add",        "gather",    "sampling", "host",
      "other_gemm"};
  return kNames[static_cast<int>(part)];
}

double StepProfile::sum_ms() const {
  double sum = 0;
  for (double v : ms) sum += v;
  return sum;
}

int64_t StepProfile::total_calls() const {
  int64_t n = 0;
  for (int64_t c : calls) n += c;
  return n;
}

StepProfile StepProfile::PerStep(int64_t steps) const {
  StepProfile p = *this;
  for (int i = 0; i < kNumStepParts; ++i) {
    p.ms[i] /= steps;
    p.calls[i] /= steps;
  }
  p.wall_ms /= steps;
  return p;
}

void ProfilingBackend::NameProjections(const LlamaModel& model) {
  using P = LlamaModel::Projection;
  for (int64_t l = 0; l < model.config().num_layers; ++l) {
    for (auto [which, part] : {std::pair{P::kQkv, StepPart::kQkv},
                               {P::kO, StepPart::kO},
                               {P::kGateUp, StepPart::kGateUp},
                               {P::kDown, StepPart::kDown}}) {
      projections_[model.projection(l, which).data.data()] = part;
    }
  }
  projections_[model.lm_head().data.data()] = StepPart::kLmHead;
}

absl::Status ProfilingBackend::Start() {
  if (profiling()) {
    return absl::FailedPreconditionError("a profile is running already");
  }
  OCTET_ASSIGN_OR_RETURN(clock_, inner_.NewClock());
  timed_.clear();
  return absl::OkStatus();
}

absl::StatusOr<StepProfile> ProfilingBackend::Stop() {
  if (!profiling()) return absl::FailedPreconditionError("no profile runs");
  std::unique_ptr<DeviceClock> clock = std::move(clock_);
  OCTET_ASSIGN_OR_RETURN(const std::vector<double> marks, clock->Read());
  if (marks.size() != 2 * timed_.size()) {
    return absl::InternalError(absl::StrCat("the profile has ", marks.size(),
                                            " marks for ", timed_.size(),
                                            " operations"));
  }
  StepProfile p;
  for (size_t i = 0; i < timed_.size(); ++i) {
    const int part = static_cast<int>(timed_[i]);
    p.ms[part] += marks[2 * i + 1] - marks[2 * i];
    ++p.calls[part];
  }
  if (!marks.empty()) p.wall_ms = marks.back();
  return p;
}

template <typename Op>
absl::Status ProfilingBackend::Timed(StepPart part, Op op) {
  if (!profiling()) return op();
  OCTET_RETURN_IF_ERROR(clock_->Mark());
  const absl::Status s = op();
  OCTET_RETURN_IF_ERROR(clock_->Mark());
  timed_.push_back(part);
  return s;
}

StepPart ProfilingBackend::PartOf(const LinearWeight& w) const {
  const auto it = projections_.find(w.data.data());
  return it == projections_.end() ? StepPart::kOtherGemm : it->second;
}

absl::StatusOr<DeviceBuffer> ProfilingBackend::Allocate(size_t bytes) {
  return inner_.Allocate(bytes);
}
absl::Status ProfilingBackend::CopyToDevice(void* dst, const void* src,
                                            size_t n) {
  return Timed(StepPart::kHost,
               [&] { return inner_.CopyToDevice(dst, src, n); });
}
absl::Status ProfilingBackend::CopyToHost(void* dst, const void* src,
                                          size_t n) {
  return Timed(StepPart::kHost, [&] { return inner_.CopyToHost(dst, src, n); });
}
absl::Status ProfilingBackend::Synchronize() {
  return Timed(StepPart::kHost, [&] { return inner_.Synchronize(); });
}
absl::Status ProfilingBackend::Embedding(const void* table, DType dt,
                                         int64_t rows, int64_t cols,
                                         int64_t row_begin, const int32_t* ids,
                                         int64_t n, void* out) {
  return Timed(StepPart::kGather, [&] {
    return inner_.Embedding(table, dt, rows, cols, row_begin, ids, n, out);
  });
}
absl::Status ProfilingBackend::RmsNorm(const void* x, const float* w,
                                       int64_t rows, int64_t cols, float eps,
                                       void* out) {
  return Timed(StepPart::kNorm,
               [&] { return inner_.RmsNorm(x, w, rows, cols, eps, out); });
}
absl::Status ProfilingBackend::Add(void* x, const void* y, int64_t count) {
  return Timed(StepPart::kAdd, [&] { return inner_.Add(x, y, count); });
}
absl::Status ProfilingBackend::Rope(void* x, int64_t rows, int64_t heads,
                                    int64_t head_dim, int64_t stride,
                                    const int32_t* positions,
                                    const float* inv_freq) {
  return Timed(StepPart::kRope, [&] {
    return inner_.Rope(x, rows, heads, head_dim, stride, positions, inv_freq);
  });
}
absl::Status ProfilingBackend::RmsNormHeads(void* x, int64_t rows,
                                            int64_t heads, int64_t head_dim,
                                            int64_t stride, const float* w,
                                            float eps) {
  return Timed(StepPart::kNorm, [&] {
    return inner_.RmsNormHeads(x, rows, heads, head_dim, stride, w, eps);
  });
}
absl::Status ProfilingBackend::AddBias(void* x, const float* bias,
                                       int64_t rows, int64_t cols) {
  return Timed(StepPart::kAdd,
               [&] { return inner_.AddBias(x, bias, rows, cols); });
}
absl::Status ProfilingBackend::SiluMul(const void* x, int64_t rows,
                                       int64_t cols, void* out) {
  return Timed(StepPart::kSiluMul,
               [&] { return inner_.SiluMul(x, rows, cols, out); });
}
absl::Status ProfilingBackend::WriteKv(const void* k, const void* v,
                                       int64_t stride, int64_t kv_heads,
                                       int64_t head_dim,
                                       const AttentionMetadata& meta, void* kc,
                                       void* vc) {
  return Timed(StepPart::kKvWrite, [&] {
    return inner_.WriteKv(k, v, stride, kv_heads, head_dim, meta, kc, vc);
  });
}
absl::Status ProfilingBackend::RopeWriteKv(void* qkv, int64_t heads,
                                           int64_t kv_heads, int64_t head_dim,
                                           int64_t row_stride,
                                           const float* inv_freq,
                                           const AttentionMetadata& meta,
                                           void* k_cache, void* v_cache) {
  return Timed(StepPart::kRope, [&] {
    return inner_.RopeWriteKv(qkv, heads, kv_heads, head_dim, row_stride,
                              inv_freq, meta, k_cache, v_cache);
  });
}
absl::Status ProfilingBackend::Attention(const void* q, int64_t stride,
                                         int64_t heads, int64_t kv_heads,
                                         int64_t head_dim,
                                         const AttentionMetadata& meta,
                                         const void* kc, const void* vc,
                                         void* out) {
  return Timed(StepPart::kAttention, [&] {
    return inner_.Attention(q, stride, heads, kv_heads, head_dim, meta, kc, vc,
                            out);
  });
}
absl::Status ProfilingBackend::Gemm(const void* x, int64_t rows,
                                    const LinearWeight& w, void* y,
                                    DType y_dtype) {
  return Timed(PartOf(w),
               [&] { return inner_.Gemm(x, rows, w, y, y_dtype); });
}
absl::Status ProfilingBackend::AbsMax(const void* x, int64_t rows,
                                      int64_t cols, const RowGroups& groups,
                                      float* absmax) {
  return Timed(StepPart::kQuantize,
               [&] { return inner_.AbsMax(x, rows, cols, groups, absmax); });
}
absl::Status ProfilingBackend::Quantize(const void* x, int64_t rows,
                                        int64_t cols, const RowGroups& groups,
                                        const float* absmax, uint8_t* q,
                                        float* scale) {
  return Timed(StepPart::kQuantize, [&] {
    return inner_.Quantize(x, rows, cols, groups, absmax, q, scale);
  });
}
absl::Status ProfilingBackend::FusedAbsMax(const FusedInput& in, int64_t rows,
                                           int64_t cols,
                                           const RowGroups& groups,
                                           float* absmax) {
  return Timed(StepPart::kQuantize, [&] {
    return inner_.FusedAbsMax(in, rows, cols, groups, absmax);
  });
}
absl::Status ProfilingBackend::FusedQuantize(const FusedInput& in,
                                             int64_t rows, int64_t cols,
                                             const RowGroups& groups,
                                             const float* absmax, uint8_t* q,
                                             float* scale) {
  return Timed(StepPart::kQuantize, [&] {
    return inner_.FusedQuantize(in, rows, cols, groups, absmax, q, scale);
  });
}
absl::Status ProfilingBackend::QuantizeGroups(
    const void* x, const FusedInput* in, int64_t rows, int64_t cols,
    const RowGroups& groups, float* absmax, uint8_t* q, float* scale) {
  return Timed(StepPart::kQuantize, [&] {
    return inner_.QuantizeGroups(x, in, rows, cols, groups, absmax, q, scale);
  });
}
absl::Status ProfilingBackend::QuantizeStatic(const void* x, int64_t count,
                                              const float* scale, uint8_t* q) {
  return Timed(StepPart::kQuantize,
               [&] { return inner_.QuantizeStatic(x, count, scale, q); });
}
absl::Status ProfilingBackend::GemmE4m3(const uint8_t* q, const float* q_scale,
                                        const RowGroups& groups, int64_t rows,
                                        const LinearWeight& w, void* y) {
  return Timed(PartOf(w), [&] {
    return inner_.GemmE4m3(q, q_scale, groups, rows, w, y);
  });
}
absl::Status ProfilingBackend::GemmBlockSums(const void* x, int64_t rows,
                                             const LinearWeight& w,
                                             int64_t k_blocks, float* sums) {
  return Timed(PartOf(w), [&] {
    return inner_.GemmBlockSums(x, rows, w, k_blocks, sums);
  });
}
absl::Status ProfilingBackend::ScaleRows(const float* sums, int64_t rows,
                                         const float* q_scale,
                                         const RowGroups& groups,
                                         const LinearWeight& w, void* y,
                                         DType y_dtype, RowsInto into) {
  return Timed(PartOf(w), [&] {
    return inner_.ScaleRows(sums, rows, q_scale, groups, w, y, y_dtype, into);
  });
}
absl::Status ProfilingBackend::GemmScaledBlockSums(
    const void* x, int64_t rows, const LinearWeight& w, int64_t k_blocks,
    const float* q_scale, const RowGroups& groups, float* sums, void* y,
    DType y_dtype, RowsInto into) {
  return Timed(PartOf(w), [&] {
    return inner_.GemmScaledBlockSums(x, rows, w, k_blocks, q_scale, groups,
                                      sums, y, y_dtype, into);
  });
}
// A host plan of attention (CUDA: FlashInfer's schedule, copied up) is
// host work.
absl::StatusOr<bool> ProfilingBackend::PlanAttention(
    const AttentionBatch& batch, const AttentionMetadata& meta, int64_t heads,
    int64_t kv_heads, int64_t head_dim) {
  absl::StatusOr<bool> planned;
  absl::Status s = Timed(StepPart::kHost, [&] {
    planned = inner_.PlanAttention(batch, meta, heads, kv_heads, head_dim);
    return planned.status();
  });
  if (!s.ok()) return s;
  return planned;
}
// Staging the rows is a copy up and taking the tokens a wait: host parts.
absl::StatusOr<SampleStaging> ProfilingBackend::StageSample(
    int64_t vocab, absl::Span<const SampleRow> rows,
    const SampleLayout& layout) {
  absl::StatusOr<SampleStaging> staged;
  absl::Status s = Timed(StepPart::kHost, [&] {
    staged = inner_.StageSample(vocab, rows, layout);
    return staged.status();
  });
  if (!s.ok()) return s;
  return staged;
}
absl::Status ProfilingBackend::SampleStaged(const float* logits,
                                            int64_t vocab) {
  return Timed(StepPart::kSampling,
               [&] { return inner_.SampleStaged(logits, vocab); });
}
absl::Status ProfilingBackend::TakeSampled(absl::Span<SampledToken> out) {
  return Timed(StepPart::kHost, [&] { return inner_.TakeSampled(out); });
}
absl::Status ProfilingBackend::InterleaveParts(const float* parts,
                                               int64_t num_parts, int64_t rows,
                                               int64_t cols, float* out) {
  return Timed(StepPart::kGather, [&] {
    return inner_.InterleaveParts(parts, num_parts, rows, cols, out);
  });
}
absl::Status ProfilingBackend::GatherRows(const void* x, int64_t cols,
                                          const int32_t* rows, int64_t n,
                                          void* out) {
  return Timed(StepPart::kGather,
               [&] { return inner_.GatherRows(x, cols, rows, n, out); });
}

std::string StepProfileTable(const std::vector<std::string>& names,
                             const std::vector<StepProfile>& profiles,
                             const std::vector<double>& step_ms) {
  std::string out = absl::StrFormat("profile %-10s", "part");
  for (const std::string& n : names) {
    out += absl::StrFormat(" %10s %7s %6s", n + "_ms", "share", "calls");
  }
  out += "\n";
  // One line: for profile i, ms_of(i) and its share of step_ms[i], and
  // calls_of(i) (or nothing, below 0).
  auto row = [&](const char* label, auto ms_of, auto calls_of) {
    std::string line = absl::StrFormat("profile %-10s", label);
    for (size_t i = 0; i < profiles.size(); ++i) {
      const double ms = ms_of(i);
      const int64_t calls = calls_of(i);
      line += absl::StrFormat(" %10.4f %6.1f%% %6s", ms, 100.0 * ms / step_ms[i],
                              calls < 0 ? "" : absl::StrCat(calls));
    }
    out += line + "\n";
  };
  auto none = [](size_t) { return int64_t{-1}; };
  for (int part = 0; part < kNumStepParts; ++part) {
    bool any = false;
    for (const StepProfile& p : profiles) any |= p.calls[part] > 0;
    if (!any) continue;
    row(StepPartName(static_cast<StepPart>(part)),
        [&](size_t i) { return profiles[i].ms[part]; },
        [&](size_t i) { return profiles[i].calls[part]; });
  }
  row("sum", [&](size_t i) { return profiles[i].sum_ms(); },
      [&](size_t i) { return profiles[i].total_calls(); });
  row("eager", [&](size_t i) { return profiles[i].wall_ms; }, none);
  row("step", [&](size_t i) { return step_ms[i]; }, none);
  row("gap", [&](size_t i) { return step_ms[i] - profiles[i].sum_ms(); },
      none);
  return out;
}

}  // namespace octet
