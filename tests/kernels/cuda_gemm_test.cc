// CUDA GEMMs (kernels/cuda/gemm.h): cuBLASLt FP8 and BF16, and the fallback
// kernels, against the CPU (the fp64-checked kernels of gemm_test.cc) with
// scales passed as device pointers. Skips without a CUDA device.
//
// Tolerances: the fallback accumulates in binary32 in K order, so it meets
// the CPU bound γ_K·Σ|ab|. cuBLASLt on Hopper accumulates FP8 products in
// the tensor cores' reduced-precision accumulator and promotes to binary32
// at intervals (fast accumulation off); the bound used for it adds 2^-13·Σ|ab|
// to γ_K. That allowance is an assumption until a device run confirms it.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/gemm.h"
#include "kernels/cuda/gemm_fallback.h"
#include "kernels/fp8.h"
#include "tests/kernels/cuda_test_util.h"
#include "tests/kernels/test_data.h"

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
      ASSERT_TRUE((*gemm)
                      ->E4m3(da.get<uint8_t>(), d_sa, db.get<uint8_t>(), d_sb,
                             s.m, s.n, s.k, dy.get(), yt, nullptr)
                      .ok());
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const auto path = (*gemm)->LastPath();
      EXPECT_EQ(path == CublasLtGemm::Path::kCublasLt, c.expect_cublaslt)
          << "M=" << s.m << " N=" << s.n << " K=" << s.k << " took "
          << CublasLtGemm::PathName(path);
      ExpectGemmClose(
          DeviceOutput(dy.get(), y_bf16, s), s, a, b, double(sa * sb), y_bf16,
          path == CublasLtGemm::Path::kCublasLt ? 0x1p-13 : 0.0,
          std::string("e4m3 ") + std::string(CublasLtGemm::PathName(path)));
      // The fallback kernel directly, on every shape.
      ASSERT_TRUE(CudaGemmE4m3Fallback(da.get<uint8_t>(), d_sa,
                                       db.get<uint8_t>(), d_sb, s.m, s.n, s.k,
                                       dy.get(), yt, nullptr)
                      .ok());
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
      ASSERT_TRUE((*gemm)
                      ->Bf16(da.get<Bf16>(), db.get<Bf16>(), s.m, s.n, s.k,
                             dy.get(), yt, nullptr)
                      .ok());
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const auto path = (*gemm)->LastPath();
      ExpectGemmClose(
          DeviceOutput(dy.get(), y_bf16, s), s, a, b, 1.0, y_bf16, 0.0,
          std::string("bf16 ") + std::string(CublasLtGemm::PathName(path)));
    }
  }
}

TEST(CudaGemm, MisalignedOperandsStillWork) {
  OCTET_REQUIRE_CUDA_DEVICE();
  auto gemm = CublasLtGemm::Create();
  ASSERT_TRUE(gemm.ok());
  const Shape s{4, 256, 512};
  const auto qa = RandomCodes(s.m * s.k, 5);
  const auto qb = RandomCodes(s.n * s.k, 6);
  DeviceBuffer da(qa.size() + 16), db(qb.size()), dy(s.m * s.n * 4), dscale(8);
  ASSERT_TRUE(CopyToDevice(qa, da.get(1)) && CopyToDevice(qb, db.get()));
  ASSERT_TRUE(CopyToDevice(std::vector<float>{1.0f, 1.0f}, dscale.get()));
  ASSERT_TRUE((*gemm)
                  ->E4m3(da.get<uint8_t>(1), dscale.get<float>(),
                         db.get<uint8_t>(), dscale.get<float>(4), s.m, s.n, s.k,
                         dy.get(), DType::kF32, nullptr)
                  .ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ExpectGemmClose(
      DeviceOutput(dy.get(), false, s), s,
      [&](int64_t i) { return DecodeE4m3(qa[i]); },
      [&](int64_t i) { return DecodeE4m3(qb[i]); }, 1.0, false,
      (*gemm)->LastPath() == CublasLtGemm::Path::kCublasLt ? 0x1p-13 : 0.0,
      "misaligned");
}

}  // namespace
}  // namespace octet
