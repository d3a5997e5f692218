// The one table of tensor names: what a Llama-family model of a config
// needs from a checkpoint, by canonical name, with shapes.
//
// Canonical names are Hugging Face Llama's ("model.layers.3.mlp.up_proj.
// weight"), the names of octet's first format. A checkpoint format with
// other names (GGUF's "blk.3.ffn_up.weight") maps them to these in its own
// Checkpoint implementation; the loader, the validator, the synthetic writer
// and the FP8 exporter ask for tensors only through this table.
//
// FP8 checkpoints add scale tensors next to a projection's weight, named by
// WeightScaleName and InputScaleName (compressed-tensors' convention).
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "absl/strings/string_view.h"
#include "model/model_config.h"

namespace octet {

// The tensors outside the decoder layers.
enum class ModelTensor { kEmbedding, kFinalNorm, kLmHead };

// The tensors of one decoder layer. The biases exist with
// ModelConfig::qkv_bias (Qwen2), the head norms with qk_norm (Qwen3).
enum class LayerTensor {
  kInputNorm,
  kQ,
  kK,
  kV,
  kQBias,
  kKBias,
  kVBias,
  kQNorm,
  kKNorm,
  kO,
  kPostNorm,
  kGate,
  kUp,
  kDown,
};

std::string TensorName(ModelTensor t);
std::string TensorName(int64_t layer, LayerTensor t);

// The module a weight belongs to: its name without ".weight"
// ("model.layers.3.mlp.up_proj"), as quantization configs' ignore lists
// name it.
std::string ModuleName(absl::string_view weight);
// An FP8 projection's weight scale: "<weight name>_scale" (one value, or one
// per output row).
std::string WeightScaleName(absl::string_view weight);
// Its static activation scale: "<module>.input_scale".
std::string InputScaleName(absl::string_view weight);

// A tensor a model of some config needs, with its shape.
struct ExpectedTensor {
  std::string name;
  std::vector<int64_t> shape;
  bool linear;  // a projection (q/k/v/o, gate/up/down): FP8-quantizable
  std::variant<ModelTensor, LayerTensor> role;  // which tensor it is
  int64_t layer = -1;  // its decoder layer (LayerTensor roles)
};

// Every tensor a Llama-family model of `config` needs, in load order.
std::vector<ExpectedTensor> ExpectedTensors(const ModelConfig& config);

}  // namespace octet
