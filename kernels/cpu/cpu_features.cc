#include "kernels/cpu/cpu_features.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace octet {
namespace {

CpuFeatures Detect() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  // libgcc's __builtin_cpu_supports also checks that the OS saves the YMM/ZMM
  // state (XGETBV), so a feature reported here is usable.
  __builtin_cpu_init();
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  f.f16c = __builtin_cpu_supports("f16c");
  f.avx512f = __builtin_cpu_supports("avx512f");
  f.avx512bw = __builtin_cpu_supports("avx512bw");
  f.avx512vl = __builtin_cpu_supports("avx512vl");
  f.avx512dq = __builtin_cpu_supports("avx512dq");
  f.avx512vbmi = __builtin_cpu_supports("avx512vbmi");
  f.avx512bf16 = __builtin_cpu_supports("avx512bf16");
  f.avx512fp16 = __builtin_cpu_supports("avx512fp16");
  f.amx_bf16 = __builtin_cpu_supports("amx-bf16");
#endif
  return f;
}

}  // namespace

const CpuFeatures& GetCpuFeatures() {
  static const CpuFeatures features = Detect();
  return features;
}

bool CpuIsaSupported(CpuIsa isa) {
  const CpuFeatures& f = GetCpuFeatures();
  switch (isa) {
    case CpuIsa::kAuto:
    case CpuIsa::kScalar:
      return true;
    case CpuIsa::kAvx2:
      return f.avx2 && f.fma && f.f16c;
    case CpuIsa::kAvx512:
      return CpuIsaSupported(CpuIsa::kAvx2) && f.avx512f && f.avx512bw &&
             f.avx512vl && f.avx512dq && f.avx512vbmi && f.avx512bf16;
  }
  return false;
}

CpuIsa ResolveCpuIsa(CpuIsa isa) {
  if (isa != CpuIsa::kAuto) return isa;
  static const CpuIsa best = [] {
    if (CpuIsaSupported(CpuIsa::kAvx512)) return CpuIsa::kAvx512;
    if (CpuIsaSupported(CpuIsa::kAvx2)) return CpuIsa::kAvx2;
    return CpuIsa::kScalar;
  }();
  return best;
}

std::vector<CpuIsa> SupportedCpuIsas() {
  std::vector<CpuIsa> out;
  for (CpuIsa isa : {CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (CpuIsaSupported(isa)) out.push_back(isa);
  }
  return out;
}

absl::string_view CpuIsaName(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kAuto:
      return "auto";
    case CpuIsa::kScalar:
      return "scalar";
    case CpuIsa::kAvx2:
      return "avx2";
    case CpuIsa::kAvx512:
      return "avx512";
  }
  return "?";
}

absl::StatusOr<CpuIsa> ParseCpuIsa(absl::string_view name) {
  for (CpuIsa isa :
       {CpuIsa::kAuto, CpuIsa::kScalar, CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (name == CpuIsaName(isa)) return isa;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown CPU instruction set '", name,
                   "' (expected auto, scalar, avx2 or avx512)"));
}

std::string DescribeCpuFeatures() {
  const CpuFeatures& f = GetCpuFeatures();
  std::vector<absl::string_view> present;
  auto add = [&](bool has, absl::string_view name) {
    if (has) present.push_back(name);
  };
  add(f.avx2, "avx2");
  add(f.fma, "fma");
  add(f.f16c, "f16c");
  add(f.avx512f, "avx512f");
  add(f.avx512bw, "avx512bw");
  add(f.avx512vl, "avx512vl");
  add(f.avx512dq, "avx512dq");
  add(f.avx512vbmi, "avx512_vbmi");
  add(f.avx512bf16, "avx512_bf16");
  add(f.avx512fp16, "avx512_fp16");
  add(f.amx_bf16, "amx_bf16");
  return absl::StrCat(
      "cpu features: ", present.empty() ? "none" : absl::StrJoin(present, " "),
      "; kernels: ", CpuIsaName(ResolveCpuIsa(CpuIsa::kAuto)));
}

}  // namespace octet
