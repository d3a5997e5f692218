// `octet quantize`: writes an FP8 checkpoint (model/README.md): every
// projection weight as F8_E4M3 codes with its F32 weight_scale (absmax /
// 448, the contract's rule: one per weight, or one per row for per-channel
// schemes), everything else (embeddings, lm_head, norms) as it was, and
// config.json's quantization_config: vLLM's {quant_method: fp8,
// activation_scheme: dynamic, ignored_layers: [lm_head]} by default, or
// llm-compressor's compressed-tensors for a scheme ("fp8-tensor": per-tensor
// weights, dynamic per-tensor activations; "fp8-channel-token": per-channel
// weights, dynamic per-token activations, llm-compressor's FP8_DYNAMIC).
// The tokenizer and chat template come along (tokenizer.model or
// tokenizer.json, tokenizer_config.json, chat_template.jinja; a GGUF
// input's written as those files: GgufTokenizerFiles). They are read before
// any tensor is written and config.json is written last, so a failed
// export is never a checkpoint; a second export into the same folder
// replaces the first one's config and tokenizer files.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "kernels/cpu/options.h"

namespace octet {

struct Fp8ExportOptions {
  uint64_t shard_bytes = uint64_t{4} << 30;
  CpuKernelOptions cpu;
  // "" (vLLM's layout), "fp8-tensor" or "fp8-channel-token".
  std::string scheme;
};

absl::Status ExportFp8Checkpoint(const std::string& in_dir,
                                 const std::string& out_dir,
                                 const Fp8ExportOptions& options = {});

}  // namespace octet
