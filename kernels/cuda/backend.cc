// CudaBackend, the Backend of kernels/cuda/backend.h: bfloat16 activations
// on one GPU and one stream. The operations are thin: they bind the device
// (the worker calls from any gRPC thread), then enqueue cuBLASLt GEMMs
// (gemm.h: planned for TP = 1's shapes, block sums for row-parallel
// layers), the quantizer (quantize.h), the forward's kernels (ops.h;
// attention cut by attention_plan.h for the model's whole head counts, or
// for a prefill FlashInfer's kernels on the host's plan,
// attention_flashinfer.h) or the sampler (sampling.h); profiles time them with
// events (CudaEventClock). Small host copies go through two pinned halves;
// captures are CUDA stream captures, launched as graphs; scratch that a capture
// may name is kept until the backend ends.
#include "kernels/cuda/backend.h"

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/cuda/attention_flashinfer.h"
#include "kernels/cuda/attention_plan.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/gemm_cutlass.h"
#include "kernels/cuda/gemm_fallback.h"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/quantize.h"
#include "kernels/cuda/sampling.h"

namespace octet {
namespace {

// Marks as events on one stream: each event records when the stream's work
// before it finished; Read waits for the last and takes the elapsed times.
class CudaEventClock : public DeviceClock {
 public:
  CudaEventClock(int device, cudaStream_t stream)
      : device_(device), stream_(stream) {}
  ~CudaEventClock() override {
    if (!BindCudaDevice(device_).ok()) return;
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
  }

  absl::Status Mark() override {
    OCTET_RETURN_IF_ERROR(BindCudaDevice(device_));
    cudaEvent_t e = nullptr;
    OCTET_CUDA_RETURN_IF_ERROR(cudaEventCreate(&e));
    events_.push_back(e);
    OCTET_CUDA_RETURN_IF_ERROR(cudaEventRecord(e, stream_));
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<double>> Read() override {
    std::vector<double> ms;
    if (events_.empty()) return ms;
    OCTET_RETURN_IF_ERROR(BindCudaDevice(device_));
    OCTET_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(events_.back()));
    for (cudaEvent_t e : events_) {
      float t = 0.0f;
      OCTET_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&t, events_[0], e));
      ms.push_back(t);
    }
    return ms;
  }

 private:
  int device_;
  cudaStream_t stream_;
  std::vector<cudaEvent_t> events_;
};

class CudaBackend : public Backend {
 public:
  absl::Status Init(int device) {
    if (!CudaDeviceSupported(device)) {
      return absl::UnavailableError(absl::StrCat(
          "no usable CUDA device ", device, ": ", DescribeCudaDevice(device)));
    }
    device_ = device;
    OCTET_RETURN_IF_ERROR(BindDevice());
    int sms = 0;
    OCTET_CUDA_RETURN_IF_ERROR(
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    multiprocessors_ = sms;
    compute_capability_ = CudaComputeCapability(device);
    if (cuda::FlashInferPrefill::Built()) {
      flashinfer_ = std::make_unique<cuda::FlashInferPrefill>();
    }
    OCTET_CUDA_RETURN_IF_ERROR(
        cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    absl::StatusOr<std::unique_ptr<CublasLtGemm>> g = CublasLtGemm::Create();
    if (!g.ok()) return g.status();
    gemm_ = *std::move(g);
    absl::StatusOr<std::unique_ptr<CudaE4m3Quantizer>> q =
        CudaE4m3Quantizer::Create();
    if (!q.ok()) return q.status();
    quantizer_ = *std::move(q);
    OCTET_ASSIGN_OR_RETURN(sampler_, CudaSampler::Create());
    for (Staging& st : staging_) {
      OCTET_CUDA_RETURN_IF_ERROR(cudaMallocHost(&st.host, kStagingBytes));
      OCTET_CUDA_RETURN_IF_ERROR(
          cudaEventCreateWithFlags(&st.done, cudaEventDisableTiming));
    }
    return absl::OkStatus();
  }
  ~CudaBackend() override {
    if (!BindDevice().ok()) return;
    if (stream_ != nullptr) {
      if (capturing_) {
        cudaGraph_t graph = nullptr;
        if (cudaStreamEndCapture(stream_, &graph) == cudaSuccess && graph) {
          cudaGraphDestroy(graph);
        }
      }
      cudaStreamSynchronize(stream_);
      cudaStreamDestroy(stream_);
    }
    for (Staging& st : staging_) {
      if (st.done != nullptr) cudaEventDestroy(st.done);
      if (st.host != nullptr) cudaFreeHost(st.host);
    }
  }

  DeviceKind kind() const override { return DeviceKind::kCuda; }
  void* cuda_stream() const override { return stream_; }
  DType activation_dtype() const override { return DType::kBf16; }
  int64_t max_head_dim() const override { return cuda::kAttentionMaxHeadDim; }
  int64_t attention_query_tile() const override {
    return cuda::kAttentionTileTokens;
  }
  std::string Describe() const override {
    return absl::StrCat("cuda:", device_, " ", DescribeCudaDevice(device_));
  }

  absl::StatusOr<DeviceBuffer> Allocate(size_t bytes) override {
    OCTET_RETURN_IF_ERROR(BindDevice());
    OCTET_RETURN_IF_ERROR(NotCapturing("Allocate"));
    void* p = nullptr;
    if (bytes > 0) OCTET_CUDA_RETURN_IF_ERROR(cudaMalloc(&p, bytes));
    return DeviceBuffer(this, p, bytes);
  }
  // The caller may reuse `src` as soon as this returns; the copy is ordered
  // with the stream's kernels. Small copies (a step's metadata) go through
  // one of two pinned halves, so the host does not wait for the device: a
  // half is refilled only once its previous copy is done (its event).
  // Large ones (weights at load) go straight from pageable memory, which
  // the driver stages before returning.
  absl::Status CopyToDevice(void* dst, const void* src, size_t bytes) override {
    OCTET_RETURN_IF_ERROR(BindDevice());
    OCTET_RETURN_IF_ERROR(NotCapturing("CopyToDevice"));
    if (bytes > kStagingBytes) {
      OCTET_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
      return absl::OkStatus();
    }
    Staging& st = staging_[next_staging_];
    next_staging_ = 1 - next_staging_;
    OCTET_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(st.done));
    std::memcpy(st.host, src, bytes);
    OCTET_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(dst, st.host, bytes, cudaMemcpyHostToDevice, stream_));
    OCTET_CUDA_RETURN_IF_ERROR(cudaEventRecord(st.done, stream_));
    return absl::OkStatus();
  }
  absl::Status CopyToHost(void* dst, const void* src, size_t bytes) override {
    OCTET_RETURN_IF_ERROR(BindDevice());
    OCTET_RETURN_IF_ERROR(NotCapturing("CopyToHost"));
    OCTET_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
    OCTET_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    return absl::OkStatus();
  }
  absl::Status Synchronize() override {
    OCTET_RETURN_IF_ERROR(BindDevice());
    OCTET_RETURN_IF_ERROR(NotCapturing("Synchronize"));
    OCTET_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<DeviceClock>> NewClock() override {
    OCTET_RETURN_IF_ERROR(BindDevice());
    OCTET_RETURN_IF_ERROR(NotCapturing("NewClock"));
    return std::make_unique<CudaEventClock>(device_, stream_);
  }

  absl::Status Embedding(const void* table, DType table_dtype, int64_t rows,
                         int64_t cols, int64_t row_begin, const int32_t* ids,
                         int64_t n, void* out) override {
    OCTET_RETURN_IF_ERROR(BindDevice());
    return cuda::Embedding(table, table_dtype, rows, cols, row_begin, ids, n,
                           out, stream_);
  }
  absl::Status RmsNorm(const void* x, const float* weight, int64_t rows,
                       int64_t cols, float eps, void* out) override {
    OCTET_RETURN_IF_ERROR(BindDevice());
    return cuda::RmsNorm(x, weight, rows, cols, eps, out, stream_);
  }
  absl::Status Add(void* x, const void* y, int64_t count) override {
    OCTET_RETURN_IF_ERROR(BindDevice());
    return cuda::Add(x, y, count, stream_);
  }
  absl::Status Rope(void* x, int64_t rows, int64_t heads, int64_t head_dim,
                    int64_t row_stride, const int32_t* positions,
                    const float* inv_freq) override {
    OCTET_RETURN_IF_ERROR(BindDevice());
    return cuda::Rope(x, rows, heads, head_dim, row_stride, positions, inv_freq,
                      stream_);
  }
  absl::Status RopeWriteKv(void* qkv, int64_t heads, int64_t kv_heads,
                           int64_t head_dim, int64_t row_stride,
                           const float* inv_freq, const AttentionMetadata& meta,
                           void* k_cache, void* v_cache) override {
    OCTET_RETURN_IF_ERROR(BindDevice());
    return cuda::RopeWriteKv(qkv, heads, kv_heads, head_dim, row_stride,
                             inv_freq, meta, k_cache, v_cache, stream_);
  }
  absl::Status RmsNormHeads(void* x, int64_t rows, int64_t heads,
                            int64_t head_dim, int64_t row_stride,
                            const float* weight, float eps) override {
    OCTET_RETURN_IF_ERROR(BindDevice());
    return cuda::RmsNormHeads(x, rows, heads, head_dim, row_stride, weight, eps,
                              stream_);
  }
  absl::Status AddBias(void* x, const float* bias, int64_t rows,
                       int64_t cols) override {
    OCTET_RETURN_IF_ERROR(BindDevice());
    return cuda::AddBias(x, bias, rows, cols, stream_);
  }
  absl::Status SiluMul(const void* x, int64_t rows, int64_t cols,
                       void* out) override {
    OCTET_RETURN_IF_ERROR(BindDevice());
    return cuda::SiluMul(x, rows, cols, out, stream_);
  }
  absl::Status WriteKv(const void* k, const void* v, int64_t row_stride,
                       int64_t kv_heads, int64_t head_dim,
                       const AttentionMetadata& meta, void* k_cache,
                       void* v_cache) override {
    OCTET_RETURN_IF_ERROR(BindDevice());
    return cuda::WriteKv(k, v, row_stride, kv_heads, head_dim, meta, k_cache,
                         v_cache, stream_);
  }
  // A batch with a prompt chunk in it goes to FlashInfer where it serves
  // the shapes; a decode keeps octet's kernel, which plans from shapes
  // alone (graphs hold it). Planned for TP = 1's heads. A plan that fails
  // leaves octet's kernel for the forward, said once.
  absl::StatusOr<bool> PlanAttention(const AttentionBatch& batch,
                                     const AttentionMetadata& meta,
                                     int64_t heads, int64_t kv_heads,
                                     int64_t head_dim) override {
    const int64_t full_heads = meta.full_heads > 0 ? meta.full_heads : heads;
    const int64_t full_kv_heads =
        meta.full_kv_heads > 0 ? meta.full_kv_heads : kv_heads;
    const int64_t seqs = static_cast<int64_t>(batch.context.size());
    const bool prefill = seqs > 0 &&
                         batch.query_start.size() == batch.context.size() + 1 &&
                         batch.query_start.back() > seqs;
    // A rank's heads must keep TP = 1's grouping: FlashInfer's schedule
    // packs each KV head's query heads into its tiles. (Served shapes so
    // grouped make TP = 1's served too.)
    const bool same_groups = heads * full_kv_heads == kv_heads * full_heads;
    if (flashinfer_ == nullptr || capturing_ || !prefill || !same_groups ||
        !cuda::FlashInferPrefill::Serves(heads, kv_heads, head_dim,
                                         compute_capability_)) {
      return false;
    }
    OCTET_RETURN_IF_ERROR(BindDevice());
    const absl::Status planned =
        flashinfer_->Plan(batch, meta.block_size, meta.sliding_window,
                          full_heads, full_kv_heads, head_dim, stream_);
    if (!planned.ok()) {
      if (!flashinfer_failure_said_) {
        std::fprintf(stderr, "octet: %s; octet's attention kernel runs\n",
                     std::string(planned.message()).c_str());
        flashinfer_failure_said_ = true;
      }
      return false;
    }
    return true;
  }
  absl::Status Attention(const void* q, int64_t q_stride, int64_t heads,
                         int64_t kv_heads, int64_t head_dim,
                         const AttentionMetadata& meta, const void* k_cache,
                         const void* v_cache, void* out) override {
    OCTET_RETURN_IF_ERROR(BindDevice());
    if (meta.host_planned) {
      if (flashinfer_ == nullptr) {
        return absl::FailedPreconditionError(
            "CUDA Attention: host_planned, but no FlashInfer in this build");
      }
      return flashinfer_->Run(q, q_stride, heads, kv_heads, head_dim, k_cache,
                              v_cache, out, stream_);
    }
    // Planned for the whole model's heads (TP = 1's), so that a head's
    // keys are cut into the same parts at every TP degree.
    const int64_t splits = cuda::AttentionSplits(
        meta.num_tokens, meta.full_heads > 0 ? meta.full_heads : heads,
        meta.full_kv_heads > 0 ? meta.full_kv_heads : kv_heads,
        multiprocessors_);
    const int64_t floats =
        cuda::AttentionPartialFloats(meta.num_tokens, heads, head_dim, splits);
    if (floats > attention_partials_floats_) {
      // Outgrown scratch is kept, not freed: captured work may name it.
      OCTET_RETURN_IF_ERROR(NotCapturing("growing attention scratch"));
      OCTET_ASSIGN_OR_RETURN(DeviceBuffer grown,
                             Allocate(floats * sizeof(float)));
      retired_.push_back(std::move(attention_partials_));
      attention_partials_ = std::move(grown);
      attention_partials_floats_ = floats;
    }
    return cuda::Attention(q, q_stride, heads, kv_heads, head_dim, meta,
                           k_cache, v_cache, out, splits,
                           attention_partials_.as<float>(), stream_);
  }
  absl::Status Gemm(const void* x, int64_t rows, const LinearWeight& w, void* y,
                    DType y_dtype) override {
    OCTET_RETURN_IF_ERROR(BindDevice());
    if (w.dtype != DType::kBf16) {
      return absl::InvalidArgumentError("CUDA Gemm: weights must be bf16");
    }
    return gemm_->Bf16(static_cast<const Bf16*>(x), w.data.as<Bf16>(), rows,
                       w.out, w.in, y, y_dtype, stream_, w.full_out);
  }
  // One group takes the single-tensor kernels; several take the per-row
  // ones (quantize.h) and the GEMM's row-group epilogue (gemm.h).
  absl::Status AbsMax(const void* x, int64_t rows, int64_t cols,
                      const RowGroups& groups, float* absmax) override {
    OCTET_RETURN_IF_ERROR(BindDevice());
    if (groups.count == 1) {
      return quantizer_->AbsMax(x, DType::kBf16, rows * cols, absmax, stream_);
    }
    return quantizer_->GroupAbsMax(x, DType::kBf16, rows, cols,
                                   groups.row_group, groups.count, absmax,
                                   stream_);
  }
  absl::Status Quantize(const void* x, int64_t rows, int64_t cols,
                        const RowGroups& groups, const float* absmax,
                        uint8_t* q, float* scale) override {
    OCTET_RETURN_IF_ERROR(BindDevice());
    if (groups.count == 1) {
      return quantizer_->Quantize(x, DType::kBf16, rows * cols, absmax, q,
                                  scale, stream_);
    }
    return quantizer_->GroupQuantize(x, DType::kBf16, rows, cols,
                                     groups.row_group, groups.count, absmax, q,
                                     scale, stream_);
  }
  bool fuses_input_quantization() const override { return true; }
  absl::Status FusedAbsMax(const FusedInput& in, int64_t rows, int64_t cols,
                           const RowGroups& groups, float* absmax) override {
    OCTET_RETURN_IF_ERROR(BindDevice());
    return cuda::FusedAbsMax(in, rows, cols, groups.row_group, groups.count,
                             absmax, stream_);
  }
  absl::Status FusedQuantize(const FusedInput& in, int64_t rows, int64_t cols,
                             const RowGroups& groups, const float* absmax,
                             uint8_t* q, float* scale) override {
    OCTET_RETURN_IF_ERROR(BindDevice());
    return cuda::FusedQuantize(in, rows, cols, groups.row_group, absmax, q,
                               scale, stream_);
  }
  absl::Status QuantizeGroups(const void* x, const FusedInput* in, int64_t rows,
                              int64_t cols, const RowGroups& groups,
                              float* absmax, uint8_t* q,
                              float* scale) override {
    OCTET_RETURN_IF_ERROR(BindDevice());
    if (in == nullptr) {  // in memory: the quantizer's fastest way
      return quantizer_->QuantizeRowGroups(x, DType::kBf16, rows, cols,
                                           groups.row_group, groups.count,
                                           absmax, q, scale, stream_);
    }
    if (groups.count == rows) {  // a block per row
      return cuda::FusedQuantizeOwnRows(*in, rows, cols, absmax, q, scale,
                                        stream_);
    }
    return cuda::FusedQuantizeGroups(*in, rows, cols, groups.row_group,
                                     groups.count, absmax, q, scale,
                                     stream_);  // a cooperative grid
  }
  absl::Status QuantizeStatic(const void* x, int64_t count, const float* scale,
                              uint8_t* q) override {
    OCTET_RETURN_IF_ERROR(BindDevice());
    return quantizer_->QuantizeWithScale(x, DType::kBf16, count, scale, q,
                                         stream_);
  }
  absl::Status GemmE4m3(const uint8_t* q, const float* q_scale,
                        const RowGroups& groups, int64_t rows,
                        const LinearWeight& w, void* y) override {
    OCTET_RETURN_IF_ERROR(BindDevice());
    if (w.dtype != DType::kE4m3) {
      return absl::InvalidArgumentError("GemmE4m3: weights are not e4m3");
    }
    if (w.scale_per_row) {  // each output column its weight row's scale
      return gemm_->E4m3ColumnScales(
          q, q_scale, groups.count == 1 ? nullptr : groups.row_group,
          w.data.as<uint8_t>(), w.scale.as<float>(), rows, w.out, w.in, y,
          DType::kBf16, stream_, w.full_out);
    }
    if (groups.count == 1) {
      return gemm_->E4m3(q, q_scale, w.data.as<uint8_t>(), w.scale.as<float>(),
                         rows, w.out, w.in, y, DType::kBf16, stream_,
                         w.full_out);
    }
    return gemm_->E4m3RowGroups(
        q, q_scale, groups.row_group, w.data.as<uint8_t>(), w.scale.as<float>(),
        rows, w.out, w.in, y, DType::kBf16, stream_, w.full_out);
  }
  GemmWays RowGroupGemmWays() const override {
    GemmWays ways;
    ways.device = absl::StrCat(DescribeCudaDevice(device_), ", ",
                               CublasLtGemm::LibraryVersion());
    // The ways this build and device run as themselves; CUTLASS's, last,
    // only where it is (so way i is RowScaling i).
    for (int i = 0; i < CublasLtGemm::kRowScalings; ++i) {
      const auto way = static_cast<CublasLtGemm::RowScaling>(i);
      if (!gemm_->RowScalingAvailable(way)) continue;
      ways.names.emplace_back(CublasLtGemm::RowScalingName(way));
    }
    if (gemm_->RowScalingAvailable(CublasLtGemm::RowScaling::kCutlass)) {
      absl::StrAppend(&ways.device, ", CUTLASS ", cutlass_gemm::Version());
    }
    return ways;
  }
  absl::Status SetRowGroupGemmWay(int64_t rows, const LinearWeight& w,
                                  int way) override {
    if (way < 0 || way >= CublasLtGemm::kRowScalings ||
        !gemm_->RowScalingAvailable(
            static_cast<CublasLtGemm::RowScaling>(way))) {
      return absl::InvalidArgumentError(
          absl::StrCat("SetRowGroupGemmWay: no way ", way));
    }
    gemm_->SetRowScaling(rows, w.full_out, w.out, w.in, w.scale_per_row,
                         static_cast<CublasLtGemm::RowScaling>(way));
    return absl::OkStatus();
  }
  // Block sums as one batched cuBLASLt GEMM planned for the whole layer's
  // K (gemm.h: BlockSums), so that TP = 1 and every TP degree that divides
  // the blocks compute each block's sums alike.
  bool has_block_sums() const override { return true; }
  absl::Status GemmBlockSums(const void* x, int64_t rows, const LinearWeight& w,
                             int64_t k_blocks, float* sums) override {
    OCTET_RETURN_IF_ERROR(BindDevice());
    return gemm_->BlockSums(x, w.data.data(), w.dtype, rows, w.out, w.in,
                            k_blocks, w.full_in, sums, stream_);
  }
  // The blocks' own sums straight into the scaling kernel, which adds them
  // in TreeSum order as GemmBlockSums' tree sum would: one kernel fewer.
  absl::Status GemmScaledBlockSums(const void* x, int64_t rows,
                                   const LinearWeight& w, int64_t k_blocks,
                                   const float* q_scale,
                                   const RowGroups& groups, float* sums,
                                   void* y, DType y_dtype,
                                   RowsInto into) override {
    OCTET_RETURN_IF_ERROR(BindDevice());
    OCTET_ASSIGN_OR_RETURN(
        const float* parts,
        gemm_->BlockProducts(x, w.data.data(), w.dtype, rows, w.out, w.in,
                             k_blocks, w.full_in, sums, stream_));
    return ScaleBlockSums(parts, k_blocks, rows, q_scale, groups, w, y, y_dtype,
                          into);
  }
  absl::Status ScaleRows(const float* sums, int64_t rows, const float* q_scale,
                         const RowGroups& groups, const LinearWeight& w,
                         void* y, DType y_dtype, RowsInto into) override {
    OCTET_RETURN_IF_ERROR(BindDevice());
    return ScaleBlockSums(sums, 1, rows, q_scale, groups, w, y, y_dtype, into);
  }
  absl::StatusOr<SampleStaging> StageSample(
      int64_t vocab, absl::Span<const SampleRow> rows,
      const SampleLayout& layout) override {
    OCTET_RETURN_IF_ERROR(BindDevice());
    OCTET_RETURN_IF_ERROR(NotCapturing("StageSample"));
    return sampler_->Stage(PlanSampleStaging(vocab, rows, layout), vocab, rows,
                           layout, stream_);
  }
  absl::Status SampleStaged(const float* logits, int64_t vocab) override {
    OCTET_RETURN_IF_ERROR(BindDevice());
    return sampler_->Run(logits, vocab, stream_);
  }
  absl::Status TakeSampled(absl::Span<SampledToken> out) override {
    OCTET_RETURN_IF_ERROR(BindDevice());
    OCTET_RETURN_IF_ERROR(NotCapturing("TakeSampled"));
    return sampler_->Take(out, stream_);
  }
  // Capture is CUDA stream capture on the backend's stream (thread-local
  // mode: other threads' CUDA calls are not affected); the work is a CUDA
  // graph, instantiated once and launched on each replay.
  bool can_capture() const override { return true; }
  absl::Status BeginCapture() override {
    OCTET_RETURN_IF_ERROR(BindDevice());
    OCTET_RETURN_IF_ERROR(NotCapturing("BeginCapture"));
    OCTET_CUDA_RETURN_IF_ERROR(
        cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    capturing_ = true;
    return absl::OkStatus();
  }
  absl::StatusOr<std::unique_ptr<CapturedWork>> EndCapture() override {
    OCTET_RETURN_IF_ERROR(BindDevice());
    if (!capturing_) {
      return absl::FailedPreconditionError("EndCapture: no capture to end");
    }
    capturing_ = false;
    cudaGraph_t graph = nullptr;
    OCTET_CUDA_RETURN_IF_ERROR(cudaStreamEndCapture(stream_, &graph));
    cudaGraphExec_t exec = nullptr;
    const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    OCTET_CUDA_RETURN_IF_ERROR(e);
    return std::unique_ptr<CapturedWork>(new Graph(this, exec));
  }

  absl::Status InterleaveParts(const float* parts, int64_t num_parts,
                               int64_t rows, int64_t cols,
                               float* out) override {
    OCTET_RETURN_IF_ERROR(BindDevice());
    if (rows == 0 || cols == 0) return absl::OkStatus();
    // Each part is a [rows][cols] block going to a column band of out.
    for (int64_t p = 0; p < num_parts; ++p) {
      OCTET_CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(
          out + p * cols, num_parts * cols * sizeof(float),
          parts + p * rows * cols, cols * sizeof(float), cols * sizeof(float),
          rows, cudaMemcpyDeviceToDevice, stream_));
    }
    return absl::OkStatus();
  }
  absl::Status GatherRows(const void* x, int64_t cols, const int32_t* rows,
                          int64_t n, void* out) override {
    OCTET_RETURN_IF_ERROR(BindDevice());
    return cuda::GatherRows(x, cols, rows, n, out, stream_);
  }

 protected:
  void Free(void* data) override {
    if (BindDevice().ok()) cudaFree(data);
  }

 private:
  // A captured CUDA graph, launched on the backend's stream.
  class Graph : public CapturedWork {
   public:
    Graph(CudaBackend* backend, cudaGraphExec_t exec)
        : backend_(backend), exec_(exec) {}
    ~Graph() override {
      if (backend_->BindDevice().ok()) cudaGraphExecDestroy(exec_);
    }
    absl::Status Replay() override {
      OCTET_RETURN_IF_ERROR(backend_->BindDevice());
      OCTET_RETURN_IF_ERROR(backend_->NotCapturing("Replay"));
      OCTET_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(exec_, backend_->stream_));
      return absl::OkStatus();
    }

   private:
    CudaBackend* backend_;
    cudaGraphExec_t exec_;
  };

  absl::Status NotCapturing(const char* what) const {
    if (!capturing_) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrCat(what,
                     " while capturing work: only device work can be "
                     "captured"));
  }

  // Makes device_ current on the calling thread. The worker calls the backend
  // from whichever gRPC thread runs a step, and the CUDA runtime's current
  // device is per thread: without this, allocations and launches from a
  // thread that never chose a device would land on GPU 0.
  absl::Status BindDevice() const { return BindCudaDevice(device_); }

  // ScaleRows on `count` block sums [count][rows][w.out], which the kernel
  // adds in TreeSum order first (ScaleRows: one; GemmScaledBlockSums: the
  // blocks' own).
  absl::Status ScaleBlockSums(const float* parts, int64_t count, int64_t rows,
                              const float* q_scale, const RowGroups& groups,
                              const LinearWeight& w, void* y, DType y_dtype,
                              RowsInto into) {
    if (q_scale != nullptr && w.dtype != DType::kE4m3) {
      return absl::InvalidArgumentError("ScaleRows: weights are not e4m3");
    }
    return CudaScaleRowGroups(
        parts, count, rows, w.out, q_scale,
        groups.count == 1 ? nullptr : groups.row_group,
        q_scale != nullptr ? w.scale.as<float>() : nullptr, w.scale_per_row, y,
        y_dtype, into == RowsInto::kAdd, stream_);
  }

  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<CublasLtGemm> gemm_;
  std::unique_ptr<CudaE4m3Quantizer> quantizer_;
  std::unique_ptr<CudaSampler> sampler_;
  bool capturing_ = false;
  int64_t multiprocessors_ = 1;
  int compute_capability_ = 0;
  // FlashInfer's prefill attention, where built; whether a failed plan has
  // been said.
  std::unique_ptr<cuda::FlashInferPrefill> flashinfer_;
  bool flashinfer_failure_said_ = false;
  // Attention's parts (attention_plan.h), grown to the largest need.
  DeviceBuffer attention_partials_;
  int64_t attention_partials_floats_ = 0;
  std::vector<DeviceBuffer> retired_;
  // CopyToDevice's pinned halves.
  static constexpr size_t kStagingBytes = size_t{1} << 20;
  struct Staging {
    void* host = nullptr;
    cudaEvent_t done = nullptr;  // its last copy has finished
  };
  Staging staging_[2];
  int next_staging_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> NewCudaBackend(int device) {
  auto backend = std::make_unique<CudaBackend>();
  absl::Status s = backend->Init(device);
  if (!s.ok()) return s;
  return std::unique_ptr<Backend>(std::move(backend));
}

}  // namespace octet
