// Every binary32 bit pattern (all 2^32) through the e4m3 encoder, against
// CUDA's host-side __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3): first
// the scalar reference, then the vector fast path of every instruction-set
// level this CPU has (through QuantizeE4m3 with inv = 1, since x * 1 == x
// for every x, NaNs included).
#include <cuda_fp8.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <atomic>
#include <bit>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/quantize.h"
#include "kernels/fp8.h"

namespace octet {
namespace {

constexpr uint64_t kPatterns = uint64_t{1} << 32;
constexpr uint64_t kBlock = uint64_t{1} << 20;

TEST(E4m3Exhaustive, EveryFloatMatchesCudaOracleOnEveryPath) {
  const std::vector<CpuIsa> isas = SupportedCpuIsas();
  std::atomic<uint64_t> mismatches{0};
  std::atomic<int> reported{0};
  auto report = [&](const char* path, uint32_t bits, int got, int want) {
    mismatches.fetch_add(1, std::memory_order_relaxed);
    if (reported.fetch_add(1) < 10) {
      std::fprintf(stderr, "%s: x=0x%08x got 0x%02x want 0x%02x\n", path, bits,
                   got, want);
    }
  };

#pragma omp parallel
  {
    std::vector<float> x(kBlock);
    std::vector<uint8_t> want(kBlock), got(kBlock);
#pragma omp for schedule(dynamic)
    for (int64_t block = 0; block < int64_t(kPatterns / kBlock); ++block) {
      const uint32_t base = static_cast<uint32_t>(block * kBlock);
      for (uint64_t i = 0; i < kBlock; ++i) {
        const uint32_t bits = base + static_cast<uint32_t>(i);
        x[i] = std::bit_cast<float>(bits);
        want[i] = __nv_cvt_float_to_fp8(x[i], __NV_SATFINITE, __NV_E4M3);
        const uint8_t ref = EncodeE4m3(x[i]);
        if (ref != want[i]) report("EncodeE4m3", bits, ref, want[i]);
      }
      for (CpuIsa isa : isas) {
        const CpuKernelOptions options{.isa = isa, .num_threads = 1};
        if (!QuantizeE4m3(x.data(), kBlock, 1.0f, got.data(), options).ok()) {
          report(CpuIsaName(isa).data(), base, -1, -1);
          continue;
        }
        for (uint64_t i = 0; i < kBlock; ++i) {
          if (got[i] != want[i]) {
            report(CpuIsaName(isa).data(), base + static_cast<uint32_t>(i),
                   got[i], want[i]);
          }
        }
      }
    }
  }
  EXPECT_EQ(mismatches.load(), 0u) << "paths checked: scalar reference + "
                                   << isas.size() << " kernel levels";
}

}  // namespace
}  // namespace octet
