// A Backend that captures work as CUDA graphs do, around a real backend
// (the CPU's): between BeginCapture and EndCapture each operation is recorded
// with its arguments instead of run, and Replay runs the recording again.
// Like stream capture, it refuses host work while capturing (Allocate,
// copies, Synchronize, StageSample, TakeSampled, PlanAttention), and a
// replay reads whatever the named buffers hold then.
//
// Why: LlamaModel's decode graphs (padding, fixed buffers, buckets,
// invalidation) are host bookkeeping that must be right before a GPU ever
// runs them; with this backend the CPU tests run that bookkeeping exactly
// as the CUDA backend would, and compare with the model run eagerly.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/backend.h"

namespace octet::testing {

class CapturingBackend : public Backend {
 public:
  explicit CapturingBackend(std::unique_ptr<Backend> inner)
      : inner_(std::move(inner)) {}

  int64_t captures() const { return captures_; }
  int64_t replays() const { return replays_; }
  // FusedQuantize calls so far, and QuantizeGroups calls with a producer
  // (whether the model fuses its FP8 inputs).
  int64_t fused_quantizes() const { return fused_quantizes_; }
  // QuantizeGroups calls so far (inputs quantized in one call).
  int64_t one_call_quantizes() const { return one_call_quantizes_; }
  // Fail the next capture's EndCapture (a capture CUDA refuses).
  void FailNextCapture() { fail_next_ = true; }
  // Answer the next StageSample as if its buffers had moved (CUDA's grow
  // when a history outgrows them), or with an error (CUDA out of memory).
  void MoveSampleBuffersAtNextStage() { move_sample_buffers_ = true; }
  void FailNextStage() { fail_next_stage_ = true; }
  // Device work run outside any capture or replay, and host waits, so far:
  // a replayed decode step has none of the first and one of the second.
  int64_t eager_ops() const { return eager_ops_; }
  int64_t host_waits() const { return host_waits_; }
  // Plan a prefill's attention on the host, as the CUDA backend does with
  // FlashInfer: PlanAttention then checks the batch it is given against
  // the device metadata (each sequence's rows, consecutive positions ending
  // at its context) and plans a batch with more tokens than sequences; an
  // Attention call under a plan must name it (meta.host_planned) and be of
  // the planned batch. The inner backend computes as before.
  void PlanPrefillsOnTheHost() { plans_prefills_ = true; }
  int64_t plan_requests() const { return plan_requests_; }  // every call
  int64_t host_plans() const { return host_plans_; }  // those that planned
  int64_t planned_attentions() const { return planned_attentions_; }
  // Claim, as the CUDA backend does, that fused FP8 inputs save work, so
  // that the model takes that path here too (the inner backend still
  // computes them, through its own FusedAbsMax / FusedQuantize).
  void ClaimFusedInputQuantization() { claims_fusion_ = true; }
  // Other stream work (a communicator's collectives, as NCCL enqueues
  // them): run now, or recorded while capturing and run by each replay.
  absl::Status Enqueue(std::function<absl::Status()> work) {
    return Do(std::move(work));
  }
  // Asked before every host read of device memory or wait on the device
  // (CopyToHost, Synchronize, TakeSampled); an error refuses the read.
  void set_host_wait_check(std::function<absl::Status()> check) {
    host_wait_check_ = std::move(check);
  }

  DeviceKind kind() const override { return inner_->kind(); }
  void* cuda_stream() const override { return inner_->cuda_stream(); }
  DType activation_dtype() const override { return inner_->activation_dtype(); }
  std::string Describe() const override {
    return "capturing " + inner_->Describe();
  }
  int64_t max_head_dim() const override { return inner_->max_head_dim(); }
  int64_t attention_query_tile() const override {
    return inner_->attention_query_tile();
  }
  bool has_block_sums() const override { return inner_->has_block_sums(); }
  bool fuses_input_quantization() const override {
    return claims_fusion_ || inner_->fuses_input_quantization();
  }

  absl::StatusOr<DeviceBuffer> Allocate(size_t bytes) override {
    if (capturing_) return Refuse("Allocate");
    return inner_->Allocate(bytes);
  }
  absl::Status CopyToDevice(void* dst, const void* src, size_t n) override {
    if (capturing_) return Refuse("CopyToDevice");
    return inner_->CopyToDevice(dst, src, n);
  }
  absl::Status CopyToHost(void* dst, const void* src, size_t n) override {
    if (absl::Status s = HostWait("CopyToHost"); !s.ok()) return s;
    return inner_->CopyToHost(dst, src, n);
  }
  absl::Status Synchronize() override {
    if (absl::Status s = HostWait("Synchronize"); !s.ok()) return s;
    return inner_->Synchronize();
  }
  // Staging is host work (a copy up); taking the tokens a wait. Sampling
  // the staged rows is device work, recorded like the rest.
  absl::StatusOr<SampleStaging> StageSample(
      int64_t vocab, absl::Span<const SampleRow> rows,
      const SampleLayout& layout) override {
    if (capturing_) return Refuse("StageSample");
    if (fail_next_stage_) {
      fail_next_stage_ = false;
      return absl::ResourceExhaustedError("StageSample (CapturingBackend)");
    }
    absl::StatusOr<SampleStaging> staged =
        inner_->StageSample(vocab, rows, layout);
    if (staged.ok() && move_sample_buffers_) {
      move_sample_buffers_ = false;
      staged->moved = true;
    }
    return staged;
  }
  absl::Status SampleStaged(const float* logits, int64_t vocab) override {
    return Do([=, this] { return inner_->SampleStaged(logits, vocab); });
  }
  absl::Status TakeSampled(absl::Span<SampledToken> out) override {
    if (absl::Status s = HostWait("TakeSampled"); !s.ok()) return s;
    return inner_->TakeSampled(out);
  }

  absl::StatusOr<bool> PlanAttention(const AttentionBatch& batch,
                                     const AttentionMetadata& meta,
                                     int64_t heads, int64_t kv_heads,
                                     int64_t head_dim) override {
    if (capturing_) return Refuse("PlanAttention");
    ++plan_requests_;
    planned_tokens_ = -1;
    if (!plans_prefills_) {
      return inner_->PlanAttention(batch, meta, heads, kv_heads, head_dim);
    }
    const size_t seqs = batch.context.size();
    if (batch.query_start.size() != seqs + 1 || batch.query_start[0] != 0 ||
        batch.query_start[seqs] != meta.num_tokens) {
      return absl::InternalError("PlanAttention: rows do not match the batch");
    }
    for (size_t s = 0; s < seqs; ++s) {  // the CPU's metadata is host memory
      for (int32_t r = batch.query_start[s]; r < batch.query_start[s + 1];
           ++r) {
        const int32_t back = batch.query_start[s + 1] - 1 - r;
        if (meta.token_seq[r] != static_cast<int32_t>(s) ||
            meta.positions[r] != batch.context[s] - 1 - back) {
          return absl::InternalError(absl::StrCat(
              "PlanAttention: row ", r, " is not sequence ", s, "'s"));
        }
      }
    }
    if (batch.query_start[seqs] == static_cast<int32_t>(seqs)) return false;
    ++host_plans_;
    planned_tokens_ = meta.num_tokens;
    return true;
  }

  bool can_capture() const override { return true; }
  absl::Status BeginCapture() override {
    if (capturing_) return Refuse("BeginCapture");
    capturing_ = true;
    recording_.clear();
    return absl::OkStatus();
  }
  absl::StatusOr<std::unique_ptr<CapturedWork>> EndCapture() override {
    if (!capturing_) return absl::FailedPreconditionError("no capture");
    capturing_ = false;
    if (fail_next_) {
      fail_next_ = false;
      return absl::InternalError("capture refused (CapturingBackend)");
    }
    ++captures_;
    return std::unique_ptr<CapturedWork>(
        new Recording(this, std::move(recording_)));
  }

  // Device work: run now, or recorded while capturing. Arguments are taken
  // by value (pointers included), as a graph takes a kernel's arguments.
  absl::Status Embedding(const void* table, DType dt, int64_t rows,
                         int64_t cols, int64_t row_begin, const int32_t* ids,
                         int64_t n, void* out) override {
    return Do([=, this] {
      return inner_->Embedding(table, dt, rows, cols, row_begin, ids, n, out);
    });
  }
  absl::Status RmsNorm(const void* x, const float* w, int64_t rows,
                       int64_t cols, float eps, void* out) override {
    return Do(
        [=, this] { return inner_->RmsNorm(x, w, rows, cols, eps, out); });
  }
  absl::Status Add(void* x, const void* y, int64_t count) override {
    return Do([=, this] { return inner_->Add(x, y, count); });
  }
  absl::Status Rope(void* x, int64_t rows, int64_t heads, int64_t head_dim,
                    int64_t stride, const int32_t* positions,
                    const float* inv_freq) override {
    return Do([=, this] {
      return inner_->Rope(x, rows, heads, head_dim, stride, positions,
                          inv_freq);
    });
  }
  absl::Status RmsNormHeads(void* x, int64_t rows, int64_t heads,
                            int64_t head_dim, int64_t stride, const float* w,
                            float eps) override {
    return Do([=, this] {
      return inner_->RmsNormHeads(x, rows, heads, head_dim, stride, w, eps);
    });
  }
  absl::Status AddBias(void* x, const float* bias, int64_t rows,
                       int64_t cols) override {
    return Do([=, this] { return inner_->AddBias(x, bias, rows, cols); });
  }
  absl::Status SiluMul(const void* x, int64_t rows, int64_t cols,
                       void* out) override {
    return Do([=, this] { return inner_->SiluMul(x, rows, cols, out); });
  }
  absl::Status WriteKv(const void* k, const void* v, int64_t stride,
                       int64_t kv_heads, int64_t head_dim,
                       const AttentionMetadata& meta, void* kc,
                       void* vc) override {
    return Do([=, this] {
      return inner_->WriteKv(k, v, stride, kv_heads, head_dim, meta, kc, vc);
    });
  }
  absl::Status RopeWriteKv(void* qkv, int64_t heads, int64_t kv_heads,
                           int64_t head_dim, int64_t row_stride,
                           const float* inv_freq, const AttentionMetadata& meta,
                           void* kc, void* vc) override {
    return Do([=, this] {
      return inner_->RopeWriteKv(qkv, heads, kv_heads, head_dim, row_stride,
                                 inv_freq, meta, kc, vc);
    });
  }
  absl::Status Attention(const void* q, int64_t stride, int64_t heads,
                         int64_t kv_heads, int64_t head_dim,
                         const AttentionMetadata& meta, const void* kc,
                         const void* vc, void* out) override {
    if (meta.host_planned && meta.num_tokens != planned_tokens_) {
      return absl::InternalError(absl::StrCat(
          "Attention: host_planned ", meta.host_planned, " for a batch of ",
          meta.num_tokens, " tokens; planned: ", planned_tokens_));
    }
    if (meta.host_planned) ++planned_attentions_;
    AttentionMetadata own = meta;
    own.host_planned = false;  // the inner backend plans for itself
    return Do([=, this] {
      return inner_->Attention(q, stride, heads, kv_heads, head_dim, own, kc,
                               vc, out);
    });
  }
  absl::Status Gemm(const void* x, int64_t rows, const LinearWeight& w, void* y,
                    DType y_dtype) override {
    const LinearWeight* pw = &w;
    return Do([=, this] { return inner_->Gemm(x, rows, *pw, y, y_dtype); });
  }
  absl::Status AbsMax(const void* x, int64_t rows, int64_t cols,
                      const RowGroups& groups, float* absmax) override {
    return Do(
        [=, this] { return inner_->AbsMax(x, rows, cols, groups, absmax); });
  }
  absl::Status Quantize(const void* x, int64_t rows, int64_t cols,
                        const RowGroups& groups, const float* absmax,
                        uint8_t* q, float* scale) override {
    return Do([=, this] {
      return inner_->Quantize(x, rows, cols, groups, absmax, q, scale);
    });
  }
  absl::Status FusedAbsMax(const FusedInput& in, int64_t rows, int64_t cols,
                           const RowGroups& groups, float* absmax) override {
    return Do([=, this] {
      return inner_->FusedAbsMax(in, rows, cols, groups, absmax);
    });
  }
  absl::Status FusedQuantize(const FusedInput& in, int64_t rows, int64_t cols,
                             const RowGroups& groups, const float* absmax,
                             uint8_t* q, float* scale) override {
    ++fused_quantizes_;
    return Do([=, this] {
      return inner_->FusedQuantize(in, rows, cols, groups, absmax, q, scale);
    });
  }
  absl::Status QuantizeGroups(const void* x, const FusedInput* in, int64_t rows,
                              int64_t cols, const RowGroups& groups,
                              float* absmax, uint8_t* q,
                              float* scale) override {
    ++one_call_quantizes_;
    if (in != nullptr) ++fused_quantizes_;
    // The producer by value: a replay outlives the caller's.
    const bool fused = in != nullptr;
    const FusedInput producer = fused ? *in : FusedInput{};
    return Do([=, this] {
      return inner_->QuantizeGroups(x, fused ? &producer : nullptr, rows, cols,
                                    groups, absmax, q, scale);
    });
  }
  absl::Status QuantizeStatic(const void* x, int64_t count, const float* scale,
                              uint8_t* q) override {
    return Do([=, this] { return inner_->QuantizeStatic(x, count, scale, q); });
  }
  absl::Status GemmE4m3(const uint8_t* q, const float* q_scale,
                        const RowGroups& groups, int64_t rows,
                        const LinearWeight& w, void* y) override {
    const LinearWeight* pw = &w;
    return Do([=, this] {
      return inner_->GemmE4m3(q, q_scale, groups, rows, *pw, y);
    });
  }
  // At load, not captured: the inner backend's layout.
  absl::Status LayOutWeight(LinearWeight& w, int64_t k_blocks) override {
    return inner_->LayOutWeight(w, k_blocks);
  }
  absl::Status GemmBlockSums(const void* x, int64_t rows, const LinearWeight& w,
                             int64_t k_blocks, float* sums) override {
    const LinearWeight* pw = &w;
    return Do([=, this] {
      return inner_->GemmBlockSums(x, rows, *pw, k_blocks, sums);
    });
  }
  absl::Status ScaleRows(const float* sums, int64_t rows, const float* q_scale,
                         const RowGroups& groups, const LinearWeight& w,
                         void* y, DType y_dtype, RowsInto into) override {
    const LinearWeight* pw = &w;
    return Do([=, this] {
      return inner_->ScaleRows(sums, rows, q_scale, groups, *pw, y, y_dtype,
                               into);
    });
  }
  absl::Status GemmScaledBlockSums(const void* x, int64_t rows,
                                   const LinearWeight& w, int64_t k_blocks,
                                   const float* q_scale,
                                   const RowGroups& groups, float* sums,
                                   void* y, DType y_dtype,
                                   RowsInto into) override {
    const LinearWeight* pw = &w;
    return Do([=, this] {
      return inner_->GemmScaledBlockSums(x, rows, *pw, k_blocks, q_scale,
                                         groups, sums, y, y_dtype, into);
    });
  }

  absl::Status InterleaveParts(const float* parts, int64_t num_parts,
                               int64_t rows, int64_t cols,
                               float* out) override {
    return Do([=, this] {
      return inner_->InterleaveParts(parts, num_parts, rows, cols, out);
    });
  }
  absl::Status GatherRows(const void* x, int64_t cols, const int32_t* rows,
                          int64_t n, void* out) override {
    return Do([=, this] { return inner_->GatherRows(x, cols, rows, n, out); });
  }

 protected:
  void Free(void*) override {}  // buffers belong to the inner backend

 private:
  using Op = std::function<absl::Status()>;

  class Recording : public CapturedWork {
   public:
    Recording(CapturingBackend* backend, std::vector<Op> ops)
        : backend_(backend), ops_(std::move(ops)) {}
    absl::Status Replay() override {
      if (backend_->capturing_) return backend_->Refuse("Replay");
      ++backend_->replays_;
      for (const Op& op : ops_) {
        if (absl::Status s = op(); !s.ok()) return s;
      }
      return absl::OkStatus();
    }

   private:
    CapturingBackend* backend_;
    std::vector<Op> ops_;
  };

  absl::Status Do(Op op) {
    if (!capturing_) {
      ++eager_ops_;
      return op();
    }
    recording_.push_back(std::move(op));
    return absl::OkStatus();
  }
  absl::Status HostWait(const char* what) {
    if (capturing_) return Refuse(what);
    ++host_waits_;
    if (!host_wait_check_) return absl::OkStatus();
    absl::Status s = host_wait_check_();
    if (s.ok()) return s;
    return absl::Status(s.code(), absl::StrCat(what, ": ", s.message()));
  }
  absl::Status Refuse(const char* what) const {
    return absl::FailedPreconditionError(
        absl::StrCat(what, " while capturing work"));
  }

  std::unique_ptr<Backend> inner_;
  bool plans_prefills_ = false;
  int64_t plan_requests_ = 0, host_plans_ = 0, planned_attentions_ = 0;
  int64_t planned_tokens_ = -1;  // the last plan's batch; -1: none
  bool capturing_ = false;
  bool fail_next_ = false;
  bool claims_fusion_ = false;
  bool move_sample_buffers_ = false;
  bool fail_next_stage_ = false;
  std::vector<Op> recording_;
  std::function<absl::Status()> host_wait_check_;
  int64_t captures_ = 0, replays_ = 0, fused_quantizes_ = 0,
          one_call_quantizes_ = 0, eager_ops_ = 0, host_waits_ = 0;
};

}  // namespace octet::testing
