#include "tests/bench/membw.h"

#include <omp.h>

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

}  // namespace

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
