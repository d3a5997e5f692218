// CUDA GEMMs (kernels/cuda/gemm.h): cuBLASLt FP8 and BF16, and the fallback
// kernels, against the CPU (the fp64-checked kernels of gemm_test.cc) with
// scales passed as device pointers (any 4-byte alignment); and what tensor
// parallelism needs of them, bit for bit: a column slice planned for the
// whole layer gives its columns, ranks' block sums add up to TP = 1's, and
// CudaTreeSum adds as kernels/tree_sum.h. Skips without a CUDA device.
//
// Tolerances: the fallback accumulates in binary32 in K order, so it meets
// the CPU bound γ_K·Σ|ab|. Tensor cores do not: Ada/Hopper FP8 MMA keeps
// about 14 mantissa bits between promotions to binary32 (cuBLASLt promotes at
// undocumented intervals with fast accumulation off), and BF16 MMA aligns
// with truncation. The allowances below (kFp8TensorCoreRel, and u = 2^-23 for
// BF16) are provisional until a device run measures the error: every
// cuBLASLt case prints its largest |error| / (|scale|·Σ|ab|) for that.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/gemm.h"
#include "kernels/cuda/gemm_fallback.h"
#include "kernels/fp8.h"
#include "kernels/tree_sum.h"
#include "tests/kernels/cuda_test_util.h"
#include "tests/kernels/test_data.h"
#include "tests/status_util.h"

namespace octet {
namespace {

using testing::CopyToDevice;
using testing::CopyToHost;
using testing::DeviceBuffer;

using Shape = testing::GemmShape;
using testing::ExpectGemmClose;
using testing::RandomBf16;
using testing::RandomCodes;

// Copies a device output (f32 or bf16, M x N) back, widened to float.
std::vector<float> DeviceOutput(const void* d_y, bool y_bf16, const Shape& s) {
  if (y_bf16) return testing::Widen(CopyToHost<Bf16>(d_y, s.m * s.n));
  return CopyToHost<float>(d_y, s.m * s.n);
}

constexpr double kFp8TensorCoreRel = 0x1p-9;

void Report(const char* what, const Shape& s, double max_rel) {
  std::printf(
      "[ measured ] %s M=%lld N=%lld K=%lld max |err|/(|scale|*sum|ab|) = "
      "%.3g\n",
      what, static_cast<long long>(s.m), static_cast<long long>(s.n),
      static_cast<long long>(s.k), max_rel);
}

struct Case {
  Shape shape;
  bool expect_cublaslt;  // false: cuBLASLt is expected to refuse it
};

const Case kCases[] = {
    {{1, 4096, 4096}, true}, {{16, 256, 512}, true}, {{256, 1024, 4096}, true},
    {{3, 512, 4096}, true},  {{1, 1, 17}, false},    {{17, 33, 100}, false},
};

TEST(CudaGemm, E4m3MatchesReferenceOnEveryPath) {
  OCTET_REQUIRE_CUDA_DEVICE();
  auto gemm = CublasLtGemm::Create();
  ASSERT_TRUE(gemm.ok()) << gemm.status();
  const float sa = 0.37f, sb = 1.0f / 3.0f;
  DeviceBuffer dscale(8);
  ASSERT_TRUE(CopyToDevice(std::vector<float>{sa, sb}, dscale.get()));
  const float* d_sa = dscale.get<float>(0);
  const float* d_sb = dscale.get<float>(4);
  for (const Case& c : kCases) {
    const Shape& s = c.shape;
    const auto qa = RandomCodes(s.m * s.k, 1 + s.m + s.k);
    const auto qb = RandomCodes(s.n * s.k, 2 + s.n + s.k);
    auto a = [&](int64_t i) { return DecodeE4m3(qa[i]); };
    auto b = [&](int64_t i) { return DecodeE4m3(qb[i]); };
    DeviceBuffer da(qa.size()), db(qb.size()), dy(s.m * s.n * 4);
    ASSERT_TRUE(CopyToDevice(qa, da.get()) && CopyToDevice(qb, db.get()));
    for (bool y_bf16 : {false, true}) {
      const DType yt = y_bf16 ? DType::kBf16 : DType::kF32;
      OCTET_ASSERT_OK((*gemm)->E4m3(da.get<uint8_t>(), d_sa, db.get<uint8_t>(),
                                    d_sb, s.m, s.n, s.k, dy.get(), yt,
                                    nullptr));
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const auto path = (*gemm)->LastPath();
      EXPECT_EQ(path == CublasLtGemm::Path::kCublasLt, c.expect_cublaslt)
          << "M=" << s.m << " N=" << s.n << " K=" << s.k << " took "
          << CublasLtGemm::PathName(path);
      const bool tensor_cores = path == CublasLtGemm::Path::kCublasLt;
      double max_rel = 0;
      ExpectGemmClose(
          DeviceOutput(dy.get(), y_bf16, s), s, a, b, double(sa * sb), y_bf16,
          tensor_cores ? kFp8TensorCoreRel : 0.0,
          std::string("e4m3 ") + std::string(CublasLtGemm::PathName(path)),
          &max_rel);
      if (tensor_cores) Report(y_bf16 ? "e4m3->bf16" : "e4m3->f32", s, max_rel);
      // The fallback kernel directly, on every shape.
      OCTET_ASSERT_OK(CudaGemmE4m3Fallback(da.get<uint8_t>(), d_sa,
                                           db.get<uint8_t>(), d_sb, s.m, s.n,
                                           s.k, dy.get(), yt, nullptr));
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      ExpectGemmClose(DeviceOutput(dy.get(), y_bf16, s), s, a, b,
                      double(sa * sb), y_bf16, 0.0, "e4m3 fallback");
    }
  }
}

TEST(CudaGemm, Bf16MatchesReferenceOnEveryPath) {
  OCTET_REQUIRE_CUDA_DEVICE();
  auto gemm = CublasLtGemm::Create();
  ASSERT_TRUE(gemm.ok()) << gemm.status();
  for (const Case& c : kCases) {
    const Shape& s = c.shape;
    const auto a16 = RandomBf16(s.m * s.k, 3 + s.m + s.k);
    const auto b16 = RandomBf16(s.n * s.k, 4 + s.n + s.k);
    auto a = [&](int64_t i) { return Bf16ToFloat(a16[i]); };
    auto b = [&](int64_t i) { return Bf16ToFloat(b16[i]); };
    DeviceBuffer da(a16.size() * 2), db(b16.size() * 2), dy(s.m * s.n * 4);
    ASSERT_TRUE(CopyToDevice(a16, da.get()) && CopyToDevice(b16, db.get()));
    for (bool y_bf16 : {false, true}) {
      const DType yt = y_bf16 ? DType::kBf16 : DType::kF32;
      OCTET_ASSERT_OK((*gemm)->Bf16(da.get<Bf16>(), db.get<Bf16>(), s.m, s.n,
                                    s.k, dy.get(), yt, nullptr));
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const auto path = (*gemm)->LastPath();
      const bool tensor_cores = path == CublasLtGemm::Path::kCublasLt;
      double max_rel = 0;
      ExpectGemmClose(
          DeviceOutput(dy.get(), y_bf16, s), s, a, b, 1.0, y_bf16,
          tensor_cores ? s.k * 0x1p-24 : 0.0,
          std::string("bf16 ") + std::string(CublasLtGemm::PathName(path)),
          &max_rel);
      if (tensor_cores) Report(y_bf16 ? "bf16->bf16" : "bf16->f32", s, max_rel);
    }
  }
}

TEST(CudaGemm, MisalignedOperandsStillWork) {
  OCTET_REQUIRE_CUDA_DEVICE();
  auto gemm = CublasLtGemm::Create();
  OCTET_ASSERT_OK(gemm);
  const Shape s{4, 256, 512};
  const auto qa = RandomCodes(s.m * s.k, 5);
  const auto qb = RandomCodes(s.n * s.k, 6);
  DeviceBuffer da(qa.size() + 16), db(qb.size()), dy(s.m * s.n * 4), dscale(8);
  ASSERT_TRUE(CopyToDevice(qa, da.get(1)) && CopyToDevice(qb, db.get()));
  ASSERT_TRUE(CopyToDevice(std::vector<float>{1.0f, 1.0f}, dscale.get()));
  OCTET_ASSERT_OK((*gemm)->E4m3(da.get<uint8_t>(1), dscale.get<float>(),
                                db.get<uint8_t>(), dscale.get<float>(4), s.m,
                                s.n, s.k, dy.get(), DType::kF32, nullptr));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  // cuBLASLt's FP8 kernels need 16-byte aligned operands.
  EXPECT_EQ((*gemm)->LastPath(), CublasLtGemm::Path::kFallback);
  ExpectGemmClose(
      DeviceOutput(dy.get(), false, s), s,
      [&](int64_t i) { return DecodeE4m3(qa[i]); },
      [&](int64_t i) { return DecodeE4m3(qb[i]); }, 1.0, false, 0.0,
      "misaligned");
}

TEST(CudaGemm, CachedPlanTakesEachCallsScales) {
  OCTET_REQUIRE_CUDA_DEVICE();
  // The plan (and its descriptor) is cached per shape; the scale pointers
  // are set on every call. A second call with other scales must use them.
  auto gemm = CublasLtGemm::Create();
  OCTET_ASSERT_OK(gemm);
  const Shape s{8, 256, 512};
  const auto qa = RandomCodes(s.m * s.k, 7);
  const auto qb = RandomCodes(s.n * s.k, 8);
  DeviceBuffer da(qa.size()), db(qb.size()), dy(s.m * s.n * 4), dscale(16);
  ASSERT_TRUE(CopyToDevice(qa, da.get()) && CopyToDevice(qb, db.get()));
  ASSERT_TRUE(
      CopyToDevice(std::vector<float>{1.0f, 1.0f, 0.5f, 8.0f}, dscale.get()));
  std::vector<float> first;
  for (int call = 0; call < 2; ++call) {
    const float* sa = dscale.get<float>(8 * call);
    const float* sb = dscale.get<float>(8 * call + 4);
    OCTET_ASSERT_OK((*gemm)->E4m3(da.get<uint8_t>(), sa, db.get<uint8_t>(), sb,
                                  s.m, s.n, s.k, dy.get(), DType::kF32,
                                  nullptr));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<float> y = CopyToHost<float>(dy.get(), s.m * s.n);
    if (call == 0) {
      first = y;
      continue;
    }
    // 0.5 * 8 = 4: the same accumulation scaled by an exact power of two.
    // (A small allowance covers a split-K algorithm whose reduction order
    // could vary; a stale scale pointer would be off by a factor of 4.)
    for (size_t i = 0; i < y.size(); ++i) {
      ASSERT_NEAR(y[i], 4.0f * first[i], 0x1p-16 * std::fabs(4.0f * first[i]))
          << i;
    }
  }
}

// Per-sequence activation scales, each way CublasLtGemm has of applying
// them (SetRowScaling; worker/gemm_choices.h chooses by measuring): one
// cuBLASLt GEMM with outer-vector scales, a binary32 product then a
// row-scaling pass, or CUTLASS's GEMM with the scales in its epilogue
// (bfloat16 out; binary32 takes the two passes). Each group's rows are its
// own GEMM scaled by its scale times the weight's, with no fallback said.
// The CUTLASS way needs an sm_90 device and a build with CUTLASS: on an
// H200 its skip fails gpu-check.
class CudaRowScalingTest
    : public ::testing::TestWithParam<CublasLtGemm::RowScaling> {};
INSTANTIATE_TEST_SUITE_P(
    Ways, CudaRowScalingTest,
    ::testing::Values(CublasLtGemm::RowScaling::kOuterVector,
                      CublasLtGemm::RowScaling::kTwoPass,
                      CublasLtGemm::RowScaling::kCutlass),
    [](const auto& info) {
      switch (info.param) {
        case CublasLtGemm::RowScaling::kTwoPass:
          return std::string("TwoPass");
        case CublasLtGemm::RowScaling::kCutlass:
          return std::string("Cutlass");
        default:
          return std::string("OuterVector");
      }
    });

TEST_P(CudaRowScalingTest, RowGroupsScaleEachSequence) {
  OCTET_REQUIRE_CUDA_DEVICE();
  std::vector<std::string> said;
  CublasLtGemm::Options options;
  options.on_fallback = [&](const std::string& m) { said.push_back(m); };
  auto gemm = CublasLtGemm::Create(options);
  ASSERT_TRUE(gemm.ok()) << gemm.status();
  if (!(*gemm)->RowScalingAvailable(GetParam())) {
    GTEST_SKIP() << "CUTLASS's GEMM is not built, or this GPU is not sm_90";
  }
  const std::vector<int64_t> sizes = {1, 7, 32};
  const std::vector<float> group_scales = {0.5f, 0.03f, 2.0f};
  const float sb = 0.25f;
  const Shape s{40, 1024, 512};
  std::vector<int32_t> row_group;
  for (size_t g = 0; g < sizes.size(); ++g) {
    row_group.insert(row_group.end(), sizes[g], static_cast<int32_t>(g));
  }
  const auto qa = RandomCodes(s.m * s.k, 11);
  const auto qb = RandomCodes(s.n * s.k, 12);
  DeviceBuffer da(qa.size()), db(qb.size()), dy(s.m * s.n * 4), dsa(16), dsb(4),
      drows(s.m * 4);
  ASSERT_TRUE(CopyToDevice(qa, da.get()) && CopyToDevice(qb, db.get()));
  ASSERT_TRUE(CopyToDevice(group_scales, dsa.get()));
  ASSERT_TRUE(CopyToDevice(std::vector<float>{sb}, dsb.get()));
  ASSERT_TRUE(CopyToDevice(row_group, drows.get()));
  (*gemm)->SetRowScaling(s.m, 0, s.n, s.k, false, GetParam());
  for (bool y_bf16 : {false, true}) {
    const absl::Status st = (*gemm)->E4m3RowGroups(
        da.get<uint8_t>(), dsa.get<float>(), drows.get<int32_t>(),
        db.get<uint8_t>(), dsb.get<float>(), s.m, s.n, s.k, dy.get(),
        y_bf16 ? DType::kBf16 : DType::kF32, nullptr);
    ASSERT_TRUE(st.ok()) << st;
    OCTET_ASSERT_CUDA(cudaDeviceSynchronize());
    const bool cutlass =
        GetParam() == CublasLtGemm::RowScaling::kCutlass && y_bf16;
    EXPECT_EQ((*gemm)->LastPath(), cutlass ? CublasLtGemm::Path::kCutlass
                                           : CublasLtGemm::Path::kCublasLt);
    const std::vector<float> y = DeviceOutput(dy.get(), y_bf16, s);
    int64_t first = 0;
    for (size_t g = 0; g < sizes.size(); ++g) {
      const Shape part{sizes[g], s.n, s.k};
      const std::vector<float> rows(y.begin() + first * s.n,
                                    y.begin() + (first + sizes[g]) * s.n);
      auto a = [&](int64_t i) { return DecodeE4m3(qa[first * s.k + i]); };
      auto b = [&](int64_t i) { return DecodeE4m3(qb[i]); };
      double max_rel = 0;
      ExpectGemmClose(rows, part, a, b, double(group_scales[g] * sb), y_bf16,
                      kFp8TensorCoreRel, "e4m3 row groups", &max_rel);
      Report(y_bf16 ? "row groups->bf16" : "row groups->f32", part, max_rel);
      first += sizes[g];
    }
  }
  EXPECT_TRUE(said.empty()) << said[0];
}

// Per-channel weights (compressed-tensors' "channel"): column c of row r is
// scaled by its group's activation scale times weight row c's scale, in one
// GEMM where cuBLASLt takes the shape (N a multiple of 16) and in two passes
// where it does not; with a row map (per-token scales) and without one (a
// single scale).
TEST(CudaGemm, ColumnScalesScaleEachOutputColumn) {
  OCTET_REQUIRE_CUDA_DEVICE();
  auto gemm = CublasLtGemm::Create();
  ASSERT_TRUE(gemm.ok()) << gemm.status();
  for (const Case& c :
       {Case{{40, 256, 512}, true}, Case{{40, 40, 48}, false}}) {
    const Shape& s = c.shape;
    const auto qa = RandomCodes(s.m * s.k, 21);
    const auto qb = RandomCodes(s.n * s.k, 22);
    std::vector<float> row_scales(s.m), col_scales(s.n);
    std::vector<int32_t> row_group(s.m);
    for (int64_t r = 0; r < s.m; ++r) {
      row_group[r] = static_cast<int32_t>(r);  // per token
      row_scales[r] = 0.01f * static_cast<float>(r + 1);
    }
    for (int64_t j = 0; j < s.n; ++j) {
      col_scales[j] = 0.5f / static_cast<float>(j + 3);
    }
    DeviceBuffer da(qa.size()), db(qb.size()), dy(s.m * s.n * 4), dsa(s.m * 4),
        dsb(s.n * 4), drows(s.m * 4);
    ASSERT_TRUE(CopyToDevice(qa, da.get()) && CopyToDevice(qb, db.get()));
    ASSERT_TRUE(CopyToDevice(row_scales, dsa.get()) &&
                CopyToDevice(col_scales, dsb.get()) &&
                CopyToDevice(row_group, drows.get()));
    for (bool per_token : {true, false}) {
      for (bool y_bf16 : {false, true}) {
        const absl::Status st = (*gemm)->E4m3ColumnScales(
            da.get<uint8_t>(), dsa.get<float>(),
            per_token ? drows.get<int32_t>() : nullptr, db.get<uint8_t>(),
            dsb.get<float>(), s.m, s.n, s.k, dy.get(),
            y_bf16 ? DType::kBf16 : DType::kF32, nullptr);
        ASSERT_TRUE(st.ok()) << st;
        OCTET_ASSERT_CUDA(cudaDeviceSynchronize());
        EXPECT_EQ((*gemm)->LastPath(), c.expect_cublaslt
                                           ? CublasLtGemm::Path::kCublasLt
                                           : CublasLtGemm::Path::kFallback);
        const std::vector<float> y = DeviceOutput(dy.get(), y_bf16, s);
        // Each output element against its own dot product and scales.
        double worst = 0;
        for (int64_t r = 0; r < s.m; ++r) {
          for (int64_t j = 0; j < s.n; ++j) {
            const float scale =
                (per_token ? row_scales[r] : row_scales[0]) * col_scales[j];
            auto a = [&](int64_t i) { return DecodeE4m3(qa[r * s.k + i]); };
            auto b = [&](int64_t i) { return DecodeE4m3(qb[j * s.k + i]); };
            double rel = 0;
            ExpectGemmClose({y[r * s.n + j]}, Shape{1, 1, s.k}, a, b,
                            double(scale), y_bf16,
                            c.expect_cublaslt ? kFp8TensorCoreRel : 0,
                            "e4m3 column scales", &rel);
            worst = std::max(worst, rel);
          }
        }
        Report(per_token ? "column scales, per token" : "column scales", s,
               worst);
      }
    }
  }
}

// K = 0 is an empty sum: every entry point writes zeros over what was there
// and never asks cuBLASLt (whose layouts cannot have zero rows).
TEST(CudaGemm, EmptyKGivesZerosOnEveryEntryPoint) {
  OCTET_REQUIRE_CUDA_DEVICE();
  auto gemm = CublasLtGemm::Create();
  OCTET_ASSERT_OK(gemm);
  constexpr int64_t m = 4, n = 16;
  DeviceBuffer d(64), dy(m * n * 4), dscale(8), drows(m * 4);
  ASSERT_TRUE(CopyToDevice(std::vector<float>{1.0f, 1.0f}, dscale.get()));
  ASSERT_TRUE(CopyToDevice(std::vector<int32_t>{0, 0, 1, 1}, drows.get()));
  struct Entry {
    const char* name;
    DType y_dtype;
    std::function<absl::Status()> call;
  };
  const std::vector<Entry> entries = {
      {"E4m3 f32", DType::kF32,
       [&] {
         return (*gemm)->E4m3(d.get<uint8_t>(), dscale.get<float>(),
                              d.get<uint8_t>(), dscale.get<float>(4), m, n, 0,
                              dy.get(), DType::kF32, nullptr);
       }},
      {"E4m3RowGroups bf16", DType::kBf16,
       [&] {
         return (*gemm)->E4m3RowGroups(d.get<uint8_t>(), dscale.get<float>(),
                                       drows.get<int32_t>(), d.get<uint8_t>(),
                                       dscale.get<float>(4), m, n, 0, dy.get(),
                                       DType::kBf16, nullptr);
       }},
      {"Bf16 f32", DType::kF32,
       [&] {
         return (*gemm)->Bf16(d.get<Bf16>(), d.get<Bf16>(), m, n, 0, dy.get(),
                              DType::kF32, nullptr);
       }},
  };
  for (const Entry& e : entries) {
    SCOPED_TRACE(e.name);
    OCTET_ASSERT_CUDA(cudaMemset(dy.get(), 0xBF, m * n * 4));  // not zero
    const absl::Status s = e.call();
    ASSERT_TRUE(s.ok()) << s;
    OCTET_ASSERT_CUDA(cudaDeviceSynchronize());
    EXPECT_EQ((*gemm)->LastPath(), CublasLtGemm::Path::kNone);
    const size_t bytes = m * n * DTypeSize(e.y_dtype);
    EXPECT_EQ(CopyToHost<uint8_t>(dy.get(), bytes),
              std::vector<uint8_t>(bytes, 0));
  }
}

// A shape cuBLASLt's FP8 kernels refuse (K not a multiple of 16) is served
// by the fallback, said once per weight shape with the reason, whatever the
// number of rows; a shape it serves is not mentioned.
TEST(CudaGemm, FallbackIsSaidOncePerWeightShapeWithItsReason) {
  OCTET_REQUIRE_CUDA_DEVICE();
  std::vector<std::string> said;
  CublasLtGemm::Options options;
  options.on_fallback = [&](const std::string& m) { said.push_back(m); };
  auto gemm = CublasLtGemm::Create(options);
  OCTET_ASSERT_OK(gemm);
  constexpr int64_t n = 32, k = 24;
  DeviceBuffer dq(64 * k), dw(n * k), dy(64 * n * 4), dscale(8);
  OCTET_ASSERT_CUDA(cudaMemset(dq.get(), 0, 64 * k));
  OCTET_ASSERT_CUDA(cudaMemset(dw.get(), 0, n * k));
  ASSERT_TRUE(CopyToDevice(std::vector<float>{1.0f, 1.0f}, dscale.get()));
  for (int64_t m : {1, 8, 64}) {
    OCTET_ASSERT_OK((*gemm)->E4m3(dq.get<uint8_t>(), dscale.get<float>(),
                                  dw.get<uint8_t>(), dscale.get<float>(4), m, n,
                                  k, dy.get(), DType::kF32, nullptr));
    EXPECT_EQ((*gemm)->LastPath(), CublasLtGemm::Path::kFallback);
    EXPECT_NE((*gemm)->LastFallbackReason().find("K=24"), std::string::npos)
        << (*gemm)->LastFallbackReason();
  }
  ASSERT_EQ(said.size(), 1u);
  EXPECT_NE(said[0].find("N=32 K=24"), std::string::npos) << said[0];
  EXPECT_NE(said[0].find("multiples of 16"), std::string::npos) << said[0];
  OCTET_ASSERT_OK((*gemm)->E4m3(dq.get<uint8_t>(), dscale.get<float>(),
                                dw.get<uint8_t>(), dscale.get<float>(4), 16, n,
                                32, dy.get(), DType::kF32, nullptr));
  OCTET_ASSERT_CUDA(cudaDeviceSynchronize());
  EXPECT_EQ((*gemm)->LastPath(), CublasLtGemm::Path::kCublasLt);
  EXPECT_EQ((*gemm)->LastFallbackReason(), "");
  EXPECT_EQ(said.size(), 1u);
}

// cuBLASLt refuses scale pointers that are not 16-byte aligned; any 4-byte
// aligned one works (copied into an aligned slot of the GEMM's own, on the
// stream), scalar or per column, and one that is not even 4-byte aligned
// is refused, naming it.
TEST(CudaGemm, AnyFourByteAlignedScalePointerWorks) {
  OCTET_REQUIRE_CUDA_DEVICE();
  auto gemm = CublasLtGemm::Create();
  OCTET_ASSERT_OK(gemm);
  const Shape s{8, 256, 512};
  const auto qa = RandomCodes(s.m * s.k, 31);
  const auto qb = RandomCodes(s.n * s.k, 32);
  auto a = [&](int64_t i) { return DecodeE4m3(qa[i]); };
  auto b = [&](int64_t i) { return DecodeE4m3(qb[i]); };
  DeviceBuffer da(qa.size()), db(qb.size()), dy(s.m * s.n * 4),
      dscale((s.n + 8) * 4);
  ASSERT_TRUE(CopyToDevice(qa, da.get()) && CopyToDevice(qb, db.get()));
  // Floats 1..3 (4, 8 and 12 bytes in: never 16-byte aligned) hold the
  // scales; from float 5 on, one scale per column.
  std::vector<float> scales(s.n + 8, 0.0f);
  scales[1] = 0.5f, scales[2] = 0.25f, scales[3] = 3.0f;
  for (int64_t j = 0; j < s.n; ++j) scales[5 + j] = 1.0f / (j + 2);
  ASSERT_TRUE(CopyToDevice(scales, dscale.get()));
  for (auto [ia, ib] : {std::pair{1, 2}, std::pair{3, 1}, std::pair{2, 3}}) {
    OCTET_ASSERT_OK((*gemm)->E4m3(da.get<uint8_t>(), dscale.get<float>(4 * ia),
                                  db.get<uint8_t>(), dscale.get<float>(4 * ib),
                                  s.m, s.n, s.k, dy.get(), DType::kF32,
                                  nullptr));
    OCTET_ASSERT_CUDA(cudaDeviceSynchronize());
    EXPECT_EQ((*gemm)->LastPath(), CublasLtGemm::Path::kCublasLt);
    ExpectGemmClose(DeviceOutput(dy.get(), false, s), s, a, b,
                    double(scales[ia] * scales[ib]), false, kFp8TensorCoreRel,
                    "misaligned scalar scales");
  }
  OCTET_ASSERT_OK((*gemm)->E4m3ColumnScales(
      da.get<uint8_t>(), dscale.get<float>(4), nullptr, db.get<uint8_t>(),
      dscale.get<float>(20), s.m, s.n, s.k, dy.get(), DType::kF32, nullptr));
  OCTET_ASSERT_CUDA(cudaDeviceSynchronize());
  EXPECT_EQ((*gemm)->LastPath(), CublasLtGemm::Path::kCublasLt);
  const std::vector<float> y = DeviceOutput(dy.get(), false, s);
  for (int64_t j = 0; j < s.n; ++j) {
    std::vector<float> column(s.m);
    for (int64_t r = 0; r < s.m; ++r) column[r] = y[r * s.n + j];
    ExpectGemmClose(
        column, Shape{s.m, 1, s.k}, a,
        [&](int64_t i) { return DecodeE4m3(qb[j * s.k + i]); },
        double(scales[1] * scales[5 + j]), false, kFp8TensorCoreRel,
        "misaligned column scales");
  }
  const absl::Status odd = (*gemm)->E4m3(
      da.get<uint8_t>(), dscale.get<float>(2), db.get<uint8_t>(),
      dscale.get<float>(4), s.m, s.n, s.k, dy.get(), DType::kF32, nullptr);
  EXPECT_EQ(odd.code(), absl::StatusCode::kInvalidArgument) << odd;
  EXPECT_NE(odd.message().find("not 4-byte aligned"), std::string::npos) << odd;
}

// How many of a's floats differ from b's in their bits.
int64_t DifferingFloats(const std::vector<float>& a,
                        const std::vector<float>& b) {
  if (a.size() != b.size()) return std::max(a.size(), b.size());
  int64_t differ = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    differ += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  }
  return differ;
}

// Tensor parallelism, column-parallel layers: each rank's slice of a
// layer's output columns, planned for the whole layer (plan_n), gives the
// whole GEMM's columns bit for bit: cuBLASLt runs TP = 1's algorithm on it.
// FP8 with one scale and with per-sequence scales, and BF16, at the rows
// of decode and prefill.
TEST(CudaGemm, ASlicePlannedForTheWholeLayerGivesItsBits) {
  OCTET_REQUIRE_CUDA_DEVICE();
  auto gemm = CublasLtGemm::Create();
  OCTET_ASSERT_OK(gemm);
  constexpr int64_t n = 1536, k = 1024;
  const auto qa = RandomCodes(256 * k, 41);
  const auto qb = RandomCodes(n * k, 42);
  const auto a16 = RandomBf16(256 * k, 43);
  const auto b16 = RandomBf16(n * k, 44);
  DeviceBuffer da(qa.size()), db(qb.size()), da16(a16.size() * 2),
      db16(b16.size() * 2), dfull(256 * n * 4), dpart(256 * n * 4), dscale(16),
      drows(256 * 4);
  ASSERT_TRUE(CopyToDevice(qa, da.get()) && CopyToDevice(qb, db.get()) &&
              CopyToDevice(a16, da16.get()) && CopyToDevice(b16, db16.get()));
  ASSERT_TRUE(CopyToDevice(std::vector<float>{0.02f, 0.7f, 0.125f, 0.0f},
                           dscale.get()));
  std::vector<int32_t> rows(256);
  for (int i = 0; i < 256; ++i) rows[i] = i < 3 ? 0 : 1;  // two sequences
  ASSERT_TRUE(CopyToDevice(rows, drows.get()));
  enum Kind { kFp8, kFp8RowGroups, kBf16 };
  // y[m][cols] of `cols` output columns from weight row `first` on.
  auto run = [&](Kind kind, int64_t m, int64_t first, int64_t cols, void* y) {
    switch (kind) {
      case kFp8:
        return (*gemm)->E4m3(da.get<uint8_t>(), dscale.get<float>(),
                             db.get<uint8_t>(first * k), dscale.get<float>(8),
                             m, cols, k, y, DType::kBf16, nullptr, n);
      case kFp8RowGroups:
        return (*gemm)->E4m3RowGroups(
            da.get<uint8_t>(), dscale.get<float>(), drows.get<int32_t>(),
            db.get<uint8_t>(first * k), dscale.get<float>(8), m, cols, k, y,
            DType::kBf16, nullptr, n);
      case kBf16:
        return (*gemm)->Bf16(da16.get<Bf16>(), db16.get<Bf16>(first * k * 2), m,
                             cols, k, y, DType::kF32, nullptr, n);
    }
    return absl::InternalError("kind");
  };
  for (Kind kind : {kFp8, kFp8RowGroups, kBf16}) {
    const bool f32 = kind == kBf16;
    for (int64_t m : {1, 5, 32, 256}) {
      OCTET_ASSERT_OK(run(kind, m, 0, n, dfull.get()));
      OCTET_ASSERT_CUDA(cudaDeviceSynchronize());
      const std::vector<float> full =
          DeviceOutput(dfull.get(), !f32, {m, n, k});
      for (int64_t tp : {2, 4}) {
        const int64_t cols = n / tp;
        int64_t differ = 0;
        for (int64_t r = 0; r < tp; ++r) {
          OCTET_ASSERT_OK(run(kind, m, r * cols, cols, dpart.get()));
          OCTET_ASSERT_CUDA(cudaDeviceSynchronize());
          const std::vector<float> part =
              DeviceOutput(dpart.get(), !f32, {m, cols, k});
          std::vector<float> want(m * cols);
          for (int64_t i = 0; i < m; ++i) {
            std::copy_n(full.begin() + i * n + r * cols, cols,
                        want.begin() + i * cols);
          }
          differ += DifferingFloats(part, want);
        }
        EXPECT_EQ(differ, 0) << "kind " << kind << " M=" << m << " TP=" << tp;
        std::printf(
            "[ measured ] planned slices, kind %d M=%lld TP=%lld: %lld of "
            "%lld outputs differ from the whole GEMM's\n",
            kind, static_cast<long long>(m), static_cast<long long>(tp),
            static_cast<long long>(differ), static_cast<long long>(m * n));
      }
    }
  }
}

// Tensor parallelism, row-parallel layers: each rank's K slice cut into its
// blocks, planned for the whole K, and the ranks' sums added in TreeSum
// order give TP = 1's block sums bit for bit; on cuBLASLt (blocks of 512)
// and on the fallback (FP8 blocks of 8 bytes), FP8 codes and BF16.
TEST(CudaGemm, BlockSumsOfEveryRankAddUpToOneRanksBits) {
  OCTET_REQUIRE_CUDA_DEVICE();
  auto gemm = CublasLtGemm::Create();
  OCTET_ASSERT_OK(gemm);
  constexpr int64_t n = 256, blocks = 8, max_m = 64;
  for (int64_t k : {4096, 64}) {
    for (DType dtype : {DType::kE4m3, DType::kBf16}) {
      const size_t elem = DTypeSize(dtype);
      std::vector<uint8_t> x(max_m * k * elem), w(n * k * elem);
      if (dtype == DType::kE4m3) {
        x = RandomCodes(max_m * k, 51);
        w = RandomCodes(n * k, 52);
      } else {
        const auto x16 = RandomBf16(max_m * k, 53), w16 = RandomBf16(n * k, 54);
        std::memcpy(x.data(), x16.data(), x.size());
        std::memcpy(w.data(), w16.data(), w.size());
      }
      DeviceBuffer dx(x.size()), dw(w.size()), done(max_m * n * 4),
          dxr(x.size()), dwr(w.size()), dpart(max_m * n * 4);
      ASSERT_TRUE(CopyToDevice(x, dx.get()) && CopyToDevice(w, dw.get()));
      for (int64_t m : {int64_t{1}, int64_t{7}, max_m}) {
        OCTET_ASSERT_OK((*gemm)->BlockSums(dx.get(), dw.get(), dtype, m, n, k,
                                           blocks, k, done.get<float>(),
                                           nullptr));
        OCTET_ASSERT_CUDA(cudaDeviceSynchronize());
        const bool cublaslt =
            (*gemm)->LastPath() == CublasLtGemm::Path::kCublasLt;
        EXPECT_EQ(cublaslt, k == 4096 || dtype == DType::kBf16)
            << CublasLtGemm::PathName((*gemm)->LastPath()) << " K=" << k;
        const std::vector<float> one = CopyToHost<float>(done.get(), m * n);
        for (int64_t tp : {2, 4, 8}) {
          const int64_t kr = k / tp;
          std::vector<float> parts(tp * m * n);
          for (int64_t r = 0; r < tp; ++r) {
            // The rank's own buffers: its K columns, rows kr apart.
            OCTET_ASSERT_CUDA(cudaMemcpy2D(
                dxr.get(), kr * elem, dx.get<uint8_t>(r * kr * elem), k * elem,
                kr * elem, m, cudaMemcpyDeviceToDevice));
            OCTET_ASSERT_CUDA(cudaMemcpy2D(
                dwr.get(), kr * elem, dw.get<uint8_t>(r * kr * elem), k * elem,
                kr * elem, n, cudaMemcpyDeviceToDevice));
            OCTET_ASSERT_OK((*gemm)->BlockSums(dxr.get(), dwr.get(), dtype, m,
                                               n, kr, blocks / tp, k,
                                               dpart.get<float>(), nullptr));
            OCTET_ASSERT_CUDA(cudaDeviceSynchronize());
            const std::vector<float> part =
                CopyToHost<float>(dpart.get(), m * n);
            std::copy(part.begin(), part.end(), parts.begin() + r * m * n);
          }
          TreeSum(parts.data(), tp, m * n, m * n);  // the communicator's
          parts.resize(m * n);
          const int64_t differ = DifferingFloats(parts, one);
          EXPECT_EQ(differ, 0)
              << DTypeName(dtype) << " K=" << k << " M=" << m << " TP=" << tp;
          std::printf(
              "[ measured ] block sums %s K=%lld M=%lld TP=%lld (%s): %lld of "
              "%lld differ from TP=1's\n",
              DTypeName(dtype).data(), static_cast<long long>(k),
              static_cast<long long>(m), static_cast<long long>(tp),
              cublaslt ? "cublaslt" : "fallback",
              static_cast<long long>(differ), static_cast<long long>(m * n));
        }
      }
    }
  }
}

// CudaTreeSum adds exactly as kernels/tree_sum.h does (its reference), for
// every count of parts up to the limit, on values of many magnitudes.
TEST(CudaGemm, TreeSumAddsInTreeSumOrder) {
  OCTET_REQUIRE_CUDA_DEVICE();
  constexpr int64_t n = 1000;
  for (int64_t count : {1, 2, 3, 4, 5, 7, 8, 9, 16, 63, 64}) {
    std::vector<float> parts = testing::MixedFloats(count * n, 61 + count);
    for (float& v : parts) {
      if (std::isnan(v)) v = 1.0f;  // NaN's payload is not the point
    }
    DeviceBuffer dparts(parts.size() * 4), dout(n * 4);
    ASSERT_TRUE(CopyToDevice(parts, dparts.get()));
    OCTET_ASSERT_OK(CudaTreeSum(dparts.get<float>(), count, n, n,
                                dout.get<float>(), nullptr));
    OCTET_ASSERT_CUDA(cudaDeviceSynchronize());
    TreeSum(parts.data(), count, n, n);
    parts.resize(n);
    EXPECT_EQ(DifferingFloats(CopyToHost<float>(dout.get(), n), parts), 0)
        << count << " parts";
  }
  EXPECT_EQ(CudaTreeSum(nullptr, 65, 1, 1, nullptr, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace octet
