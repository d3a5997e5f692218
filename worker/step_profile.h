// Where a forward step's device time goes: ProfilingBackend stands between
// a LlamaModel and its real backend, passes every operation through, and
// while a profile runs puts two clock marks (kernels/device_clock.h) around
// each one, so that each operation is timed as the device ran it. The
// times add up by part of the step (StepPart): each projection, found by
// its weight's address, activation quantization, norms, RoPE, the KV
// write, attention, sampling, host copies and waits, the rest.
//
// While profiling, can_capture() answers false, so a decode step runs
// eagerly (no graph replay): the profile names the work, and the gap
// between its sum and a graph-replayed step is launch and idle time.
// Collectives are not backend operations: between ranks they fall in that
// gap too. bench_decode --profile prints the table (StepProfileTable).
//
// Not thread-safe, like every Backend.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "worker/llama_model.h"

namespace octet {

enum class StepPart {
  kQkv,
  kO,
  kGateUp,
  kDown,
  kLmHead,
  kQuantize,  // AbsMax, Quantize, their fused forms, static quantization
  kNorm,      // RmsNorm, RmsNormHeads
  kRope,      // Rope, and RopeWriteKv (the KV write inside it)
  kKvWrite,   // WriteKv on its own
  kAttention,
  kSiluMul,
  kAdd,     // residual adds, biases
  kGather,  // embedding lookups, row gathers, logits interleaving
  kSampling,
  kHost,       // copies to and from the host, waits
  kOtherGemm,  // a GEMM whose weight no projection owns
};
inline constexpr int kNumStepParts = static_cast<int>(StepPart::kOtherGemm) + 1;

// "qkv", "o", ..., as the profile table prints them.
const char* StepPartName(StepPart part);

// One profiled stretch of work (usually one step).
struct StepProfile {
  std::array<double, kNumStepParts> ms{};      // device time per part
  std::array<int64_t, kNumStepParts> calls{};  // operations per part
  double wall_ms = 0;  // first mark to last: the ops and what lies between

  double sum_ms() const;
  int64_t total_calls() const;
  // The profile of `steps` alike steps, per step.
  StepProfile PerStep(int64_t steps) const;
};

class ProfilingBackend : public Backend {
 public:
  // `inner` must outlive this backend; buffers allocated through this one
  // belong to `inner`.
  explicit ProfilingBackend(Backend& inner) : inner_(inner) {}

  // Counts GEMMs on `model`'s weights as their projection's; weights of no
  // named model count as kOtherGemm.
  void NameProjections(const LlamaModel& model);

  // Starts timing every operation. While a profile runs, the model's
  // decode steps run eagerly (can_capture() is false).
  absl::Status Start();
  // Ends the profile begun by Start and adds up its times.
  absl::StatusOr<StepProfile> Stop();
  bool profiling() const { return clock_ != nullptr; }

  DeviceKind kind() const override { return inner_.kind(); }
  DType activation_dtype() const override { return inner_.activation_dtype(); }
  std::string Describe() const override { return inner_.Describe(); }
  void* cuda_stream() const override { return inner_.cuda_stream(); }
  int64_t max_head_dim() const override { return inner_.max_head_dim(); }
  int64_t attention_query_tile() const override {
    return inner_.attention_query_tile();
  }
  bool fuses_input_quantization() const override {
    return inner_.fuses_input_quantization();
  }
  bool has_block_sums() const override { return inner_.has_block_sums(); }
  bool can_capture() const override {
    return !profiling() && inner_.can_capture();
  }
  absl::Status BeginCapture() override { return inner_.BeginCapture(); }
  absl::StatusOr<std::unique_ptr<CapturedWork>> EndCapture() override {
    return inner_.EndCapture();
  }
  absl::StatusOr<std::unique_ptr<DeviceClock>> NewClock() override {
    return inner_.NewClock();
  }

  absl::StatusOr<DeviceBuffer> Allocate(size_t bytes) override;
  absl::Status CopyToDevice(void* dst, const void* src, size_t n) override;
  absl::Status CopyToHost(void* dst, const void* src, size_t n) override;
  absl::Status Synchronize() override;
  absl::Status Embedding(const void* table, DType dt, int64_t rows,
                         int64_t cols, int64_t row_begin, const int32_t* ids,
                         int64_t n, void* out) override;
  absl::Status RmsNorm(const void* x, const float* w, int64_t rows,
                       int64_t cols, float eps, void* out) override;
  absl::Status Add(void* x, const void* y, int64_t count) override;
  absl::Status Rope(void* x, int64_t rows, int64_t heads, int64_t head_dim,
                    int64_t stride, const int32_t* positions,
                    const float* inv_freq) override;
  absl::Status RmsNormHeads(void* x, int64_t rows, int64_t heads,
                            int64_t head_dim, int64_t stride, const float* w,
                            float eps) override;
  absl::Status AddBias(void* x, const float* bias, int64_t rows,
                       int64_t cols) override;
  absl::Status SiluMul(const void* x, int64_t rows, int64_t cols,
                       void* out) override;
  absl::StatusOr<bool> PlanAttention(const AttentionBatch& batch,
                                     const AttentionMetadata& meta,
                                     int64_t heads, int64_t kv_heads,
                                     int64_t head_dim) override;
  absl::Status WriteKv(const void* k, const void* v, int64_t stride,
                       int64_t kv_heads, int64_t head_dim,
                       const AttentionMetadata& meta, void* kc,
                       void* vc) override;
  absl::Status RopeWriteKv(void* qkv, int64_t heads, int64_t kv_heads,
                           int64_t head_dim, int64_t row_stride,
                           const float* inv_freq, const AttentionMetadata& meta,
                           void* k_cache, void* v_cache) override;
  absl::Status Attention(const void* q, int64_t stride, int64_t heads,
                         int64_t kv_heads, int64_t head_dim,
                         const AttentionMetadata& meta, const void* kc,
                         const void* vc, void* out) override;
  absl::Status LayOutWeight(LinearWeight& w, int64_t k_blocks) override {
    return inner_.LayOutWeight(w, k_blocks);
  }
  absl::Status Gemm(const void* x, int64_t rows, const LinearWeight& w, void* y,
                    DType y_dtype) override;
  absl::Status AbsMax(const void* x, int64_t rows, int64_t cols,
                      const RowGroups& groups, float* absmax) override;
  absl::Status Quantize(const void* x, int64_t rows, int64_t cols,
                        const RowGroups& groups, const float* absmax,
                        uint8_t* q, float* scale) override;
  absl::Status FusedAbsMax(const FusedInput& in, int64_t rows, int64_t cols,
                           const RowGroups& groups, float* absmax) override;
  absl::Status FusedQuantize(const FusedInput& in, int64_t rows, int64_t cols,
                             const RowGroups& groups, const float* absmax,
                             uint8_t* q, float* scale) override;
  absl::Status QuantizeGroups(const void* x, const FusedInput* in, int64_t rows,
                              int64_t cols, const RowGroups& groups,
                              float* absmax, uint8_t* q, float* scale) override;
  absl::Status QuantizeStatic(const void* x, int64_t count, const float* scale,
                              uint8_t* q) override;
  absl::Status GemmE4m3(const uint8_t* q, const float* q_scale,
                        const RowGroups& groups, int64_t rows,
                        const LinearWeight& w, void* y) override;
  GemmWays RowGroupGemmWays() const override {
    return inner_.RowGroupGemmWays();
  }
  absl::Status SetRowGroupGemmWay(int64_t rows, const LinearWeight& w,
                                  int way) override {
    return inner_.SetRowGroupGemmWay(rows, w, way);
  }
  absl::Status GemmBlockSums(const void* x, int64_t rows, const LinearWeight& w,
                             int64_t k_blocks, float* sums) override;
  absl::Status ScaleRows(const float* sums, int64_t rows, const float* q_scale,
                         const RowGroups& groups, const LinearWeight& w,
                         void* y, DType y_dtype, RowsInto into) override;
  absl::Status GemmScaledBlockSums(const void* x, int64_t rows,
                                   const LinearWeight& w, int64_t k_blocks,
                                   const float* q_scale,
                                   const RowGroups& groups, float* sums,
                                   void* y, DType y_dtype,
                                   RowsInto into) override;
  absl::StatusOr<SampleStaging> StageSample(
      int64_t vocab, absl::Span<const SampleRow> rows,
      const SampleLayout& layout) override;
  absl::Status SampleStaged(const float* logits, int64_t vocab) override;
  absl::Status TakeSampled(absl::Span<SampledToken> out) override;
  absl::Status InterleaveParts(const float* parts, int64_t num_parts,
                               int64_t rows, int64_t cols,
                               float* out) override;
  absl::Status GatherRows(const void* x, int64_t cols, const int32_t* rows,
                          int64_t n, void* out) override;

 protected:
  void Free(void*) override {}  // buffers belong to the inner backend

 private:
  // Runs `op`, with a mark before and after it while profiling.
  template <typename Op>
  absl::Status Timed(StepPart part, Op op);
  StepPart PartOf(const LinearWeight& w) const;

  Backend& inner_;
  absl::flat_hash_map<const void*, StepPart> projections_;
  std::unique_ptr<DeviceClock> clock_;
  std::vector<StepPart> timed_;  // the part of each pair of marks
};

// The profile table: a row per part with its ms, share and calls for each
// profile (columns named by `names`: "none", "fp8"), then the sum, the
// eager step's wall time and, against `step_ms` (each one's graph-replayed
// or usual step), the gap: step - sum. Shares are of step_ms. Every line
// starts with "profile" (for grep).
std::string StepProfileTable(const std::vector<std::string>& names,
                             const std::vector<StepProfile>& profiles,
                             const std::vector<double>& step_ms);

}  // namespace octet
