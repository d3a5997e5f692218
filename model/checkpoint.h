// A Hugging Face checkpoint directory: config.json, the safetensors files
// (one model.safetensors, or shards listed by model.safetensors.index.json),
// and optionally tokenizer.model.
//
// Tensors stay memory-mapped: Get() returns a view of the mapped bytes, so a
// loader reads only what it uses (a tensor-parallel rank, its slice) and
// quantizes from the mapping without a full copy. Immutable after Open;
// thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "model/model_config.h"
#include "model/safetensors.h"

namespace octet {

// One tensor of a checkpoint, as stored (dtype, shape, mapped bytes).
struct TensorView {
  std::string name;
  std::string file;  // the safetensors file it lives in
  DType dtype;
  std::vector<int64_t> shape;
  absl::Span<const uint8_t> bytes;

  int64_t num_elements() const;
};

// The tensors a Llama-family model of `config` needs, with their shapes, in
// load order. Linear weights of an FP8 checkpoint come with a scalar
// "<name>_scale" (F32) and, for static activations, "<input>_scale"; see
// Checkpoint::Validate.
struct ExpectedTensor {
  std::string name;
  std::vector<int64_t> shape;
  bool linear;  // a projection (q/k/v/o, gate/up/down): FP8-quantizable
};
std::vector<ExpectedTensor> ExpectedTensors(const ModelConfig& config);

class Checkpoint {
 public:
  // Opens DIR: parses config.json, maps every safetensors file, validates
  // every header and checks that every tensor the config needs is present
  // with the right shape and a usable dtype.
  static absl::StatusOr<std::unique_ptr<Checkpoint>> Open(
      const std::string& dir);

  const std::string& dir() const { return dir_; }
  const ModelConfig& config() const { return config_; }

  // The tensor called `name`; NotFound naming the tensor and the directory.
  absl::StatusOr<TensorView> Get(absl::string_view name) const;
  bool Has(absl::string_view name) const;
  std::vector<std::string> TensorNames() const;  // sorted

  // Done with `name` for now: its mapped pages may leave memory (see
  // SafetensorsFile::ReleasePages). No-op for unknown names.
  void ReleasePages(absl::string_view name) const;

  // Reads a scalar F32, BF16 or F16 tensor (shape [] or [1]) as a float,
  // e.g. an FP8 weight_scale.
  absl::StatusOr<float> GetScalar(absl::string_view name) const;
  // Reads one float per row of a `rows`-row weight (shape [rows, 1] or
  // [rows]; F32, BF16 or F16), e.g. a per-channel FP8 weight_scale.
  absl::StatusOr<std::vector<float>> GetRowScales(absl::string_view name,
                                                  int64_t rows) const;

 private:
  Checkpoint() = default;
  absl::Status Validate() const;

  std::string dir_;
  ModelConfig config_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  // name -> (file index, entry)
  absl::flat_hash_map<std::string, std::pair<size_t, const SafetensorsEntry*>>
      index_;
};

}  // namespace octet
