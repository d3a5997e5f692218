// Writes a checkpoint's tensors as safetensors files in the Hugging Face
// layout: one model.safetensors, or shards (model-0000i-of-0000n) with a
// model.safetensors.index.json when they exceed `shard_bytes`. Tensors are
// produced one at a time, so checkpoints larger than memory can be written.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "model/safetensors.h"

namespace octet {

struct TensorSource {
  SafetensorsWriter::Spec spec;
  // Writes exactly the spec's bytes into the writer.
  std::function<absl::Status(SafetensorsWriter&)> write;
};

absl::Status WriteCheckpointTensors(const std::string& dir,
                                    const std::vector<TensorSource>& tensors,
                                    uint64_t shard_bytes);

// Writes `text` to `path` (replacing it).
absl::Status WriteTextFile(const std::string& path, const std::string& text);

}  // namespace octet
