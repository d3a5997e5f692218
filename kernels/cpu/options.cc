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
  return options.num_threads > 0 ? options.num_threads : omp_get_num_procs();
}

}  // namespace octet::cpu_internal
