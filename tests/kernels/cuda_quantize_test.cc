// The CUDA quantizer (kernels/cuda/quantize.h) against the CPU scalar
// reference (the kScalar kernels): codes and scales bit for bit, for f32 and
// bf16 inputs, aligned (vector path) and misaligned (scalar path), ragged
// lengths, zero and infinite tensors, and tensors large enough to need the
// multi-block absmax reduction. Skips without a CUDA device.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <memory>
#include <random>
#include <vector>

#include "kernels/cpu/quantize.h"
#include "kernels/cuda/quantize.h"
#include "kernels/fp8.h"
#include "tests/kernels/cuda_test_util.h"
#include "tests/kernels/test_data.h"
#include "tests/status_util.h"

namespace octet {
namespace {

using testing::CopyToDevice;
using testing::CopyToHost;
using testing::DeviceBuffer;

constexpr float kInf = std::numeric_limits<float>::infinity();

using testing::MixedFloats;

// The CPU scalar kernels: the reference the CUDA kernels must match.
const CpuKernelOptions kReference{.isa = CpuIsa::kScalar, .num_threads = 1};

// How the device produces the scale: QuantizeDynamic, or AbsMax into a
// caller's slot then Quantize from it (the tensor-parallel path, where the
// absmax is all-reduced between the two).
enum class Mode { kDynamic, kTwoStep };

// Quantizes x (as f32 or bf16) on the device, placed `offset_elems` elements
// past an aligned address, and compares the codes, the scale and (two-step)
// the absmax with the CPU reference bit for bit.
void CheckAgainstCpu(CudaE4m3Quantizer& qz, const std::vector<float>& x,
                     bool bf16, int offset_elems, Mode mode = Mode::kDynamic) {
  const int64_t n = static_cast<int64_t>(x.size());
  const size_t elem = bf16 ? 2 : 4;
  DeviceBuffer dx(n * elem + 64), dq(n + 64), dscale(2 * sizeof(float));
  void* x_ptr = dx.get<char>(offset_elems * elem);
  uint8_t* q_ptr = dq.get<uint8_t>(offset_elems);
  float* d_scale = dscale.get<float>(0);
  float* d_absmax = dscale.get<float>(sizeof(float));
  std::vector<uint8_t> want(n);
  absl::StatusOr<E4m3Scale> cpu;
  absl::StatusOr<float> cpu_absmax;
  if (bf16) {
    std::vector<Bf16> xb(n);
    for (int64_t i = 0; i < n; ++i) xb[i] = FloatToBf16(x[i]);
    ASSERT_TRUE(CopyToDevice(xb, x_ptr));
    cpu = QuantizeE4m3Dynamic(xb.data(), n, want.data(), kReference);
    cpu_absmax = AbsMax(xb.data(), n, kReference);
  } else {
    ASSERT_TRUE(CopyToDevice(x, x_ptr));
    cpu = QuantizeE4m3Dynamic(x.data(), n, want.data(), kReference);
    cpu_absmax = AbsMax(x.data(), n, kReference);
  }
  OCTET_ASSERT_OK(cpu);
  OCTET_ASSERT_OK(cpu_absmax);
  const DType dtype = bf16 ? DType::kBf16 : DType::kF32;
  if (mode == Mode::kDynamic) {
    OCTET_ASSERT_OK(
        qz.QuantizeDynamic(x_ptr, dtype, n, q_ptr, d_scale, nullptr));
  } else {
    OCTET_ASSERT_OK(qz.AbsMax(x_ptr, dtype, n, d_absmax, nullptr));
    OCTET_ASSERT_OK(
        qz.Quantize(x_ptr, dtype, n, d_absmax, q_ptr, d_scale, nullptr));
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<float> scales = CopyToHost<float>(dscale.get(), 2);
  const std::vector<uint8_t> got = CopyToHost<uint8_t>(q_ptr, n);
  ASSERT_EQ(scales.size(), 2u);
  EXPECT_EQ(std::bit_cast<uint32_t>(scales[0]),
            std::bit_cast<uint32_t>(cpu->scale))
      << "n=" << n << " bf16=" << bf16;
  if (mode == Mode::kTwoStep) {
    EXPECT_EQ(std::bit_cast<uint32_t>(scales[1]),
              std::bit_cast<uint32_t>(*cpu_absmax))
        << "absmax, n=" << n << " bf16=" << bf16;
  }
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(got[i], want[i])
        << "n=" << n << " bf16=" << bf16 << " offset=" << offset_elems
        << " i=" << i << " x=" << x[i];
  }
}

std::unique_ptr<CudaE4m3Quantizer> NewQuantizer() {
  auto qz = CudaE4m3Quantizer::Create();
  EXPECT_TRUE(qz.ok()) << qz.status();
  return qz.ok() ? std::move(*qz) : nullptr;
}

TEST(CudaQuantize, CodesAndScaleMatchCpuBitForBit) {
  OCTET_REQUIRE_CUDA_DEVICE();
  auto qz = NewQuantizer();
  ASSERT_NE(qz, nullptr);
  for (int64_t n :
       {1, 7, 8, 9, 15, 16, 17, 100, 4097, 1 << 16, (1 << 22) + 5}) {
    const std::vector<float> x = MixedFloats(n, static_cast<uint32_t>(n));
    for (bool bf16 : {false, true}) {
      for (int offset : {0, 1}) {
        CheckAgainstCpu(*qz, x, bf16, offset, Mode::kDynamic);
        CheckAgainstCpu(*qz, x, bf16, offset, Mode::kTwoStep);
      }
    }
  }
}

TEST(CudaQuantize, ZeroAndInfiniteTensors) {
  OCTET_REQUIRE_CUDA_DEVICE();
  auto qz = NewQuantizer();
  ASSERT_NE(qz, nullptr);
  std::vector<float> zeros(1000, 0.0f);
  for (size_t i = 1; i < zeros.size(); i += 2) zeros[i] = -0.0f;
  CheckAgainstCpu(*qz, zeros, false, 0);
  std::vector<float> with_inf(333, 1.5f);
  with_inf[17] = kInf;
  with_inf[200] = -kInf;
  CheckAgainstCpu(*qz, with_inf, false, 0);
  CheckAgainstCpu(*qz, with_inf, true, 1);
}

TEST(CudaQuantize, RepeatedCallsReuseTheReduction) {
  OCTET_REQUIRE_CUDA_DEVICE();
  // One quantizer, grids of different sizes: the last-block ticket must
  // reset itself after every launch.
  auto qz = NewQuantizer();
  ASSERT_NE(qz, nullptr);
  for (int round = 0; round < 8; ++round) {
    const int64_t n = round % 2 ? 300000 + round : 5000 + round;
    CheckAgainstCpu(*qz, MixedFloats(n, 90 + round), round % 3 == 0, 0,
                    round % 2 ? Mode::kTwoStep : Mode::kDynamic);
  }
}

TEST(CudaQuantize, QuantizeUsesTheGivenAbsmax) {
  OCTET_REQUIRE_CUDA_DEVICE();
  // As after a tensor-parallel all-reduce: another rank's larger absmax.
  auto qz = NewQuantizer();
  ASSERT_NE(qz, nullptr);
  const std::vector<float> x = MixedFloats(10000, 5);
  const float given = 3.0f * *AbsMax(x.data(), x.size(), kReference);
  std::vector<uint8_t> want(x.size());
  OCTET_ASSERT_OK(QuantizeE4m3(x.data(), x.size(),
                               E4m3ScaleFromAbsmax(given).inv, want.data(),
                               kReference));
  DeviceBuffer dx(x.size() * 4), dq(x.size()), ds(8);
  ASSERT_TRUE(CopyToDevice(x, dx.get()));
  ASSERT_TRUE(CopyToDevice(std::vector<float>{given}, ds.get(4)));
  OCTET_ASSERT_OK(qz->Quantize(dx.get(), DType::kF32, x.size(),
                               ds.get<float>(4), dq.get<uint8_t>(),
                               ds.get<float>(0), nullptr));
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(CopyToHost<float>(ds.get(), 1),
            std::vector<float>{E4m3ScaleFromAbsmax(given).scale});
  EXPECT_EQ(CopyToHost<uint8_t>(dq.get(), x.size()), want);
}

TEST(CudaQuantize, DequantizeMatchesCpu) {
  OCTET_REQUIRE_CUDA_DEVICE();
  auto qz = NewQuantizer();
  ASSERT_NE(qz, nullptr);
  std::vector<uint8_t> q(256);
  for (int c = 0; c < 256; ++c) q[c] = static_cast<uint8_t>(c);
  const float scale = 0.0123f;
  std::vector<float> want(256);
  OCTET_ASSERT_OK(
      DequantizeE4m3(q.data(), 256, scale, want.data(), kReference));
  DeviceBuffer dq(256), dy(256 * 4), ds(4);
  ASSERT_TRUE(CopyToDevice(q, dq.get()));
  ASSERT_TRUE(CopyToDevice(std::vector<float>{scale}, ds.get()));
  for (DType out : {DType::kF32, DType::kBf16}) {
    OCTET_ASSERT_OK(qz->Dequantize(dq.get<uint8_t>(), 256, ds.get<float>(),
                                   dy.get(), out, nullptr));
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<float> got =
        out == DType::kF32 ? CopyToHost<float>(dy.get(), 256)
                           : testing::Widen(CopyToHost<Bf16>(dy.get(), 256));
    for (int c = 0; c < 256; ++c) {
      const float expect =
          out == DType::kF32 ? want[c] : Bf16ToFloat(FloatToBf16(want[c]));
      if (std::isnan(expect)) {
        EXPECT_TRUE(std::isnan(got[c])) << c;
      } else {
        EXPECT_EQ(std::bit_cast<uint32_t>(got[c]),
                  std::bit_cast<uint32_t>(expect))
            << "code " << c << " out " << DTypeName(out);
      }
    }
  }
}

TEST(CudaQuantize, BadArgumentsAreErrors) {
  OCTET_REQUIRE_CUDA_DEVICE();
  auto qz = NewQuantizer();
  ASSERT_NE(qz, nullptr);
  DeviceBuffer d(64);
  EXPECT_EQ(qz->AbsMax(d.get(), DType::kF32, 4, nullptr, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(qz->QuantizeDynamic(d.get(), DType::kE4m3, 4, d.get<uint8_t>(),
                                d.get<float>(), nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(qz->QuantizeDynamic(d.get(), DType::kF32, -1, d.get<uint8_t>(),
                                d.get<float>(), nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace octet
