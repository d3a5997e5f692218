// What a checkpoint is to octet, whatever its format: a model config and
// tensors by canonical name (model/tensor_names.h) with their dtype, shape
// and bytes. Its tokenizer, if any, is read by ReadCheckpointTokenizer.
//
// Checkpoint is the interface; each format is one implementation behind
// Checkpoint::Open, which picks it from the path: a Hugging Face directory
// of safetensors files (model/safetensors_checkpoint.h) or one GGUF file
// (model/gguf_checkpoint.h), which maps its names to the canonical ones.
// Nothing above model/ knows which it reads.
//
// A tensor's bytes stay valid until ReleasePages(name) (safetensors: for
// the checkpoint's life; they are mapped). Callers release each tensor once
// done with it: the loader tensor by tensor, Validate after each check.
// A format whose encoding the loader does not read (GGUF's block
// quantizations) decodes on Get into memory ReleasePages frees, so what it holds is the
// tensors in use; the FP8 exporter, which takes every view before it
// writes, would hold them all.
//
// Format-neutral checks live here: Validate (every tensor ExpectedTensors
// names, with its shape, a usable dtype and, for FP8, its scales) and the
// scale readers. Open returns a checked checkpoint; it may be read from
// several threads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "base/dtype.h"
#include "model/chat_template.h"
#include "model/model_config.h"
#include "model/tensor_names.h"
#include "model/tokenizer.h"

namespace octet {

// One tensor of a checkpoint, as stored (dtype, shape, bytes).
struct TensorView {
  std::string name;
  std::string file;  // where it is stored, for messages
  DType dtype;
  std::vector<int64_t> shape;
  absl::Span<const uint8_t> bytes;  // see "A tensor's bytes" above

  int64_t num_elements() const;
};

class Checkpoint {
 public:
  virtual ~Checkpoint() = default;

  // Opens the checkpoint at `path` (a directory, or a GGUF file) in its
  // format, checks it (Validate) and returns it.
  static absl::StatusOr<std::unique_ptr<Checkpoint>> Open(
      const std::string& path);

  const std::string& dir() const { return dir_; }
  const ModelConfig& config() const { return config_; }

  // The tensor called `name`; NotFound naming the tensor and the directory.
  virtual absl::StatusOr<TensorView> Get(absl::string_view name) const = 0;
  virtual bool Has(absl::string_view name) const = 0;
  // What Get would return but the bytes, which may be empty: what checking a
  // tensor's shape and dtype needs, without decoding it (GGUF). By default
  // Get itself.
  virtual absl::StatusOr<TensorView> Describe(absl::string_view name) const {
    return Get(name);
  }
  virtual std::vector<std::string> TensorNames() const = 0;  // sorted

  // Done with `name` for now: its pages may leave memory (a mapped file's,
  // see SafetensorsFile::ReleasePages; a decoded copy is freed). Views of it
  // taken before stay readable only for mapped formats. No-op for unknown
  // names.
  virtual void ReleasePages(absl::string_view name) const = 0;

  // Reads a scalar F32, BF16 or F16 tensor (shape [] or [1]) as a float,
  // e.g. an FP8 weight_scale.
  absl::StatusOr<float> GetScalar(absl::string_view name) const;
  // Reads one float per row of a `rows`-row weight (shape [rows, 1] or
  // [rows]; F32, BF16 or F16), e.g. a per-channel FP8 weight_scale.
  absl::StatusOr<std::vector<float>> GetRowScales(absl::string_view name,
                                                  int64_t rows) const;

 protected:
  Checkpoint(std::string dir, ModelConfig config)
      : dir_(std::move(dir)), config_(std::move(config)) {}
  // Every tensor the config needs is present with the right shape and a
  // usable dtype; FP8 codes only in projections of an FP8 config, with
  // finite positive scales. Each format's Open ends with it.
  absl::Status Validate() const;

 private:
  // Validate's check of one tensor (and its scales).
  absl::Status CheckTensor(const ExpectedTensor& want) const;

  std::string dir_;
  ModelConfig config_;
};

// What serving needs without the weights, from the checkpoint at `path` in
// whichever format it is: its config, and its tokenizer (null when it has
// none; see LoadTokenizerFor).
absl::StatusOr<ModelConfig> ReadCheckpointConfig(const std::string& path);
absl::StatusOr<std::unique_ptr<Tokenizer>> ReadCheckpointTokenizer(
    const std::string& path, const ModelConfig& config);
// The tokenizer alone, from a directory that may hold nothing else
// (Tokenizer::Load) or a GGUF file; NotFound when there is none.
absl::StatusOr<std::unique_ptr<Tokenizer>> ReadTokenizerAlone(
    const std::string& path);
// The chat template, as read (model/chat_template.h); nullopt when the
// checkpoint has none.
absl::StatusOr<std::optional<ChatTemplateSource>> ReadCheckpointChatTemplate(
    const std::string& path);

}  // namespace octet
