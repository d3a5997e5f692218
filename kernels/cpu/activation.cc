// The CPU's elementwise activations (activation.h): the level's kernel
// (activation_kernels.h) row by row, rows split across threads, or the
// scalar reference where the CPU has no vector level.
#include "kernels/cpu/activation.h"

#include "kernels/cpu/activation_kernels.h"
#include "kernels/cpu/ops.h"

namespace octet::cpu {
namespace {

using cpu_internal::ActivationKernels;

const ActivationKernels* KernelsFor(CpuIsa isa) {
#if defined(OCTET_X86)
  if (isa == CpuIsa::kAvx512) return &cpu_internal::kActivationAvx512;
  if (isa == CpuIsa::kAvx2) return &cpu_internal::kActivationAvx2;
#endif
  (void)isa;
  return nullptr;
}

// Below this many elements a call stays on the calling thread (a decode
// step's row: starting the threads costs more than they save).
constexpr int64_t kParallelMinElements = int64_t{1} << 15;

}  // namespace

absl::Status SiluMul(const float* x, int64_t rows, int64_t cols, float* out,
                     const CpuKernelOptions& options) {
  absl::StatusOr<CpuIsa> isa =
      cpu_internal::CheckOptions(options, "cpu::SiluMul");
  if (!isa.ok()) return isa.status();
  const ActivationKernels* kernels = KernelsFor(*isa);
  if (kernels == nullptr) {
    SiluMulRef(x, rows, cols, out, cpu_internal::ThreadCount(options));
    return absl::OkStatus();
  }
  const int threads = rows * cols < kParallelMinElements
                          ? 1
                          : cpu_internal::ThreadCount(options);
#pragma omp parallel for num_threads(threads) if (threads > 1 && rows > 1)
  for (int64_t r = 0; r < rows; ++r) {
    kernels->silu_mul_row(x + r * 2 * cols, cols, out + r * cols);
  }
  return absl::OkStatus();
}

}  // namespace octet::cpu
