#include "tests/bench/membw.h"

#include <omp.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>

namespace octet::bench {
namespace {

// Compiled for several targets and chosen at load time (GCC ifunc), so the
// read loop uses the widest loads this CPU has, like the GEMM kernels do.
__attribute__((target_clones("avx512f", "avx2", "default"))) uint64_t SumWords(
    const uint64_t* p, size_t n) {
  uint64_t a = 0, b = 0, c = 0, d = 0;
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    a += p[i];
    b += p[i + 1];
    c += p[i + 2];
    d += p[i + 3];
  }
  for (; i < n; ++i) a += p[i];
  return a + b + c + d;
}

constexpr int64_t kPeakIterations = int64_t{1} << 21;

#if defined(__x86_64__)
// kPeakIterations x 16 instructions on independent accumulators, enough in
// flight to cover the instruction's latency on two ports; returns the
// multiply-adds done. The operands come through volatile memory so that the
// compiler cannot fold the loop.
__attribute__((target("avx512f,avx512bf16"))) double RunDpbf16(
    volatile float* sink) {
  const __m512bh x = (__m512bh)_mm512_set1_epi16(static_cast<short>(*sink));
  const __m512bh y = (__m512bh)_mm512_set1_epi16(0x3F80);  // 1.0
  __m512 acc[16];
  for (__m512& a : acc) a = _mm512_setzero_ps();
  for (int64_t i = 0; i < kPeakIterations; ++i) {
#pragma GCC unroll 16
    for (__m512& a : acc) a = _mm512_dpbf16_ps(a, x, y);
  }
  __m512 total = acc[0];
  for (int j = 1; j < 16; ++j) total = _mm512_add_ps(total, acc[j]);
  // Not _mm512_reduce_add_ps: GCC 12's trips -Wuninitialized (bug 105593).
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, total);
  *sink = lanes[0];
  return double(kPeakIterations) * 16 * 32;
}

__attribute__((target("avx2,fma"))) double RunFma(volatile float* sink) {
  const __m256 x = _mm256_set1_ps(*sink);
  const __m256 y = _mm256_set1_ps(1.0f);
  __m256 acc[16];
  for (__m256& a : acc) a = _mm256_setzero_ps();
  for (int64_t i = 0; i < kPeakIterations; ++i) {
#pragma GCC unroll 16
    for (__m256& a : acc) a = _mm256_fmadd_ps(x, y, a);
  }
  __m256 total = acc[0];
  for (int j = 1; j < 16; ++j) total = _mm256_add_ps(total, acc[j]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, total);
  *sink = lanes[0];
  return double(kPeakIterations) * 16 * 8;
}
#endif

}  // namespace

double CpuDotPeakTflops(DotInstruction instruction, int threads, int reps) {
#if defined(__x86_64__)
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    double fmas = 0;
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads) reduction(+ : fmas)
    {
      volatile float sink = 0.0f;
      fmas += instruction == DotInstruction::kAvx512Bf16 ? RunDpbf16(&sink)
                                                         : RunFma(&sink);
    }
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
            .count();
    best = std::max(best, 2 * fmas / s / 1e12);
  }
  return best;
#else
  (void)instruction, (void)threads, (void)reps;
  return 0;
#endif
}

double CpuReadBandwidthGBps(size_t bytes, int threads, int reps) {
  const size_t words = bytes / sizeof(uint64_t);
  std::unique_ptr<uint64_t[]> buf(new uint64_t[words]);
  const size_t chunk = (words + threads - 1) / threads;
  // First touch by the thread that will read each part.
#pragma omp parallel num_threads(threads)
  {
    const size_t begin = std::min(words, omp_get_thread_num() * chunk);
    const size_t end = std::min(words, begin + chunk);
    for (size_t i = begin; i < end; ++i) buf[i] = i;
  }
  double best = 0;
  volatile uint64_t sink = 0;
  for (int r = 0; r < reps; ++r) {
    uint64_t total = 0;
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(threads) reduction(+ : total)
    {
      const size_t begin = std::min(words, omp_get_thread_num() * chunk);
      const size_t end = std::min(words, begin + chunk);
      total += SumWords(buf.get() + begin, end - begin);
    }
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
            .count();
    sink = sink + total;
    best = std::max(best, words * sizeof(uint64_t) / s / 1e9);
  }
  return best;
}

}  // namespace octet::bench
