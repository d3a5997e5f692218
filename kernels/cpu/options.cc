#include "kernels/cpu/options.h"

#include <omp.h>

#include "absl/strings/str_cat.h"

namespace octet::cpu_internal {

absl::StatusOr<CpuIsa> CheckOptions(const CpuKernelOptions& options,
                                    const char* what) {
  if (options.num_threads < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": num_threads must be >= 0, got ", options.num_threads));
  }
  if (!CpuIsaSupported(options.isa)) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, ": this CPU does not support the ", CpuIsaName(options.isa),
        " kernels (", DescribeCpuFeatures(), ")"));
  }
  return ResolveCpuIsa(options.isa);
}

int ThreadCount(const CpuKernelOptions& options) {
  // omp_get_num_procs() is a sched_getaffinity system call: ~5 us, on every
  // kernel call of a decode step. The affinity is read once.
  static const int procs = omp_get_num_procs();
  return options.num_threads > 0 ? options.num_threads : procs;
}

}  // namespace octet::cpu_internal
