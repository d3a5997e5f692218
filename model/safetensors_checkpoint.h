// A Hugging Face checkpoint directory as a Checkpoint: config.json, the
// safetensors files (one model.safetensors, or shards listed by
// model.safetensors.index.json), and a tokenizer.model or tokenizer.json
// beside them (model/README.md has the layouts).
//
// Tensors stay memory-mapped: Get() returns a view of the mapped bytes, so a
// loader reads only what it uses (a tensor-parallel rank, its slice) and
// quantizes from the mapping without a full copy. The names in the files
// are the canonical ones already.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "model/checkpoint.h"
#include "model/safetensors.h"

namespace octet {

class SafetensorsCheckpoint : public Checkpoint {
 public:
  // Parses config.json, maps every safetensors file, validates every header
  // and the index, then Checkpoint::Validate.
  static absl::StatusOr<std::unique_ptr<SafetensorsCheckpoint>> Open(
      const std::string& dir);

  absl::StatusOr<TensorView> Get(absl::string_view name) const override;
  bool Has(absl::string_view name) const override;
  std::vector<std::string> TensorNames() const override;
  void ReleasePages(absl::string_view name) const override;

 private:
  SafetensorsCheckpoint(std::string dir, ModelConfig config)
      : Checkpoint(std::move(dir), std::move(config)) {}
  absl::Status MapFiles(const std::vector<std::string>& files);

  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  // name -> (file index, entry)
  absl::flat_hash_map<std::string, std::pair<size_t, const SafetensorsEntry*>>
      index_;
};

}  // namespace octet
