// cuBLASLt plans and calls for CublasLtGemm (see gemm.h).
//
// Row-major Y[M,N] = A[M,K]·B[N,K]ᵀ is, in cuBLAS's column-major terms,
// Yᵀ[N,M] = B·Aᵀ: the weights are cuBLAS's "A" with op T (a K x N column-major
// matrix with ld K), the activations are cuBLAS's "B" with op N (K x M, ld K),
// and the output is N x M with ld N. This "TN" form is the one cuBLASLt's FP8
// kernels require. K blocks (BlockSums) are a strided batch: entry b is
// columns [b·Kb, (b+1)·Kb) of both operands (rows ld apart) and the b-th
// M x N output.
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
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "base/status_macros.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/gemm_cutlass.h"
#include "kernels/cuda/gemm_fallback.h"
#include "kernels/gemm_args.h"

namespace octet {

namespace {

// A GEMM as cuBLASLt is asked it: for b < batch, Y_b[m][n] = X_b·W_bᵀ where
// X_b and W_b are k columns of our activations [m][ld] and weights [n][ld]
// starting at column b·k (ld: k for a plain GEMM).
struct Shape {
  int64_t m = 0, n = 0, k = 0, ld = 0, batch = 1;
  bool operator==(const Shape&) const = default;
  template <typename H>
  friend H AbslHashValue(H h, const Shape& s) {
    return H::combine(std::move(h), s.m, s.n, s.k, s.ld, s.batch);
  }
};

struct PlanKey {
  bool fp8;
  DType y_dtype;
  // FP8 with a scale per row of activations and per column of weights
  // (cuBLASLt's outer-vector scales) instead of one scalar each.
  bool row_scaled;
  int alignment;  // smallest power-of-two alignment of the operands (<= 256)
  Shape run;      // the call's problem
  Shape plan;     // the problem the algorithm is chosen for (TP = 1's)
  template <typename H>
  friend H AbslHashValue(H h, const PlanKey& key) {
    return H::combine(std::move(h), key.fp8, key.y_dtype, key.row_scaled,
                      key.alignment, key.run, key.plan);
  }
  bool operator==(const PlanKey&) const = default;
};

// Matrix layouts of one problem: cuBLAS's A (weights), B (activations), Y.
struct Layouts {
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, y = nullptr;
  Layouts() = default;
  Layouts(const Layouts&) = delete;
  Layouts& operator=(const Layouts&) = delete;
  ~Layouts() {
    if (y) cublasLtMatrixLayoutDestroy(y);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
  }
};

// One cached cuBLASLt problem: descriptors and the heuristic's algorithm, or
// the decision to use the fallback kernel (for row-scaled plans: the two
// passes).
struct Plan {
  bool fallback = false;
  std::string fallback_reason;  // why cuBLASLt does not serve it
  cublasLtMatmulDesc_t desc = nullptr;
  Layouts layouts;  // the call's (PlanKey::run)
  cublasLtMatmulAlgo_t algo{};

  ~Plan() {
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
};

// The largest power of two up to 256 that divides v.
int AlignmentOf(uintptr_t v) {
  int align = 256;
  while (align > 1 && v % align != 0) align /= 2;
  return align;
}
int Alignment(const void* p) {
  return AlignmentOf(reinterpret_cast<uintptr_t>(p));
}

// The alignment a planned problem is asked with: at most 16 bytes, which
// every rank's buffers have, so that each rank asks the same question.
int PlannedAlignment(int alignment) { return std::min(alignment, 16); }

// A layout of `rows` x `cols` column-major with leading dimension ld, and
// `batch` matrices `offset` elements apart.
absl::Status MakeLayout(cudaDataType_t type, int64_t rows, int64_t cols,
                        int64_t ld, int64_t batch, int64_t offset,
                        cublasLtMatrixLayout_t* layout) {
  OCTET_CUDA_RETURN_IF_ERROR(
      cublasLtMatrixLayoutCreate(layout, type, rows, cols, ld));
  if (batch == 1) return absl::OkStatus();
  const int32_t count = static_cast<int32_t>(batch);
  OCTET_CUDA_RETURN_IF_ERROR(cublasLtMatrixLayoutSetAttribute(
      *layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
  OCTET_CUDA_RETURN_IF_ERROR(cublasLtMatrixLayoutSetAttribute(
      *layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &offset,
      sizeof(offset)));
  return absl::OkStatus();
}

absl::Status MakeLayouts(const PlanKey& key, const Shape& s, Layouts& out) {
  const cudaDataType_t in = key.fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
  const cudaDataType_t y =
      key.y_dtype == DType::kBf16 ? CUDA_R_16BF : CUDA_R_32F;
  OCTET_RETURN_IF_ERROR(MakeLayout(in, s.k, s.n, s.ld, s.batch, s.k, &out.a));
  OCTET_RETURN_IF_ERROR(MakeLayout(in, s.k, s.m, s.ld, s.batch, s.k, &out.b));
  return MakeLayout(y, s.n, s.m, s.n, s.batch, s.m * s.n, &out.y);
}

// Why cuBLASLt's FP8 kernels cannot take `key`, or "" when they may: they
// need 16-byte aligned operands and leading dimensions (K, N and the rows'
// stride multiples of 16 for 8-bit codes, as PyTorch's _scaled_mm also
// requires).
std::string Fp8Refusal(const PlanKey& key) {
  if (!key.fp8) return "";
  for (const Shape& s : {key.run, key.plan}) {
    if (s.k % 16 != 0 || s.n % 16 != 0 || s.ld % 16 != 0) {
      return absl::StrCat(
          "cuBLASLt FP8 needs K, N and the row stride multiples of 16 and "
          "16-byte aligned operands (K=",
          s.k, " N=", s.n, " stride ", s.ld, ")");
    }
  }
  if (key.alignment < 16) {
    return absl::StrCat(
        "cuBLASLt FP8 needs 16-byte aligned operands (these are aligned to ",
        key.alignment, " bytes)");
  }
  return "";
}

// Puts the FP8 scales of our activations and weights on `desc`: cuBLAS's
// B and A (its A is our weights, its B our activations).
absl::Status SetScalePointers(cublasLtMatmulDesc_t desc,
                              const float* activations, const float* weights) {
  OCTET_CUDA_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
      desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &weights, sizeof(weights)));
  OCTET_CUDA_RETURN_IF_ERROR(
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                     &activations, sizeof(activations)));
  return absl::OkStatus();
}

std::string ProblemText(const Shape& s) {
  return absl::StrCat(
      "M=", s.m, " N=", s.n, " K=", s.k,
      s.batch > 1 ? absl::StrCat(" x", s.batch, " blocks") : std::string());
}

}  // namespace

struct CublasLtGemm::State {
  explicit State(const Options& o) : options(o) {}
  ~State() {
    plans.clear();
    for (float* p : retired) cudaFree(p);
    for (float* p : {sums, blocks, row_scales, ones, one, slot_a, slot_b}) {
      if (p) cudaFree(p);
    }
    if (workspace) cudaFree(workspace);
    if (handle) cublasLtDestroy(handle);
  }
  absl::Status Allocate(float** p, int64_t floats) {
    OCTET_CUDA_RETURN_IF_ERROR(cudaMalloc(reinterpret_cast<void**>(p),
                                          static_cast<size_t>(floats) * 4));
    return absl::OkStatus();
  }
  // Returns the plan for `key`, asking the heuristic the first time.
  absl::StatusOr<Plan*> GetPlan(const PlanKey& key)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // The descriptor of `key`'s problem, with device scale pointers of this
  // object's own on FP8 ones (cuBLASLt wants them before the heuristic); a
  // cuBLASLt without outer-vector scales is FailedPrecondition.
  absl::Status MakeDesc(const PlanKey& key, Plan& plan);
  // The heuristic's algorithm for `desc` and `layouts`, or a refusal
  // (FailedPrecondition saying why).
  absl::StatusOr<cublasLtMatmulAlgo_t> Heuristic(const PlanKey& key,
                                                 cublasLtMatmulDesc_t desc,
                                                 const Layouts& layouts);
  // Chooses plan.algo for key.plan and makes the layouts of key.run; a
  // refusal is FailedPrecondition.
  absl::Status ChooseAlgorithm(const PlanKey& key, Plan& plan)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Caches `plan` as a fallback for `reason`, which is logged the first
  // time this weight shape falls back.
  Plan* AddFallback(const PlanKey& key, std::unique_ptr<Plan> plan,
                    std::string reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Says `message` once for `what`.
  void SayOnce(const std::tuple<bool, int64_t, int64_t, int, bool>& what,
               const std::string& message) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // Enqueues `plan`'s cuBLASLt call: Y = A·Bᵀ for our activations a and
  // weights b, FP8 scales (scalars, or vectors for a row-scaled plan) when
  // scale_a is not null.
  absl::Status Matmul(Plan& plan, const void* a, const void* b,
                      const float* scale_a, const float* scale_b, void* y,
                      cudaStream_t stream) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // `p` when it is 16-byte aligned (cuBLASLt's rule for scale pointers),
  // else `slot` holding a copy of its `count` floats, the copy enqueued on
  // `stream` before the GEMM that reads it.
  absl::StatusOr<const float*> Aligned(const float* p, int64_t count,
                                       float* slot, cudaStream_t stream);
  // A binary32 scratch of at least `floats` (*buf, grown on demand; the
  // outgrown one is kept until this object dies, since captured work may
  // still name it).
  absl::StatusOr<float*> Scratch(float*& buf, size_t& have, size_t floats)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  const Options options;
  // CUTLASS's GEMM is built and the device is sm_90 (RowScaling::kCutlass).
  bool cutlass = false;
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  float* one = nullptr;  // device 1.0f: the unit scale
  // E4m3RowGroups in one GEMM: kMaxOuterColumns ones (the weights' column
  // scales) and kMaxOuterRows row scales, allocated once so that captured
  // work (CUDA graphs) can name them.
  float* ones = nullptr;
  float* row_scales = nullptr;
  // Aligned copies of scales that are not (Aligned): the activations'
  // scalar, the weights' scalar or column vector.
  float* slot_a = nullptr;  // 4 floats
  float* slot_b = nullptr;  // kMaxOuterColumns floats
  // Scratch: the two-pass path's unscaled product, and BlockSums' blocks.
  float* sums = nullptr;
  size_t sums_floats = 0;
  float* blocks = nullptr;
  size_t blocks_floats = 0;
  std::vector<float*> retired;
  absl::Mutex mu;
  // SetRowScaling's choices by (RowBucket(m), plan_n, k, b_per_column).
  absl::flat_hash_map<std::tuple<int64_t, int64_t, int64_t, bool>, RowScaling>
      row_scaling ABSL_GUARDED_BY(mu);
  absl::flat_hash_map<PlanKey, std::unique_ptr<Plan>> plans ABSL_GUARDED_BY(mu);
  Path last_path ABSL_GUARDED_BY(mu) = Path::kNone;
  std::string last_fallback_reason ABSL_GUARDED_BY(mu);
  // (fp8, n, k, alignment, row_scaled) of the messages said so far.
  absl::flat_hash_set<std::tuple<bool, int64_t, int64_t, int, bool>> said
      ABSL_GUARDED_BY(mu);
};

CublasLtGemm::CublasLtGemm(std::unique_ptr<State> state)
    : state_(std::move(state)) {}
CublasLtGemm::~CublasLtGemm() = default;

absl::StatusOr<std::unique_ptr<CublasLtGemm>> CublasLtGemm::Create(
    const Options& options) {
  auto state = std::make_unique<State>(options);
  OCTET_CUDA_RETURN_IF_ERROR(cublasLtCreate(&state->handle));
  int device = 0, major = 0, minor = 0;
  OCTET_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  OCTET_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(
      &major, cudaDevAttrComputeCapabilityMajor, device));
  OCTET_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(
      &minor, cudaDevAttrComputeCapabilityMinor, device));
  state->cutlass = cutlass_gemm::Built() && major == 9 && minor == 0;
  if (options.workspace_bytes > 0) {
    OCTET_CUDA_RETURN_IF_ERROR(
        cudaMalloc(&state->workspace, options.workspace_bytes));
  }
  OCTET_RETURN_IF_ERROR(state->Allocate(&state->one, 1));
  OCTET_RETURN_IF_ERROR(state->Allocate(&state->ones, kMaxOuterColumns));
  OCTET_RETURN_IF_ERROR(state->Allocate(&state->row_scales, kMaxOuterRows));
  OCTET_RETURN_IF_ERROR(state->Allocate(&state->slot_a, 4));
  OCTET_RETURN_IF_ERROR(state->Allocate(&state->slot_b, kMaxOuterColumns));
  const std::vector<float> ones(kMaxOuterColumns, 1.0f);
  OCTET_CUDA_RETURN_IF_ERROR(cudaMemcpy(state->one, ones.data(), sizeof(float),
                                        cudaMemcpyHostToDevice));
  OCTET_CUDA_RETURN_IF_ERROR(cudaMemcpy(state->ones, ones.data(),
                                        kMaxOuterColumns * sizeof(float),
                                        cudaMemcpyHostToDevice));
  // Row scales are written before every use; ones until then, so that the
  // descriptors' pointers name initialized memory.
  OCTET_CUDA_RETURN_IF_ERROR(cudaMemcpy(state->row_scales, ones.data(),
                                        kMaxOuterRows * sizeof(float),
                                        cudaMemcpyHostToDevice));
  return std::unique_ptr<CublasLtGemm>(new CublasLtGemm(std::move(state)));
}

absl::StatusOr<Plan*> CublasLtGemm::State::GetPlan(const PlanKey& key) {
  auto it = plans.find(key);
  if (it != plans.end()) return it->second.get();
  auto plan = std::make_unique<Plan>();
  if (std::string refusal = Fp8Refusal(key); !refusal.empty()) {
    return AddFallback(key, std::move(plan), std::move(refusal));
  }
  absl::Status chosen = MakeDesc(key, *plan);
  if (chosen.ok()) chosen = ChooseAlgorithm(key, *plan);
  if (absl::IsFailedPrecondition(chosen)) {  // refused: not an error
    return AddFallback(key, std::move(plan), std::string(chosen.message()));
  }
  OCTET_RETURN_IF_ERROR(chosen);
  Plan* raw = plan.get();
  plans.emplace(key, std::move(plan));
  return raw;
}

absl::Status CublasLtGemm::State::MakeDesc(const PlanKey& key, Plan& plan) {
  OCTET_CUDA_RETURN_IF_ERROR(
      cublasLtMatmulDescCreate(&plan.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t op_t = CUBLAS_OP_T, op_n = CUBLAS_OP_N;
  OCTET_CUDA_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
      plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_t, sizeof(op_t)));
  OCTET_CUDA_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
      plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_n, sizeof(op_n)));
  if (!key.fp8) return absl::OkStatus();
  // binary32 accumulation throughout (the contract), not Hopper's faster
  // reduced-precision FP8 accumulation.
  const int8_t fast_accum = 0;
  OCTET_CUDA_RETURN_IF_ERROR(
      cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM,
                                     &fast_accum, sizeof(fast_accum)));
  if (key.row_scaled) {
    const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    for (auto attr : {CUBLASLT_MATMUL_DESC_A_SCALE_MODE,
                      CUBLASLT_MATMUL_DESC_B_SCALE_MODE}) {
      if (cublasLtMatmulDescSetAttribute(
              plan.desc, attr, &mode, sizeof(mode)) != CUBLAS_STATUS_SUCCESS) {
        return absl::FailedPreconditionError(
            "this cuBLASLt has no outer-vector FP8 scales");
      }
    }
  }
  return SetScalePointers(plan.desc, key.row_scaled ? row_scales : one,
                          key.row_scaled ? ones : one);
}

absl::StatusOr<cublasLtMatmulAlgo_t> CublasLtGemm::State::Heuristic(
    const PlanKey& key, cublasLtMatmulDesc_t desc, const Layouts& layouts) {
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
    st = cublasLtMatmulAlgoGetHeuristic(handle, desc, layouts.a, layouts.b,
                                        layouts.y, layouts.y, pref, 1, &result,
                                        &found);
  }
  cublasLtMatmulPreferenceDestroy(pref);
  if (st == CUBLAS_STATUS_SUCCESS && found > 0) return result.algo;
  // No algorithm for this problem (none found, NOT_SUPPORTED, or
  // INVALID_VALUE, which cuBLASLt 13.1 answers for outer-vector scales it
  // will not take): the caller serves it another way.
  return absl::FailedPreconditionError(absl::StrCat(
      "the cuBLASLt heuristic has no algorithm (",
      st == CUBLAS_STATUS_SUCCESS ? "none found" : cublasLtGetStatusName(st),
      ", operands aligned to ", key.alignment, " bytes)"));
}

absl::Status CublasLtGemm::State::ChooseAlgorithm(const PlanKey& key,
                                                  Plan& plan) {
  {
    Layouts planned;
    OCTET_RETURN_IF_ERROR(MakeLayouts(key, key.plan, planned));
    OCTET_ASSIGN_OR_RETURN(plan.algo, Heuristic(key, plan.desc, planned));
  }
  OCTET_RETURN_IF_ERROR(MakeLayouts(key, key.run, plan.layouts));
  if (key.run == key.plan) return absl::OkStatus();
  // TP = 1's algorithm on this rank's slice. Should cuBLASLt refuse it
  // here, this slice's own is the next best: correct, but its sums may
  // differ in the last bits from TP = 1's.
  cublasLtMatmulHeuristicResult_t check{};
  if (cublasLtMatmulAlgoCheck(handle, plan.desc, plan.layouts.a, plan.layouts.b,
                              plan.layouts.y, plan.layouts.y, &plan.algo,
                              &check) == CUBLAS_STATUS_SUCCESS) {
    return absl::OkStatus();
  }
  OCTET_ASSIGN_OR_RETURN(plan.algo, Heuristic(key, plan.desc, plan.layouts));
  SayOnce({key.fp8, key.run.n, key.run.k, -1, key.row_scaled},
          absl::StrCat(key.fp8 ? "FP8" : "BF16", " GEMM ", ProblemText(key.run),
                       ": cuBLASLt will not run the algorithm chosen for the "
                       "whole layer (",
                       ProblemText(key.plan),
                       ") on this slice; it runs its own, so its sums may "
                       "differ in the last bits from TP = 1's"));
  return absl::OkStatus();
}

Plan* CublasLtGemm::State::AddFallback(const PlanKey& key,
                                       std::unique_ptr<Plan> plan,
                                       std::string reason) {
  plan->fallback = true;
  plan->fallback_reason = std::move(reason);
  // Once per weight shape and alignment, whatever the number of rows.
  SayOnce({key.fp8, key.run.n, key.run.k, key.alignment, key.row_scaled},
          absl::StrCat(
              key.fp8 ? "FP8" : "BF16", " GEMM N=", key.run.n, " K=", key.run.k,
              key.run.batch > 1 ? absl::StrCat(" (", key.run.batch, " blocks)")
                                : std::string(),
              key.row_scaled
                  ? " with per-sequence scales runs in two passes (an M x N "
                    "binary32 product, then a scaling kernel): "
                  : " goes to octet's fallback kernel, 30-100x slower than "
                    "cuBLASLt: ",
              plan->fallback_reason));
  Plan* raw = plan.get();
  plans.emplace(key, std::move(plan));
  return raw;
}

void CublasLtGemm::State::SayOnce(
    const std::tuple<bool, int64_t, int64_t, int, bool>& what,
    const std::string& message) {
  if (said.insert(what).second && options.on_fallback) {
    options.on_fallback(message);
  }
}

absl::StatusOr<const float*> CublasLtGemm::State::Aligned(const float* p,
                                                          int64_t count,
                                                          float* slot,
                                                          cudaStream_t stream) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(p);
  if (at % alignof(float) != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "CublasLtGemm: scale pointer %p is not 4-byte aligned", p));
  }
  if (at % 16 == 0) return p;
  OCTET_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(slot, p, count * sizeof(float),
                                             cudaMemcpyDeviceToDevice, stream));
  return slot;
}

absl::StatusOr<float*> CublasLtGemm::State::Scratch(float*& buf, size_t& have,
                                                    size_t floats) {
  if (have < floats) {
    if (buf != nullptr) retired.push_back(buf);
    buf = nullptr;
    have = 0;
    OCTET_RETURN_IF_ERROR(Allocate(&buf, static_cast<int64_t>(floats)));
    have = floats;
  }
  return buf;
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

// The key of a plain GEMM: the call's own shape, or, planned for the whole
// layer's plan_n columns, that one at the alignment every rank has.
PlanKey PlainKey(bool fp8, bool row_scaled, int64_t m, int64_t n, int64_t k,
                 int64_t plan_n, DType y_dtype, int alignment) {
  const Shape run{.m = m, .n = n, .k = k, .ld = k};
  Shape plan = run;
  if (plan_n > 0) {
    plan.n = plan_n;
    alignment = PlannedAlignment(alignment);
  }
  return PlanKey{.fp8 = fp8,
                 .y_dtype = y_dtype,
                 .row_scaled = row_scaled,
                 .alignment = alignment,
                 .run = run,
                 .plan = plan};
}

// CheckGemmArgs, and a plan_n (0: n) that is not below the call's N.
absl::Status CheckArgs(const void* a, const void* b, int64_t m, int64_t n,
                       int64_t k, int64_t plan_n, const void* y, DType y_dtype,
                       const char* what) {
  OCTET_RETURN_IF_ERROR(CheckGemmArgs(a, b, m, n, k, y, y_dtype, what));
  if (plan_n != 0 && plan_n < n) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": plan_n ", plan_n, " is below the call's N ", n));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CublasLtGemm::Run(bool fp8, int64_t m, int64_t n, int64_t k,
                               int64_t plan_n, DType y_dtype, const void* a,
                               const void* b, const float* d_scale_a,
                               const float* d_scale_b, void* y,
                               cudaStream_t stream) {
  if (k == 0) {
    absl::MutexLock lock(&state_->mu);
    state_->last_path = Path::kNone;
    return ZeroOutput(m, n, y, y_dtype, stream);
  }
  const PlanKey key =
      PlainKey(fp8, false, m, n, k, plan_n, y_dtype,
               std::min({Alignment(a), Alignment(b), Alignment(y)}));
  absl::MutexLock lock(&state_->mu);
  OCTET_ASSIGN_OR_RETURN(Plan* const plan, state_->GetPlan(key));
  if (plan->fallback) {
    state_->last_path = Path::kFallback;
    state_->last_fallback_reason = plan->fallback_reason;
    if (fp8) {
      return CudaGemmE4m3Fallback(static_cast<const uint8_t*>(a), d_scale_a,
                                  static_cast<const uint8_t*>(b), d_scale_b, m,
                                  n, k, y, y_dtype, stream);
    }
    return CudaGemmBf16Fallback(static_cast<const octet::Bf16*>(a),
                                static_cast<const octet::Bf16*>(b), m, n, k, y,
                                y_dtype, stream);
  }
  if (fp8) {
    OCTET_ASSIGN_OR_RETURN(
        d_scale_a, state_->Aligned(d_scale_a, 1, state_->slot_a, stream));
    OCTET_ASSIGN_OR_RETURN(
        d_scale_b, state_->Aligned(d_scale_b, 1, state_->slot_b, stream));
  }
  return state_->Matmul(*plan, a, b, d_scale_a, d_scale_b, y, stream);
}

absl::Status CublasLtGemm::State::Matmul(Plan& plan, const void* a,
                                         const void* b, const float* scale_a,
                                         const float* scale_b, void* y,
                                         cudaStream_t stream) {
  last_path = Path::kCublasLt;
  if (scale_a != nullptr) {
    OCTET_RETURN_IF_ERROR(SetScalePointers(plan.desc, scale_a, scale_b));
  }
  const float alpha = 1.0f, beta = 0.0f;
  const Layouts& l = plan.layouts;
  OCTET_CUDA_RETURN_IF_ERROR(cublasLtMatmul(
      handle, plan.desc, &alpha, b, l.a, a, l.b, &beta, y, l.y, y, l.y,
      &plan.algo, workspace, options.workspace_bytes, stream));
  return absl::OkStatus();
}

absl::Status CublasLtGemm::E4m3(const uint8_t* qa, const float* d_scale_a,
                                const uint8_t* qb, const float* d_scale_b,
                                int64_t m, int64_t n, int64_t k, void* y,
                                DType y_dtype, cudaStream_t stream,
                                int64_t plan_n) {
  OCTET_RETURN_IF_ERROR(
      CheckArgs(qa, qb, m, n, k, plan_n, y, y_dtype, "CublasLtGemm::E4m3"));
  if (d_scale_a == nullptr || d_scale_b == nullptr) {
    return absl::InvalidArgumentError("CublasLtGemm::E4m3: null scale pointer");
  }
  if (m == 0 || n == 0) return absl::OkStatus();
  return Run(true, m, n, k, plan_n, y_dtype, qa, qb, d_scale_a, d_scale_b, y,
             stream);
}

absl::Status CublasLtGemm::E4m3RowGroups(
    const uint8_t* qa, const float* d_scale_a, const int32_t* d_row_group,
    const uint8_t* qb, const float* d_scale_b, int64_t m, int64_t n, int64_t k,
    void* y, DType y_dtype, cudaStream_t stream, int64_t plan_n) {
  if (d_row_group == nullptr) {
    return absl::InvalidArgumentError(
        "CublasLtGemm::E4m3RowGroups: null row map");
  }
  return ScaledE4m3(qa, d_scale_a, d_row_group, qb, d_scale_b, false, m, n, k,
                    plan_n, y, y_dtype, stream);
}

absl::Status CublasLtGemm::E4m3ColumnScales(
    const uint8_t* qa, const float* d_scale_a, const int32_t* d_row_group,
    const uint8_t* qb, const float* d_scale_b, int64_t m, int64_t n, int64_t k,
    void* y, DType y_dtype, cudaStream_t stream, int64_t plan_n) {
  return ScaledE4m3(qa, d_scale_a, d_row_group, qb, d_scale_b, true, m, n, k,
                    plan_n, y, y_dtype, stream);
}

std::string CublasLtGemm::LibraryVersion() {
  return absl::StrCat("cuBLASLt ", cublasLtGetVersion());
}

absl::string_view CublasLtGemm::RowScalingName(RowScaling way) {
  switch (way) {
    case RowScaling::kOuterVector:
      return "outer-vector";
    case RowScaling::kTwoPass:
      return "two-pass";
    case RowScaling::kCutlass:
      return "cutlass";
  }
  return "?";
}

bool CublasLtGemm::RowScalingAvailable(RowScaling way) const {
  return way != RowScaling::kCutlass || state_->cutlass;
}

void CublasLtGemm::SetRowScaling(int64_t m, int64_t plan_n, int64_t n,
                                 int64_t k, bool b_per_column, RowScaling way) {
  absl::MutexLock lock(&state_->mu);
  state_
      ->row_scaling[{RowBucket(m), plan_n > 0 ? plan_n : n, k, b_per_column}] =
      way;
}

absl::Status CublasLtGemm::ScaledE4m3(const uint8_t* qa, const float* d_scale_a,
                                      const int32_t* d_row_group,
                                      const uint8_t* qb, const float* d_scale_b,
                                      bool b_per_column, int64_t m, int64_t n,
                                      int64_t k, int64_t plan_n, void* y,
                                      DType y_dtype, cudaStream_t stream) {
  const char* what = b_per_column ? "CublasLtGemm::E4m3ColumnScales"
                                  : "CublasLtGemm::E4m3RowGroups";
  OCTET_RETURN_IF_ERROR(CheckArgs(qa, qb, m, n, k, plan_n, y, y_dtype, what));
  if (d_scale_a == nullptr || d_scale_b == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": null scale pointer"));
  }
  if (m == 0 || n == 0) return absl::OkStatus();
  if (k == 0) {
    return Run(true, m, n, k, 0, y_dtype, qa, qb, state_->one, state_->one, y,
               stream);
  }
  RowScaling way = RowScaling::kOuterVector;
  {
    absl::MutexLock lock(&state_->mu);
    const auto it = state_->row_scaling.find(
        {RowBucket(m), plan_n > 0 ? plan_n : n, k, b_per_column});
    if (it != state_->row_scaling.end()) way = it->second;
  }
  bool done = false;
  if (way == RowScaling::kOuterVector) {
    OCTET_RETURN_IF_ERROR(OuterVectorE4m3(qa, d_scale_a, d_row_group, qb,
                                          d_scale_b, b_per_column, m, n, k,
                                          plan_n, y, y_dtype, stream, &done));
  } else if (way == RowScaling::kCutlass) {
    OCTET_RETURN_IF_ERROR(CutlassE4m3(qa, d_scale_a, d_row_group, qb, d_scale_b,
                                      b_per_column, m, n, k, y, y_dtype, stream,
                                      &done));
  }
  if (done) return absl::OkStatus();
  // Two passes: the unscaled product, then each row scaled.
  float* sums;
  {
    absl::MutexLock lock(&state_->mu);
    OCTET_ASSIGN_OR_RETURN(sums,
                           state_->Scratch(state_->sums, state_->sums_floats,
                                           static_cast<size_t>(m) * n));
  }
  OCTET_RETURN_IF_ERROR(Run(true, m, n, k, plan_n, DType::kF32, qa, qb,
                            state_->one, state_->one, sums, stream));
  return CudaScaleRowGroups(sums, 1, m, n, d_scale_a, d_row_group, d_scale_b,
                            b_per_column, y, y_dtype, /*add=*/false, stream);
}

// One CUTLASS GEMM with the rows' scales (d_scale_a[g] times the
// weight's per-tensor scale, by the same tiny kernel) in its epilogue.
absl::Status CublasLtGemm::CutlassE4m3(
    const uint8_t* qa, const float* d_scale_a, const int32_t* d_row_group,
    const uint8_t* qb, const float* d_scale_b, bool b_per_column, int64_t m,
    int64_t n, int64_t k, void* y, DType y_dtype, cudaStream_t stream,
    bool* done) {
  *done = false;
  if (!state_->cutlass || b_per_column || y_dtype != DType::kBf16 ||
      m > kMaxOuterRows || !cutlass_gemm::Serves(m, n, k, qa, qb, y)) {
    return absl::OkStatus();  // two passes
  }
  absl::MutexLock lock(&state_->mu);
  // The scales' product per row (the contract's order), then one GEMM.
  OCTET_RETURN_IF_ERROR(CudaRowScales(d_scale_a, d_row_group, d_scale_b, m,
                                      state_->row_scales, stream));
  const absl::Status s = cutlass_gemm::RowScaledE4m3(
      qa, qb, state_->row_scales, m, n, k, y, state_->workspace,
      state_->options.workspace_bytes, stream);
  if (absl::IsFailedPrecondition(s)) {  // refused: two passes, said once
    state_->SayOnce({true, n, k, 0, true},
                    absl::StrCat(s.message(), " (N=", n, " K=", k,
                                 "): two passes instead"));
    return absl::OkStatus();
  }
  OCTET_RETURN_IF_ERROR(s);
  state_->last_path = Path::kCutlass;
  *done = true;
  return absl::OkStatus();
}

// One GEMM where cuBLASLt takes outer-vector scales. Rows: d_scale_a[g],
// times *d_scale_b for a per-tensor weight (multiplied first, as the
// contract rounds), by a tiny kernel. Columns: ones, or the weight's
// per-column scales.
absl::Status CublasLtGemm::OuterVectorE4m3(
    const uint8_t* qa, const float* d_scale_a, const int32_t* d_row_group,
    const uint8_t* qb, const float* d_scale_b, bool b_per_column, int64_t m,
    int64_t n, int64_t k, int64_t plan_n, void* y, DType y_dtype,
    cudaStream_t stream, bool* done) {
  *done = false;
  if (m > kMaxOuterRows || std::max(n, plan_n) > kMaxOuterColumns) {
    return absl::OkStatus();
  }
  const PlanKey key =
      PlainKey(true, true, m, n, k, plan_n, y_dtype,
               std::min({Alignment(qa), Alignment(qb), Alignment(y)}));
  absl::MutexLock lock(&state_->mu);
  OCTET_ASSIGN_OR_RETURN(Plan* const plan, state_->GetPlan(key));
  if (plan->fallback) return absl::OkStatus();  // two passes
  OCTET_RETURN_IF_ERROR(CudaRowScales(d_scale_a, d_row_group,
                                      b_per_column ? state_->one : d_scale_b, m,
                                      state_->row_scales, stream));
  const float* columns = state_->ones;
  if (b_per_column) {
    OCTET_ASSIGN_OR_RETURN(
        columns, state_->Aligned(d_scale_b, n, state_->slot_b, stream));
  }
  OCTET_RETURN_IF_ERROR(
      state_->Matmul(*plan, qa, qb, state_->row_scales, columns, y, stream));
  *done = true;
  return absl::OkStatus();
}

absl::Status CublasLtGemm::Bf16(const octet::Bf16* a, const octet::Bf16* b,
                                int64_t m, int64_t n, int64_t k, void* y,
                                DType y_dtype, cudaStream_t stream,
                                int64_t plan_n) {
  OCTET_RETURN_IF_ERROR(
      CheckArgs(a, b, m, n, k, plan_n, y, y_dtype, "CublasLtGemm::Bf16"));
  if (m == 0 || n == 0) return absl::OkStatus();
  return Run(false, m, n, k, plan_n, y_dtype, a, b, nullptr, nullptr, y,
             stream);
}

absl::Status CublasLtGemm::BlockSums(const void* x, const void* w,
                                     DType in_dtype, int64_t m, int64_t n,
                                     int64_t k, int64_t blocks, int64_t plan_k,
                                     float* sums, cudaStream_t stream) {
  OCTET_ASSIGN_OR_RETURN(
      const float* parts,
      BlockProducts(x, w, in_dtype, m, n, k, blocks, plan_k, sums, stream));
  if (blocks == 1 || m == 0 || n == 0) return absl::OkStatus();
  return CudaTreeSum(parts, blocks, m * n, m * n, sums, stream);
}

absl::StatusOr<const float*> CublasLtGemm::BlockProducts(
    const void* x, const void* w, DType in_dtype, int64_t m, int64_t n,
    int64_t k, int64_t blocks, int64_t plan_k, float* single,
    cudaStream_t stream) {
  if (plan_k == 0) plan_k = k;
  if (in_dtype != DType::kE4m3 && in_dtype != DType::kBf16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CublasLtGemm::BlockSums: weights and inputs must be e4m3 or "
        "bfloat16, not ",
        DTypeName(in_dtype)));
  }
  if (m < 0 || n < 0 || k < 0 || blocks < 1 || blocks > kMaxBlocks ||
      k % blocks != 0 || plan_k < k || (k > 0 && plan_k % (k / blocks) != 0) ||
      (m > 0 && n > 0 && (x == nullptr || w == nullptr || single == nullptr))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CublasLtGemm::BlockSums: M=", m, " N=", n, " K=", k, " in ", blocks,
        " blocks (the layer's K ", plan_k, "), or a null operand"));
  }
  if (m == 0 || n == 0) return single;
  const bool fp8 = in_dtype == DType::kE4m3;
  const int64_t kb = k / blocks;
  const size_t elem = DTypeSize(in_dtype);
  absl::MutexLock lock(&state_->mu);
  float* out = single;
  if (blocks > 1) {
    OCTET_ASSIGN_OR_RETURN(
        out, state_->Scratch(state_->blocks, state_->blocks_floats,
                             static_cast<size_t>(blocks * m * n)));
  }
  if (k == 0) {
    OCTET_RETURN_IF_ERROR(ZeroOutput(blocks * m, n, out, DType::kF32, stream));
    return out;
  }
  // Every block's pointers are as aligned as the first's when a block is
  // a multiple of 16 bytes; planned at 16 bytes, as every rank is.
  const int block_align = AlignmentOf(static_cast<uintptr_t>(kb * elem));
  const PlanKey key{
      .fp8 = fp8,
      .y_dtype = DType::kF32,
      .row_scaled = false,
      .alignment = PlannedAlignment(
          std::min({Alignment(x), Alignment(w), Alignment(out), block_align})),
      .run = {.m = m, .n = n, .k = kb, .ld = k, .batch = blocks},
      .plan = {.m = m, .n = n, .k = kb, .ld = plan_k, .batch = plan_k / kb}};
  OCTET_ASSIGN_OR_RETURN(Plan * plan, state_->GetPlan(key));
  if (plan->fallback) {
    state_->last_path = Path::kFallback;
    state_->last_fallback_reason = plan->fallback_reason;
    OCTET_RETURN_IF_ERROR(CudaGemmBlocksFallback(x, w, in_dtype, m, n, kb, k,
                                                 blocks, out, stream));
  } else {
    OCTET_RETURN_IF_ERROR(
        state_->Matmul(*plan, x, w, fp8 ? state_->one : nullptr,
                       fp8 ? state_->one : nullptr, out, stream));
  }
  return out;
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
    case Path::kCutlass:
      return "cutlass";
  }
  return "?";
}

}  // namespace octet
