// The CPU backend: binary32 activations, device memory = host memory
// (64-byte aligned, huge pages above 2 MiB), the CPU kernels of kernels/cpu.
#pragma once

#include <memory>

#include "kernels/backend.h"
#include "kernels/cpu/options.h"

namespace octet {

std::unique_ptr<Backend> NewCpuBackend(const CpuKernelOptions& options = {});

}  // namespace octet
