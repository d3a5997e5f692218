// Run-time CPU feature detection and the instruction-set levels the CPU
// kernels are built for.
//
// Every CPU kernel exists at each CpuIsa level in its own translation unit,
// compiled with that level's target flags (kernels/CMakeLists.txt); which one
// runs is decided here, from the CPU the program runs on, never from the
// machine that built it. Thread-safe; detection runs once.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace octet {

enum class CpuIsa {
  kAuto,    // the best level this CPU supports
  kScalar,  // portable C++: the reference, and the fallback below AVX2
  kAvx2,    // AVX2 + FMA + F16C: the x86-64 baseline octet targets
  // AVX-512 F/BW/VL/DQ + VBMI + BF16 (Sapphire Rapids, Zen 4 and later).
  kAvx512,
};

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512dq = false;
  bool avx512vbmi = false;
  bool avx512bf16 = false;
  // Detected and reported only. No kernel uses AVX512_FP16: binary16
  // arithmetic cannot give the binary32 accumulation the FP8 contract
  // requires, and widening e4m3 needs only F16C or table lookups. No AMX
  // kernel exists yet (the CPU these kernels were written on has none).
  bool avx512fp16 = false;
  bool amx_bf16 = false;
};

const CpuFeatures& GetCpuFeatures();

// True when this CPU can run kernels built for `isa` (kAuto: always).
bool CpuIsaSupported(CpuIsa isa);

// kAuto -> the best supported level; any other value is returned unchanged.
CpuIsa ResolveCpuIsa(CpuIsa isa);

// Every supported concrete level, lowest first (for tests and benchmarks).
std::vector<CpuIsa> SupportedCpuIsas();

absl::string_view CpuIsaName(CpuIsa isa);

// Parses "auto", "scalar", "avx2", "avx512".
absl::StatusOr<CpuIsa> ParseCpuIsa(absl::string_view name);

// One line naming the detected features, for logs and benchmark headers.
std::string DescribeCpuFeatures();

}  // namespace octet
