// Internal: where a value lies in the panels of panels.h, for the packer
// (panels.cc) and the scalar kernels that read the panels (gemm_scalar.cc).
// Internal linkage, as e4m3_simd.h explains.
#pragma once

#include <cstdint>

#include "kernels/cpu/panels.h"

namespace octet::cpu_internal {
namespace {  // NOLINT(build/namespaces): see above

// A panel format: the K values of a step; where column x of a panel starts
// (its value 0 of a block), and where its value t of the block lies from
// there, in a panel `width` columns wide.
struct Bf16PanelLayout {
  static constexpr int64_t kStep = kBf16PanelStep;
  static int64_t Column(int64_t x) { return 2 * x; }
  static int64_t Offset(int64_t t, int64_t width) {
    return (t / 2) * 2 * width + t % 2;
  }
};
struct E4m3PanelLayout {
  static constexpr int64_t kStep = kE4m3PanelStep;
  static int64_t Column(int64_t x) {
    return (x / 16) * 64 + ((x % 16) / 4) * 16 + (x % 4) * 2;
  }
  static int64_t Offset(int64_t t, int64_t width) {
    return (t / 4) * 4 * width + ((t % 4) / 2) * 8 + t % 2;
  }
};

}  // namespace
}  // namespace octet::cpu_internal
