// cuBLASLt plans and calls for CublasLtGemm (see gemm.h).
//
// Row-major Y[M,N] = A[M,K]·B[N,K]ᵀ is, in cuBLAS's column-major terms,
// Yᵀ[N,M] = B·Aᵀ: the weights are cuBLAS's "A" with op T (a K x N column-major
// matrix with ld K), the activations are cuBLAS's "B" with op N (K x M, ld K),
// and the output is N x M with ld N. This "TN" form is the one cuBLASLt's FP8
// kernels require.
#include "kernels/cuda/gemm.h"

#include <cublasLt.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/gemm_fallback.h"
#include "kernels/gemm_args.h"

namespace octet {

namespace {

// One cached cuBLASLt problem: descriptors and the heuristic's algorithm, or
// the decision to use the fallback kernel.
struct Plan {
  bool fallback = false;
  std::string fallback_reason;  // why cuBLASLt does not serve it
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, y = nullptr;
  cublasLtMatmulAlgo_t algo{};

  ~Plan() {
    if (y) cublasLtMatrixLayoutDestroy(y);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

struct PlanKey {
  bool fp8;
  int64_t m, n, k;
  DType y_dtype;
  int alignment;  // smallest power-of-two alignment of the operands (<= 256)
  // FP8 with a scale per row of activations and per column of weights
  // (cuBLASLt's outer-vector scales) instead of one scalar each.
  bool row_scaled = false;
  template <typename H>
  friend H AbslHashValue(H h, const PlanKey& key) {
    return H::combine(std::move(h), key.fp8, key.m, key.n, key.k, key.y_dtype,
                      key.alignment, key.row_scaled);
  }
  bool operator==(const PlanKey&) const = default;
};

int Alignment(const void* p) {
  const uintptr_t v = reinterpret_cast<uintptr_t>(p);
  int align = 256;
  while (align > 1 && v % align != 0) align /= 2;
  return align;
}

}  // namespace

struct CublasLtGemm::State {
  explicit State(const Options& o) : options(o) {}
  ~State() {
    plans.clear();
    for (float* p : retired_sums) cudaFree(p);
    if (sums) cudaFree(sums);
    if (row_scales) cudaFree(row_scales);
    if (ones) cudaFree(ones);
    if (one) cudaFree(one);
    if (workspace) cudaFree(workspace);
    if (handle) cublasLtDestroy(handle);
  }
  // Returns the plan for `key`, asking the heuristic the first time.
  absl::StatusOr<Plan*> GetPlan(const PlanKey& key)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Caches `plan` as a fallback for `reason`, which is logged the first
  // time this weight shape falls back.
  Plan* AddFallback(const PlanKey& key, std::unique_ptr<Plan> plan,
                    std::string reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Enqueues `plan`'s cuBLASLt call: Y = A·Bᵀ for our activations a and
  // weights b, FP8 scales (scalars, or vectors for a row-scaled plan) when
  // scale_a is not null.
  absl::Status Matmul(Plan& plan, const void* a, const void* b,
                      const float* scale_a, const float* scale_b, void* y,
                      cudaStream_t stream) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  const Options options;
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  float* one = nullptr;  // device 1.0f: the unit scale of E4m3RowGroups
  // E4m3RowGroups in one GEMM: kMaxOuterColumns ones (the weights' column
  // scales) and kMaxOuterRows row scales, allocated once so that captured
  // work (CUDA graphs) can name them.
  float* ones = nullptr;
  float* row_scales = nullptr;
  // E4m3RowGroups in two passes: the unscaled binary32 product, grown on
  // demand. Outgrown buffers are kept until this object dies, since
  // captured work may still name them.
  float* sums = nullptr;
  size_t sums_bytes = 0;
  std::vector<float*> retired_sums;
  absl::Mutex mu;
  absl::flat_hash_map<PlanKey, std::unique_ptr<Plan>> plans ABSL_GUARDED_BY(mu);
  Path last_path ABSL_GUARDED_BY(mu) = Path::kNone;
  std::string last_fallback_reason ABSL_GUARDED_BY(mu);
  // (fp8, n, k, alignment, row_scaled) of the fallbacks logged so far.
  absl::flat_hash_set<std::tuple<bool, int64_t, int64_t, int, bool>>
      logged_fallbacks ABSL_GUARDED_BY(mu);
};

CublasLtGemm::CublasLtGemm(std::unique_ptr<State> state)
    : state_(std::move(state)) {}
CublasLtGemm::~CublasLtGemm() = default;

absl::StatusOr<std::unique_ptr<CublasLtGemm>> CublasLtGemm::Create(
    const Options& options) {
  auto state = std::make_unique<State>(options);
  OCTET_CUDA_RETURN_IF_ERROR(cublasLtCreate(&state->handle));
  if (options.workspace_bytes > 0) {
    OCTET_CUDA_RETURN_IF_ERROR(
        cudaMalloc(&state->workspace, options.workspace_bytes));
  }
  OCTET_CUDA_RETURN_IF_ERROR(
      cudaMalloc(reinterpret_cast<void**>(&state->one), sizeof(float)));
  const float one = 1.0f;
  OCTET_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(state->one, &one, sizeof(float), cudaMemcpyHostToDevice));
  OCTET_CUDA_RETURN_IF_ERROR(cudaMalloc(reinterpret_cast<void**>(&state->ones),
                                        kMaxOuterColumns * sizeof(float)));
  const std::vector<float> ones(kMaxOuterColumns, 1.0f);
  OCTET_CUDA_RETURN_IF_ERROR(cudaMemcpy(state->ones, ones.data(),
                                        kMaxOuterColumns * sizeof(float),
                                        cudaMemcpyHostToDevice));
  OCTET_CUDA_RETURN_IF_ERROR(
      cudaMalloc(reinterpret_cast<void**>(&state->row_scales),
                 kMaxOuterRows * sizeof(float)));
  return std::unique_ptr<CublasLtGemm>(new CublasLtGemm(std::move(state)));
}

absl::StatusOr<Plan*> CublasLtGemm::State::GetPlan(const PlanKey& key) {
  auto it = plans.find(key);
  if (it != plans.end()) return it->second.get();

  auto plan = std::make_unique<Plan>();
  // cuBLASLt's FP8 kernels need 16-byte aligned operands and leading
  // dimensions (K and N multiples of 16 for 8-bit codes, as PyTorch's
  // _scaled_mm also requires); other shapes go straight to the fallback.
  if (key.fp8 && !(key.k % 16 == 0 && key.n % 16 == 0 && key.alignment >= 16)) {
    return AddFallback(key, std::move(plan),
                       absl::StrCat("cuBLASLt FP8 needs K and N multiples of "
                                    "16 and 16-byte aligned operands (K=",
                                    key.k, " N=", key.n, ", aligned to ",
                                    key.alignment, " bytes)"));
  }
  const cudaDataType_t in_type = key.fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
  const cudaDataType_t y_type =
      key.y_dtype == DType::kBf16 ? CUDA_R_16BF : CUDA_R_32F;
  OCTET_CUDA_RETURN_IF_ERROR(
      cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t op_t = CUBLAS_OP_T, op_n = CUBLAS_OP_N;
  OCTET_CUDA_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
      plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_t, sizeof(op_t)));
  OCTET_CUDA_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
      plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_n, sizeof(op_n)));
  if (key.fp8) {
    // binary32 accumulation throughout (the contract), not Hopper's faster
    // reduced-precision FP8 accumulation.
    const int8_t fast_accum = 0;
    OCTET_CUDA_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
        plan->desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast_accum,
        sizeof(fast_accum)));
  }
  if (key.row_scaled) {
    const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    for (auto attr : {CUBLASLT_MATMUL_DESC_A_SCALE_MODE,
                      CUBLASLT_MATMUL_DESC_B_SCALE_MODE}) {
      if (cublasLtMatmulDescSetAttribute(
              plan->desc, attr, &mode, sizeof(mode)) != CUBLAS_STATUS_SUCCESS) {
        return AddFallback(key, std::move(plan),
                           "this cuBLASLt has no outer-vector FP8 scales");
      }
    }
  }
  OCTET_CUDA_RETURN_IF_ERROR(
      cublasLtMatrixLayoutCreate(&plan->a, in_type, key.k, key.n, key.k));
  OCTET_CUDA_RETURN_IF_ERROR(
      cublasLtMatrixLayoutCreate(&plan->b, in_type, key.k, key.m, key.k));
  OCTET_CUDA_RETURN_IF_ERROR(
      cublasLtMatrixLayoutCreate(&plan->y, y_type, key.n, key.m, key.n));

  cublasLtMatmulPreference_t pref = nullptr;
  OCTET_CUDA_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&pref));
  const size_t ws = options.workspace_bytes;
  const uint32_t align = static_cast<uint32_t>(key.alignment);
  cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
    if (st == CUBLAS_STATUS_SUCCESS) {
      st = cublasLtMatmulPreferenceSetAttribute(pref, attr, &align,
                                                sizeof(align));
    }
  }
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  if (st == CUBLAS_STATUS_SUCCESS) {
    st = cublasLtMatmulAlgoGetHeuristic(handle, plan->desc, plan->a, plan->b,
                                        plan->y, plan->y, pref, 1, &result,
                                        &found);
  }
  cublasLtMatmulPreferenceDestroy(pref);
  // No algorithm for this shape/alignment (NOT_SUPPORTED, or none found):
  // serve it with the fallback kernel rather than fail. Any other status is
  // a real error and is returned.
  if (st == CUBLAS_STATUS_SUCCESS && found > 0) {
    plan->algo = result.algo;
  } else if (st == CUBLAS_STATUS_SUCCESS || st == CUBLAS_STATUS_NOT_SUPPORTED) {
    return AddFallback(
        key, std::move(plan),
        absl::StrCat("the cuBLASLt heuristic has no algorithm (",
                     st == CUBLAS_STATUS_SUCCESS
                         ? "none found"
                         : "CUBLAS_STATUS_NOT_SUPPORTED",
                     ", operands aligned to ", key.alignment, " bytes)"));
  } else {
    OCTET_CUDA_RETURN_IF_ERROR(st);
  }
  Plan* raw = plan.get();
  plans.emplace(key, std::move(plan));
  return raw;
}

namespace {

// Y = 0 for K == 0: an empty sum. cuBLASLt is never asked (its layouts would
// have zero rows and a zero leading dimension, which it refuses).
absl::Status ZeroOutput(int64_t m, int64_t n, void* y, DType y_dtype,
                        cudaStream_t stream) {
  OCTET_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(
      y, 0, static_cast<size_t>(m) * n * DTypeSize(y_dtype), stream));
  return absl::OkStatus();
}

}  // namespace

Plan* CublasLtGemm::State::AddFallback(const PlanKey& key,
                                       std::unique_ptr<Plan> plan,
                                       std::string reason) {
  plan->fallback = true;
  plan->fallback_reason = std::move(reason);
  // Once per weight shape and alignment, whatever the number of rows.
  if (logged_fallbacks
          .insert({key.fp8, key.n, key.k, key.alignment, key.row_scaled})
          .second &&
      options.on_fallback) {
    options.on_fallback(absl::StrCat(
        key.fp8 ? "FP8" : "BF16", " GEMM N=", key.n, " K=", key.k,
        key.row_scaled
            ? " with per-sequence scales runs in two passes (an M x N binary32 "
              "product, then a scaling kernel): "
            : " goes to octet's fallback kernel, 30-100x slower than "
              "cuBLASLt: ",
        plan->fallback_reason));
  }
  Plan* raw = plan.get();
  plans.emplace(key, std::move(plan));
  return raw;
}

absl::Status CublasLtGemm::Run(bool fp8, int64_t m, int64_t n, int64_t k,
                               DType y_dtype, const void* a, const void* b,
                               const float* d_scale_a, const float* d_scale_b,
                               void* y, cudaStream_t stream) {
  if (k == 0) {
    absl::MutexLock lock(&state_->mu);
    state_->last_path = Path::kNone;
    return ZeroOutput(m, n, y, y_dtype, stream);
  }
  const PlanKey key{
      fp8, m,       n,
      k,   y_dtype, std::min({Alignment(a), Alignment(b), Alignment(y)})};
  absl::MutexLock lock(&state_->mu);
  absl::StatusOr<Plan*> plan = state_->GetPlan(key);
  if (!plan.ok()) return plan.status();
  if ((*plan)->fallback) {
    state_->last_path = Path::kFallback;
    state_->last_fallback_reason = (*plan)->fallback_reason;
    if (key.fp8) {
      return CudaGemmE4m3Fallback(static_cast<const uint8_t*>(a), d_scale_a,
                                  static_cast<const uint8_t*>(b), d_scale_b,
                                  key.m, key.n, key.k, y, key.y_dtype, stream);
    }
    return CudaGemmBf16Fallback(static_cast<const octet::Bf16*>(a),
                                static_cast<const octet::Bf16*>(b), key.m,
                                key.n, key.k, y, key.y_dtype, stream);
  }
  return state_->Matmul(**plan, a, b, d_scale_a, d_scale_b, y, stream);
}

absl::Status CublasLtGemm::State::Matmul(Plan& plan, const void* a,
                                         const void* b, const float* scale_a,
                                         const float* scale_b, void* y,
                                         cudaStream_t stream) {
  last_path = Path::kCublasLt;
  if (scale_a != nullptr) {
    // cuBLAS's A is our weights (b), its B our activations (a).
    OCTET_CUDA_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
        plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &scale_b,
        sizeof(scale_b)));
    OCTET_CUDA_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
        plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &scale_a,
        sizeof(scale_a)));
  }
  const float alpha = 1.0f, beta = 0.0f;
  OCTET_CUDA_RETURN_IF_ERROR(cublasLtMatmul(
      handle, plan.desc, &alpha, b, plan.a, a, plan.b, &beta, y, plan.y, y,
      plan.y, &plan.algo, workspace, options.workspace_bytes, stream));
  return absl::OkStatus();
}

absl::Status CublasLtGemm::E4m3(const uint8_t* qa, const float* d_scale_a,
                                const uint8_t* qb, const float* d_scale_b,
                                int64_t m, int64_t n, int64_t k, void* y,
                                DType y_dtype, cudaStream_t stream) {
  absl::Status s =
      CheckGemmArgs(qa, qb, m, n, k, y, y_dtype, "CublasLtGemm::E4m3");
  if (!s.ok()) return s;
  if (d_scale_a == nullptr || d_scale_b == nullptr) {
    return absl::InvalidArgumentError("CublasLtGemm::E4m3: null scale pointer");
  }
  if (m == 0 || n == 0) return absl::OkStatus();
  return Run(true, m, n, k, y_dtype, qa, qb, d_scale_a, d_scale_b, y, stream);
}

absl::Status CublasLtGemm::E4m3RowGroups(
    const uint8_t* qa, const float* d_scale_a, const int32_t* d_row_group,
    const uint8_t* qb, const float* d_scale_b, int64_t m, int64_t n, int64_t k,
    void* y, DType y_dtype, cudaStream_t stream) {
  if (d_row_group == nullptr) {
    return absl::InvalidArgumentError(
        "CublasLtGemm::E4m3RowGroups: null row map");
  }
  return ScaledE4m3(qa, d_scale_a, d_row_group, qb, d_scale_b, false, m, n, k,
                    y, y_dtype, stream);
}

absl::Status CublasLtGemm::E4m3ColumnScales(
    const uint8_t* qa, const float* d_scale_a, const int32_t* d_row_group,
    const uint8_t* qb, const float* d_scale_b, int64_t m, int64_t n, int64_t k,
    void* y, DType y_dtype, cudaStream_t stream) {
  return ScaledE4m3(qa, d_scale_a, d_row_group, qb, d_scale_b, true, m, n, k, y,
                    y_dtype, stream);
}

absl::Status CublasLtGemm::ScaledE4m3(const uint8_t* qa, const float* d_scale_a,
                                      const int32_t* d_row_group,
                                      const uint8_t* qb, const float* d_scale_b,
                                      bool b_per_column, int64_t m, int64_t n,
                                      int64_t k, void* y, DType y_dtype,
                                      cudaStream_t stream) {
  const char* what = b_per_column ? "CublasLtGemm::E4m3ColumnScales"
                                  : "CublasLtGemm::E4m3RowGroups";
  absl::Status s = CheckGemmArgs(qa, qb, m, n, k, y, y_dtype, what);
  if (!s.ok()) return s;
  if (d_scale_a == nullptr || d_scale_b == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": null scale pointer"));
  }
  if (m == 0 || n == 0) return absl::OkStatus();
  if (k == 0) {
    return Run(true, m, n, k, y_dtype, qa, qb, state_->one, state_->one, y,
               stream);
  }
  // One GEMM where cuBLASLt takes outer-vector scales. Rows: d_scale_a[g],
  // times *d_scale_b for a per-tensor weight (multiplied first, as the
  // contract rounds), by a tiny kernel. Columns: ones, or the weight's
  // per-column scales.
  if (m <= kMaxOuterRows && n <= kMaxOuterColumns) {
    const PlanKey key{
        .fp8 = true,
        .m = m,
        .n = n,
        .k = k,
        .y_dtype = y_dtype,
        .alignment = std::min({Alignment(qa), Alignment(qb), Alignment(y)}),
        .row_scaled = true};
    absl::MutexLock lock(&state_->mu);
    absl::StatusOr<Plan*> plan = state_->GetPlan(key);
    if (!plan.ok()) return plan.status();
    if (!(*plan)->fallback) {
      s = CudaRowScales(d_scale_a, d_row_group,
                        b_per_column ? state_->one : d_scale_b, m,
                        state_->row_scales, stream);
      if (!s.ok()) return s;
      return state_->Matmul(**plan, qa, qb, state_->row_scales,
                            b_per_column ? d_scale_b : state_->ones, y, stream);
    }
  }
  // Two passes: the unscaled product, then each row scaled.
  const size_t bytes = static_cast<size_t>(m) * n * sizeof(float);
  float* sums;
  {
    absl::MutexLock lock(&state_->mu);
    if (state_->sums_bytes < bytes) {
      if (state_->sums != nullptr) state_->retired_sums.push_back(state_->sums);
      state_->sums = nullptr;
      state_->sums_bytes = 0;
      OCTET_CUDA_RETURN_IF_ERROR(
          cudaMalloc(reinterpret_cast<void**>(&state_->sums), bytes));
      state_->sums_bytes = bytes;
    }
    sums = state_->sums;
  }
  s = Run(true, m, n, k, DType::kF32, qa, qb, state_->one, state_->one, sums,
          stream);
  if (!s.ok()) return s;
  return CudaScaleRowGroups(sums, m, n, d_scale_a, d_row_group, d_scale_b,
                            b_per_column, y, y_dtype, stream);
}

absl::Status CublasLtGemm::Bf16(const octet::Bf16* a, const octet::Bf16* b,
                                int64_t m, int64_t n, int64_t k, void* y,
                                DType y_dtype, cudaStream_t stream) {
  absl::Status s =
      CheckGemmArgs(a, b, m, n, k, y, y_dtype, "CublasLtGemm::Bf16");
  if (!s.ok()) return s;
  if (m == 0 || n == 0) return absl::OkStatus();
  return Run(false, m, n, k, y_dtype, a, b, nullptr, nullptr, y, stream);
}

CublasLtGemm::Path CublasLtGemm::LastPath() const {
  absl::MutexLock lock(&state_->mu);
  return state_->last_path;
}

std::string CublasLtGemm::LastFallbackReason() const {
  absl::MutexLock lock(&state_->mu);
  return state_->last_path == Path::kFallback ? state_->last_fallback_reason
                                              : std::string();
}

absl::string_view CublasLtGemm::PathName(Path path) {
  switch (path) {
    case Path::kNone:
      return "none";
    case Path::kCublasLt:
      return "cublaslt";
    case Path::kFallback:
      return "fallback";
  }
  return "?";
}

}  // namespace octet
