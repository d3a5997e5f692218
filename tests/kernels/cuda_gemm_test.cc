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

namespace octet {
namespace {

using testing::CopyToDevice;
using testing::CopyToHost;
using testing::DeviceBuffer;

struct Shape {
  int64_t m, n, k;
};

std::vector<uint8_t> RandomCodes(int64_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(0, 255);
  std::vector<uint8_t> q(count);
  for (auto& c : q) {
    do {
      c = static_cast<uint8_t>(dist(rng));
    } while ((c & 0x7F) == 0x7F);
  }
  return q;
}

std::vector<Bf16> RandomBf16(int64_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 2.0f);
  std::vector<Bf16> v(count);
  for (auto& x : v) x = FloatToBf16(dist(rng));
  return v;
}

// Compares device output (f32 or bf16, row-major M x N) with fp64 dots.
template <typename A, typename B>
void ExpectClose(const void* d_y, bool y_bf16, const Shape& s, A a, B b,
                 double out_scale, double extra_rel, const std::string& what) {
  std::vector<float> y(s.m * s.n);
  if (y_bf16) {
    const std::vector<Bf16> yb = CopyToHost<Bf16>(d_y, s.m * s.n);
    ASSERT_EQ(yb.size(), y.size());
    for (size_t i = 0; i < y.size(); ++i) y[i] = Bf16ToFloat(yb[i]);
  } else {
    y = CopyToHost<float>(d_y, s.m * s.n);
    ASSERT_EQ(y.size(), size_t(s.m * s.n));
  }
  const double u = 0x1p-24, gamma = s.k * u / (1 - s.k * u);
  const double out_rounding = y_bf16 ? 0x1p-8 : 0x1p-24;
  for (int64_t i = 0; i < s.m; ++i) {
    for (int64_t j = 0; j < s.n; ++j) {
      double dot = 0, magnitude = 0;
      for (int64_t t = 0; t < s.k; ++t) {
        const double p = double(a(i * s.k + t)) * double(b(j * s.k + t));
        dot += p;
        magnitude += std::fabs(p);
      }
      const double want = dot * out_scale;
      const double tol =
          (gamma + extra_rel) * magnitude * std::fabs(out_scale) +
          std::fabs(want) * out_rounding * 1.0001 + 1e-30;
      ASSERT_LE(std::fabs(y[i * s.n + j] - want), tol)
          << what << " M=" << s.m << " N=" << s.n << " K=" << s.k << " at ("
          << i << "," << j << ")";
    }
  }
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
      ExpectClose(
          dy.get(), y_bf16, s, a, b, double(sa * sb),
          path == CublasLtGemm::Path::kCublasLt ? 0x1p-13 : 0.0,
          std::string("e4m3 ") + std::string(CublasLtGemm::PathName(path)));
      // The fallback kernel directly, on every shape.
      ASSERT_TRUE(CudaGemmE4m3Fallback(da.get<uint8_t>(), d_sa,
                                       db.get<uint8_t>(), d_sb, s.m, s.n, s.k,
                                       dy.get(), yt, nullptr)
                      .ok());
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      ExpectClose(dy.get(), y_bf16, s, a, b, double(sa * sb), 0.0,
                  "e4m3 fallback");
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
      ExpectClose(
          dy.get(), y_bf16, s, a, b, 1.0, 0.0,
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
  ExpectClose(
      dy.get(), false, s, [&](int64_t i) { return DecodeE4m3(qa[i]); },
      [&](int64_t i) { return DecodeE4m3(qb[i]); }, 1.0,
      (*gemm)->LastPath() == CublasLtGemm::Path::kCublasLt ? 0x1p-13 : 0.0,
      "misaligned");
}

}  // namespace
}  // namespace octet
