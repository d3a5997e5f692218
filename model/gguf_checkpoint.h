// A GGUF file (llama.cpp's format, model/gguf.h) as a Checkpoint: the model
// config from its metadata, its tensors under octet's canonical names, and
// its tokenizer (model/gguf_tokenizer.h). `--model FILE.gguf` serves it with
// no conversion step.
//
// Architectures: `llama` (Llama, Mistral, SmolLM ...) and `qwen2` (q/k/v
// biases). Anything the metadata says that octet's forward pass does not do
// (another architecture, experts, RoPE scaling, a tensor octet has no use
// for) is an error naming it.
//
// Names: GGUF's "blk.3.ffn_up.weight" is "model.layers.3.mlp.up_proj.weight"
// (the table is in gguf_checkpoint.cc, keyed by tensor_names.h's roles);
// dims are stored innermost first, so shapes are reversed. llama.cpp's
// converter interleaves the two rotary halves of each head's rows of a
// `llama` model's q and k weights; Get undoes that, so the rows are Hugging
// Face's again.
//
// Values: F32, F16 and BF16 tensors are views of the mapping; quantized ones
// (Q8_0, Q4_K, ...) and permuted ones are decoded to binary32 on Get and
// freed on ReleasePages, so loading holds one decoded tensor at a time. The
// checkpoint's dtype (torch_dtype) is F32 when any weight is decoded, else
// the weights' own.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "model/checkpoint.h"
#include "model/gguf.h"

namespace octet {

// The config a GGUF file's metadata describes (InvalidArgument naming the
// key or tensor that octet cannot serve).
absl::StatusOr<ModelConfig> GgufModelConfig(const GgufFile& file);

class GgufCheckpoint : public Checkpoint {
 public:
  // Maps and parses the file, reads its config, maps every tensor to its
  // canonical name, then Checkpoint::Validate.
  static absl::StatusOr<std::unique_ptr<GgufCheckpoint>> Open(
      const std::string& path);

  absl::StatusOr<TensorView> Get(absl::string_view name) const override;
  // Get's view without decoding: Validate checks shapes at no decode.
  absl::StatusOr<TensorView> Describe(absl::string_view name) const override;
  bool Has(absl::string_view name) const override;
  std::vector<std::string> TensorNames() const override;
  void ReleasePages(absl::string_view name) const override;

  const GgufFile& file() const { return *file_; }

 private:
  // One canonical tensor: where it is in the file and how rows move.
  struct Entry {
    const GgufTensorInfo* tensor = nullptr;
    int64_t rotary_heads = 0;  // > 0: undo llama.cpp's q/k row interleave
  };

  GgufCheckpoint(std::string path, ModelConfig config,
                 std::unique_ptr<GgufFile> file)
      : Checkpoint(std::move(path), std::move(config)),
        file_(std::move(file)) {}
  absl::Status MapNames();
  // Decodes `e` to binary32 (rows un-interleaved), kept until released.
  const std::vector<float>& Decoded(const std::string& name,
                                    const Entry& e) const;

  std::unique_ptr<GgufFile> file_;
  absl::flat_hash_map<std::string, Entry> entries_;  // canonical name ->
  mutable std::mutex mu_;
  mutable absl::flat_hash_map<std::string, std::unique_ptr<std::vector<float>>>
      decoded_;  // guarded by mu_
};

}  // namespace octet
