// GEMMs on a CUDA device through cuBLASLt: float8 e4m3 (the FP8 linear
// layers) and bfloat16 (the baseline), in the same layouts and with the same
// meaning as kernels/cpu/gemm.h:
//
//   E4m3: Y[M,N] = (decode(qa[M,K]) · decode(qb[N,K])ᵀ) · (*d_scale_a ·
//         *d_scale_b)
//   Bf16: Y[M,N] = A[M,K] · B[N,K]ᵀ
//
// binary32 accumulation (FP8 fast accumulation is off), Y in f32 or bf16;
// K == 0 gives Y = 0 without asking cuBLASLt. The scales are device
// pointers, so a scale computed on the GPU (quantize.h) is used without a
// host round trip. Any 4-byte aligned scale pointer works: cuBLASLt wants
// 16-byte aligned ones, so a scale that is not is first copied, on the
// same stream (and so also in captured work), into a slot this object owns.
//
// For each problem the cuBLASLt heuristic is asked once and its choice
// cached with the descriptors. FP8 descriptors carry real scale pointers
// before the heuristic is asked: with outer-vector (per-row) scales
// cuBLASLt refuses a descriptor without them (CUBLAS_STATUS_INVALID_VALUE,
// seen on an H200 with cuBLASLt 13.1). Problems cuBLASLt cannot or will not
// serve (K or N not a multiple of 16 for FP8, misaligned operands, any
// refusal of the heuristic) go to a simple, correct CUDA kernel
// (gemm_fallback.cu) instead, 30-100x slower, or for per-row scales to the
// two-pass path: that is said once per weight shape through
// Options::on_fallback (stderr by default), and LastPath() /
// LastFallbackReason() say which path the last call took.
//
// Tensor parallelism (docs/design.md, "TP invariance"): cuBLASLt chooses
// an algorithm per shape, and with it the order in which a dot product's
// terms are added. A rank that computes a slice of a layer passes the whole
// layer's shape (plan_n, plan_k below): the algorithm is chosen for that
// (TP = 1's problem) and run on the slice, so that each output element is
// computed the same way at every TP degree; planned problems also assume
// only the 16-byte operand alignment every rank's buffers have.
//
// Thread-safe: the plan cache is guarded by a mutex; kernels are enqueued on
// the caller's stream. The workspace and scratch are shared, so concurrent
// calls must be on the same stream (or use one CublasLtGemm per stream).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/bf16.h"
#include "base/dtype.h"

namespace octet {

class CublasLtGemm {
 public:
  // The most rows and columns E4m3RowGroups serves in one GEMM.
  static constexpr int64_t kMaxOuterRows = 65536;
  static constexpr int64_t kMaxOuterColumns = 262144;
  // The most K blocks BlockSums adds (CudaTreeSum's limit).
  static constexpr int64_t kMaxBlocks = 64;

  struct Options {
    // cuBLASLt workspace; 32 MiB is what NVIDIA recommends for Hopper.
    size_t workspace_bytes = size_t{32} << 20;
    // Told, once per weight shape, that cuBLASLt refused it and why.
    std::function<void(const std::string&)> on_fallback =
        [](const std::string& message) {
          std::fprintf(stderr, "octet: %s\n", message.c_str());
        };
  };

  // kNone: no GEMM has run (no call yet, or K == 0, which only zeroes Y);
  // kCutlass: CUTLASS's (RowScaling::kCutlass).
  enum class Path { kNone, kCublasLt, kFallback, kCutlass };

  static absl::StatusOr<std::unique_ptr<CublasLtGemm>> Create(
      const Options& options);
  static absl::StatusOr<std::unique_ptr<CublasLtGemm>> Create() {
    return Create(Options{});
  }
  ~CublasLtGemm();
  CublasLtGemm(const CublasLtGemm&) = delete;
  CublasLtGemm& operator=(const CublasLtGemm&) = delete;

  // plan_n, in every GEMM: the output columns of the whole layer when this
  // call computes a tensor-parallel slice of them (0: n). See the note at
  // the top.
  absl::Status E4m3(const uint8_t* qa, const float* d_scale_a,
                    const uint8_t* qb, const float* d_scale_b, int64_t m,
                    int64_t n, int64_t k, void* y, DType y_dtype,
                    cudaStream_t stream, int64_t plan_n = 0);

  // E4m3 with one activation scale per group of consecutive rows of qa
  // (RowGroups in kernels/backend.h; d_row_group device [m]): row r of Y is
  // scaled by d_scale_a[d_row_group[r]] · *d_scale_b, the two multiplied
  // first. Where cuBLASLt takes outer-vector scales (m <= kMaxOuterRows,
  // n <= kMaxOuterColumns), a tiny kernel writes the row scales and one GEMM
  // applies them in its epilogue. Otherwise the product runs unscaled into a
  // binary32 buffer kept by this object, then CudaScaleRowGroups applies
  // each row's scale and rounds once (said once per shape, as fallbacks are).
  absl::Status E4m3RowGroups(const uint8_t* qa, const float* d_scale_a,
                             const int32_t* d_row_group, const uint8_t* qb,
                             const float* d_scale_b, int64_t m, int64_t n,
                             int64_t k, void* y, DType y_dtype,
                             cudaStream_t stream, int64_t plan_n = 0);

  // How E4m3RowGroups and E4m3ColumnScales apply per-row scales:
  //   kOuterVector: one GEMM, the scales in cuBLASLt's epilogue as outer
  //     vectors (where cuBLASLt takes them; two passes where it will not);
  //   kTwoPass: the scalar-scaled GEMM into binary32, then
  //     CudaScaleRowGroups scales each row and rounds once (the contract's
  //     order, scale product first);
  //   kCutlass: CUTLASS's sm_90 FP8 GEMM with the row scales (scale
  //     product first) in its epilogue, bfloat16 out (gemm_cutlass.h);
  //     where it is not built, not on an sm_90 device, or does not serve
  //     the call (per-column weight scales, binary32 output, K not a
  //     multiple of 16, N of 8, misaligned operands): two passes.
  // Which is faster depends on the shape and M (an H200 ran Mistral-7B's
  // decode at batch 8 in 6.97 ms/step with the first, 5.29 with the
  // second), so it is measured, not guessed (worker/gemm_choices.h).
  enum class RowScaling { kOuterVector, kTwoPass, kCutlass };
  static constexpr int kRowScalings = 3;
  static absl::string_view RowScalingName(RowScaling way);
  // Whether `way` runs here as itself (kCutlass: built, and the device is
  // sm_90), so that it is worth measuring.
  bool RowScalingAvailable(RowScaling way) const;
  // From now on, a call whose M is in (RowBucket(m) / 2, RowBucket(m)]
  // (kernels/gemm_args.h) against the layer plan_n (0: n) x k, with a
  // weight scale per column or not, scales its rows `way`. Unset:
  // kOuterVector.
  void SetRowScaling(int64_t m, int64_t plan_n, int64_t n, int64_t k,
                     bool b_per_column, RowScaling way);

  // E4m3RowGroups with one weight scale per output column (per-channel
  // weights, compressed-tensors' "channel" strategy; d_scale_b device [n]):
  // y[r][c] = (qa_r · qb_c) · (d_scale_a[g] · d_scale_b[c]). d_row_group may
  // be null: one activation scale for every row. In one GEMM the weights'
  // scales are cuBLASLt's outer vector along N, and cuBLASLt multiplies the
  // two scales itself (its rounding, not necessarily the contract's
  // scale-product-first); the two-pass path keeps the contract's order.
  absl::Status E4m3ColumnScales(const uint8_t* qa, const float* d_scale_a,
                                const int32_t* d_row_group, const uint8_t* qb,
                                const float* d_scale_b, int64_t m, int64_t n,
                                int64_t k, void* y, DType y_dtype,
                                cudaStream_t stream, int64_t plan_n = 0);

  absl::Status Bf16(const octet::Bf16* a, const octet::Bf16* b, int64_t m,
                    int64_t n, int64_t k, void* y, DType y_dtype,
                    cudaStream_t stream, int64_t plan_n = 0);

  // Row-parallel block sums (Backend::GemmBlockSums): sums[m][n] (binary32)
  // = x·wᵀ with K cut into `blocks` equal blocks, each summed as if it were
  // the whole K, the block sums added in TreeSum order (kernels/tree_sum.h);
  // x [m][k] and w [n][k] both e4m3 codes (unscaled sums) or both bfloat16
  // (in_dtype). The blocks run as one batched GEMM whose algorithm is
  // chosen for the whole layer's K, plan_k (0: k), cut into blocks of the
  // same size: a block's sums are the same bits on whichever rank, and in
  // whichever position, it is computed. blocks <= kMaxBlocks.
  absl::Status BlockSums(const void* x, const void* w, DType in_dtype,
                         int64_t m, int64_t n, int64_t k, int64_t blocks,
                         int64_t plan_k, float* sums, cudaStream_t stream);
  // BlockSums less the final TreeSum: the blocks' own sums, binary32
  // [blocks][m][n], for a kernel that adds them itself (CudaScaleRowGroups).
  // They are `single` when blocks is 1, otherwise scratch of this object
  // that the next BlockSums or BlockProducts overwrites: read them on
  // `stream`, next.
  absl::StatusOr<const float*> BlockProducts(const void* x, const void* w,
                                             DType in_dtype, int64_t m,
                                             int64_t n, int64_t k,
                                             int64_t blocks, int64_t plan_k,
                                             float* single,
                                             cudaStream_t stream);

  // "cuBLASLt <version>" of the library loaded.
  static std::string LibraryVersion();

  // The path the most recent call took, and when it was the fallback, why.
  Path LastPath() const;
  std::string LastFallbackReason() const;
  static absl::string_view PathName(Path path);

 private:
  struct State;  // cuBLASLt handle, workspace, plan cache (gemm.cc)
  explicit CublasLtGemm(std::unique_ptr<State> state);
  // One GEMM with scalar scales (FP8; null for BF16) on cuBLASLt or the
  // fallback kernel.
  absl::Status Run(bool fp8, int64_t m, int64_t n, int64_t k, int64_t plan_n,
                   DType y_dtype, const void* a, const void* b,
                   const float* d_scale_a, const float* d_scale_b, void* y,
                   cudaStream_t stream);
  // E4m3RowGroups and E4m3ColumnScales: d_scale_b is one scale, or with
  // b_per_column one per column of y.
  absl::Status ScaledE4m3(const uint8_t* qa, const float* d_scale_a,
                          const int32_t* d_row_group, const uint8_t* qb,
                          const float* d_scale_b, bool b_per_column, int64_t m,
                          int64_t n, int64_t k, int64_t plan_n, void* y,
                          DType y_dtype, cudaStream_t stream);
  // ScaledE4m3 through CUTLASS; *done false where it does not serve the
  // call (the caller takes the two passes).
  absl::Status CutlassE4m3(const uint8_t* qa, const float* d_scale_a,
                           const int32_t* d_row_group, const uint8_t* qb,
                           const float* d_scale_b, bool b_per_column, int64_t m,
                           int64_t n, int64_t k, void* y, DType y_dtype,
                           cudaStream_t stream, bool* done);
  // ScaledE4m3 in one GEMM with outer-vector scales; *done false when
  // cuBLASLt refuses them (the caller takes the two passes).
  absl::Status OuterVectorE4m3(const uint8_t* qa, const float* d_scale_a,
                               const int32_t* d_row_group, const uint8_t* qb,
                               const float* d_scale_b, bool b_per_column,
                               int64_t m, int64_t n, int64_t k, int64_t plan_n,
                               void* y, DType y_dtype, cudaStream_t stream,
                               bool* done);

  std::unique_ptr<State> state_;
};

}  // namespace octet
