// The CUTLASS kernel of gemm_cutlass.h. Compiled for sm_90a only, with the
// CUTLASS headers as system headers (their warnings are theirs).
#include "kernels/cuda/gemm_cutlass.h"

#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/util/packed_stride.hpp"
#include "cutlass/version.h"

namespace octet::cutlass_gemm {
namespace {

using cute::_0;
using cute::_1;
using cute::_128;
using cute::_64;
using cute::Shape;

// A: activations [m][k] row-major; B: weights [n][k], i.e. K x N
// column-major; D: [m][n] row-major bfloat16.
using ElementA = cutlass::float_e4m3_t;
using ElementB = cutlass::float_e4m3_t;
using ElementD = cutlass::bfloat16_t;
using LayoutA = cutlass::layout::RowMajor;
using LayoutB = cutlass::layout::ColumnMajor;
using LayoutD = cutlass::layout::RowMajor;
constexpr int kAlignA = 16, kAlignB = 16, kAlignD = 8;  // 16 bytes each
using TileShape = Shape<_64, _128, _128>;
using ClusterShape = Shape<_1, _1, _1>;
// D = per-row alpha · acc (+ beta · C + bias, both zero here), in binary32,
// rounded once to bfloat16.
using Fusion = cutlass::epilogue::fusion::PerRowLinCombPerRowBiasEltAct<
    cutlass::epilogue::thread::Identity, ElementD, float, ElementD, ElementD,
    float>;
using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape,
    ClusterShape, cutlass::epilogue::collective::EpilogueTileAuto, float,
    float, void, LayoutD, kAlignD, ElementD, LayoutD, kAlignD,
    cutlass::epilogue::TmaWarpSpecialized, Fusion>::CollectiveOp;
using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
    cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementA, LayoutA,
    kAlignA, ElementB, LayoutB, kAlignB, float, TileShape, ClusterShape,
    cutlass::gemm::collective::StageCountAutoCarveout<
        static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
    cutlass::gemm::KernelTmaWarpSpecializedPingpong>::CollectiveOp;
using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>,
                                                    Mainloop, Epilogue>;
using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

bool Aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// can_implement's refusal is FailedPrecondition (the caller takes another
// way); a failure after it, Internal.
absl::Status Refused(const char* step, cutlass::Status s) {
  const std::string message = absl::StrCat("CUTLASS FP8 GEMM: ", step, ": ",
                                           cutlassGetStatusString(s));
  return std::string_view(step) == "can_implement"
             ? absl::FailedPreconditionError(message)
             : absl::InternalError(message);
}

}  // namespace

bool Built() { return true; }

const char* Version() {
#define OCTET_STR2(x) #x
#define OCTET_STR(x) OCTET_STR2(x)
  return OCTET_STR(CUTLASS_MAJOR) "." OCTET_STR(CUTLASS_MINOR) "." OCTET_STR(
      CUTLASS_PATCH);
#undef OCTET_STR
#undef OCTET_STR2
}

bool Serves(int64_t m, int64_t n, int64_t k, const void* qa, const void* qb,
            const void* y) {
  return m > 0 && n > 0 && k > 0 && k % 16 == 0 && n % 8 == 0 &&
         m <= INT32_MAX && n <= INT32_MAX && k <= INT32_MAX && Aligned16(qa) &&
         Aligned16(qb) && Aligned16(y);
}

absl::Status RowScaledE4m3(const uint8_t* qa, const uint8_t* qb,
                           const float* row_scale, int64_t m, int64_t n,
                           int64_t k, void* y, void* workspace,
                           size_t workspace_bytes, cudaStream_t stream) {
  if (!Serves(m, n, k, qa, qb, y) || row_scale == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("CUTLASS FP8 GEMM: M=", m, " N=", n, " K=", k,
                     " misaligned or not a multiple of its loads"));
  }
  const int mi = static_cast<int>(m), ni = static_cast<int>(n),
            ki = static_cast<int>(k);
  using StrideA = typename Gemm::GemmKernel::StrideA;
  using StrideB = typename Gemm::GemmKernel::StrideB;
  using StrideD = typename Gemm::GemmKernel::StrideD;
  typename Gemm::Arguments args{
      cutlass::gemm::GemmUniversalMode::kGemm,
      {mi, ni, ki, 1},
      {reinterpret_cast<const ElementA*>(qa),
       cutlass::make_cute_packed_stride(StrideA{}, {mi, ki, 1}),
       reinterpret_cast<const ElementB*>(qb),
       cutlass::make_cute_packed_stride(StrideB{}, {ni, ki, 1})},
      {{},
       nullptr,
       {},
       reinterpret_cast<ElementD*>(y),
       cutlass::make_cute_packed_stride(StrideD{}, {mi, ni, 1})}};
  args.epilogue.thread.alpha_ptr = row_scale;
  args.epilogue.thread.dAlpha = {bool(1), _0{}, 0};  // one per row
  args.epilogue.thread.beta = 0.0f;
  Gemm gemm;
  if (cutlass::Status s = gemm.can_implement(args);
      s != cutlass::Status::kSuccess) {
    return Refused("can_implement", s);
  }
  if (Gemm::get_workspace_size(args) > workspace_bytes) {
    return absl::InternalError(
        absl::StrCat("CUTLASS FP8 GEMM: wants ", Gemm::get_workspace_size(args),
                     " bytes of workspace, has ", workspace_bytes));
  }
  if (cutlass::Status s = gemm.initialize(args, workspace, stream);
      s != cutlass::Status::kSuccess) {
    return Refused("initialize", s);
  }
  if (cutlass::Status s = gemm.run(stream); s != cutlass::Status::kSuccess) {
    return Refused("run", s);
  }
  return absl::OkStatus();
}

}  // namespace octet::cutlass_gemm
