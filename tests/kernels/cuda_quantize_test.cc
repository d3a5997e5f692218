// The CUDA quantizer (kernels/cuda/quantize.h) against the CPU scalar
// reference (the kScalar kernels): codes and scales bit for bit, for f32 and
// bf16 inputs, aligned (vector path) and misaligned (scalar path), ragged
// lengths, zero and infinite tensors, and tensors large enough to need the
// multi-block absmax reduction. Skips without a CUDA device.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/quantize.h"
#include "kernels/cuda/quantize.h"
#include "kernels/fp8.h"
#include "tests/kernels/cuda_test_util.h"
#include "tests/kernels/test_data.h"

namespace octet {
namespace {

using testing::CopyToDevice;
using testing::CopyToHost;
using testing::DeviceBuffer;

constexpr float kInf = std::numeric_limits<float>::infinity();

using testing::MixedFloats;

// The CPU scalar kernels: the reference the CUDA kernels must match.
const CpuKernelOptions kReference{.isa = CpuIsa::kScalar, .num_threads = 1};

// Runs QuantizeDynamic on the device for x (as f32 or bf16) placed
// `offset_elems` elements past an aligned address, and compares with the CPU.
void CheckAgainstCpu(const std::vector<float>& x, bool bf16, int offset_elems) {
  auto qz = CudaE4m3Quantizer::Create();
  ASSERT_TRUE(qz.ok()) << qz.status();
  const int64_t n = static_cast<int64_t>(x.size());
  const size_t elem = bf16 ? 2 : 4;
  DeviceBuffer dx(n * elem + 64), dq(n + 64), dscale(sizeof(float));
  void* x_ptr = dx.get<char>(offset_elems * elem);
  uint8_t* q_ptr = dq.get<uint8_t>(offset_elems);
  std::vector<uint8_t> want(n);
  absl::StatusOr<E4m3Scale> cpu;
  if (bf16) {
    std::vector<Bf16> xb(n);
    for (int64_t i = 0; i < n; ++i) xb[i] = FloatToBf16(x[i]);
    ASSERT_TRUE(CopyToDevice(xb, x_ptr));
    cpu = QuantizeE4m3Dynamic(xb.data(), n, want.data(), kReference);
  } else {
    ASSERT_TRUE(CopyToDevice(x, x_ptr));
    cpu = QuantizeE4m3Dynamic(x.data(), n, want.data(), kReference);
  }
  ASSERT_TRUE(cpu.ok());
  ASSERT_TRUE((*qz)
                  ->QuantizeDynamic(x_ptr, bf16 ? DType::kBf16 : DType::kF32, n,
                                    q_ptr, dscale.get<float>(), nullptr)
                  .ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<float> scale = CopyToHost<float>(dscale.get(), 1);
  const std::vector<uint8_t> got = CopyToHost<uint8_t>(q_ptr, n);
  ASSERT_EQ(scale.size(), 1u);
  EXPECT_EQ(std::bit_cast<uint32_t>(scale[0]),
            std::bit_cast<uint32_t>(cpu->scale))
      << "n=" << n << " bf16=" << bf16;
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(got[i], want[i])
        << "n=" << n << " bf16=" << bf16 << " offset=" << offset_elems
        << " i=" << i << " x=" << x[i];
  }
}

TEST(CudaQuantize, CodesAndScaleMatchCpuBitForBit) {
  OCTET_REQUIRE_CUDA_DEVICE();
  for (int64_t n :
       {1, 7, 8, 9, 15, 16, 17, 100, 4097, 1 << 16, (1 << 22) + 5}) {
    const std::vector<float> x = MixedFloats(n, static_cast<uint32_t>(n));
    for (bool bf16 : {false, true}) {
      for (int offset : {0, 1}) CheckAgainstCpu(x, bf16, offset);
    }
  }
}

TEST(CudaQuantize, ZeroAndInfiniteTensors) {
  OCTET_REQUIRE_CUDA_DEVICE();
  std::vector<float> zeros(1000, 0.0f);
  for (size_t i = 1; i < zeros.size(); i += 2) zeros[i] = -0.0f;
  CheckAgainstCpu(zeros, false, 0);
  std::vector<float> with_inf(333, 1.5f);
  with_inf[17] = kInf;
  with_inf[200] = -kInf;
  CheckAgainstCpu(with_inf, false, 0);
  CheckAgainstCpu(with_inf, true, 1);
}

TEST(CudaQuantize, RepeatedCallsReuseTheReduction) {
  OCTET_REQUIRE_CUDA_DEVICE();
  // The last-block ticket must reset itself between launches.
  for (int round = 0; round < 5; ++round) {
    CheckAgainstCpu(MixedFloats(300000 + round, 90 + round), round % 2, 0);
  }
}

TEST(CudaQuantize, DequantizeMatchesCpu) {
  OCTET_REQUIRE_CUDA_DEVICE();
  auto qz = CudaE4m3Quantizer::Create();
  ASSERT_TRUE(qz.ok());
  std::vector<uint8_t> q(256);
  for (int c = 0; c < 256; ++c) q[c] = static_cast<uint8_t>(c);
  const float scale = 0.0123f;
  DeviceBuffer dq(256), dy(256 * 4), ds(4);
  ASSERT_TRUE(CopyToDevice(q, dq.get()));
  ASSERT_TRUE(CopyToDevice(std::vector<float>{scale}, ds.get()));
  ASSERT_TRUE((*qz)
                  ->Dequantize(dq.get<uint8_t>(), 256, ds.get<float>(),
                               dy.get(), DType::kF32, nullptr)
                  .ok());
  const std::vector<float> got = CopyToHost<float>(dy.get(), 256);
  std::vector<float> want(256);
  ASSERT_TRUE(
      DequantizeE4m3(q.data(), 256, scale, want.data(), kReference).ok());
  for (int c = 0; c < 256; ++c) {
    if (std::isnan(want[c])) {
      EXPECT_TRUE(std::isnan(got[c])) << c;
    } else {
      EXPECT_EQ(std::bit_cast<uint32_t>(got[c]),
                std::bit_cast<uint32_t>(want[c]))
          << c;
    }
  }
}

TEST(CudaQuantize, BadArgumentsAreErrors) {
  OCTET_REQUIRE_CUDA_DEVICE();
  auto qz = CudaE4m3Quantizer::Create();
  ASSERT_TRUE(qz.ok());
  DeviceBuffer d(64);
  EXPECT_EQ((*qz)
                ->QuantizeDynamic(d.get(), DType::kE4m3, 4, d.get<uint8_t>(),
                                  d.get<float>(), nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*qz)
                ->QuantizeDynamic(d.get(), DType::kF32, -1, d.get<uint8_t>(),
                                  d.get<float>(), nullptr)
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace octet
