// `octet quantize`: writes an FP8 checkpoint in the layout vLLM and
// llm-compressor use (docs/design.md): every projection weight as F8_E4M3 codes
// with its own per-tensor F32 weight_scale (absmax / 448, the contract's
// rule), everything else (embeddings, lm_head, norms) as it was, and
// config.json's quantization_config {quant_method: fp8, activation_scheme:
// dynamic, ignored_layers: [lm_head]}. The tokenizer is copied.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "kernels/cpu/options.h"

namespace octet {

struct Fp8ExportOptions {
  uint64_t shard_bytes = uint64_t{4} << 30;
  CpuKernelOptions cpu;
};

absl::Status ExportFp8Checkpoint(const std::string& in_dir,
                                 const std::string& out_dir,
                                 const Fp8ExportOptions& options = {});

}  // namespace octet
