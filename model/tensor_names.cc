#include "model/tensor_names.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace octet {
namespace {

// Indexed by LayerTensor: the name's part after "model.layers.<i>.".
constexpr const char* kLayerSuffix[] = {
    "input_layernorm.weight",           // kInputNorm
    "self_attn.q_proj.weight",          // kQ
    "self_attn.k_proj.weight",          // kK
    "self_attn.v_proj.weight",          // kV
    "self_attn.q_proj.bias",            // kQBias
    "self_attn.k_proj.bias",            // kKBias
    "self_attn.v_proj.bias",            // kVBias
    "self_attn.q_norm.weight",          // kQNorm
    "self_attn.k_norm.weight",          // kKNorm
    "self_attn.o_proj.weight",          // kO
    "post_attention_layernorm.weight",  // kPostNorm
    "mlp.gate_proj.weight",             // kGate
    "mlp.up_proj.weight",               // kUp
    "mlp.down_proj.weight",             // kDown
};
static_assert(sizeof(kLayerSuffix) / sizeof(kLayerSuffix[0]) ==
              static_cast<size_t>(LayerTensor::kDown) + 1);

}  // namespace

std::string TensorName(ModelTensor t) {
  switch (t) {
    case ModelTensor::kEmbedding:
      return "model.embed_tokens.weight";
    case ModelTensor::kFinalNorm:
      return "model.norm.weight";
    case ModelTensor::kLmHead:
      return "lm_head.weight";
  }
  return "";
}

std::string TensorName(int64_t layer, LayerTensor t) {
  return absl::StrCat("model.layers.", layer, ".",
                      kLayerSuffix[static_cast<int>(t)]);
}

std::string WeightScaleName(absl::string_view weight) {
  return absl::StrCat(weight, "_scale");
}

std::string ModuleName(absl::string_view weight) {
  absl::ConsumeSuffix(&weight, ".weight");
  return std::string(weight);
}

std::string InputScaleName(absl::string_view weight) {
  return absl::StrCat(ModuleName(weight), ".input_scale");
}

std::vector<ExpectedTensor> ExpectedTensors(const ModelConfig& c) {
  const int64_t h = c.hidden_size, q = c.num_heads * c.head_dim,
                kv = c.num_kv_heads * c.head_dim, ff = c.intermediate_size;
  std::vector<ExpectedTensor> out;
  auto whole = [&](ModelTensor t, std::vector<int64_t> shape) {
    out.push_back({TensorName(t), std::move(shape), false, t});
  };
  whole(ModelTensor::kEmbedding, {c.vocab_size, h});
  for (int64_t i = 0; i < c.num_layers; ++i) {
    auto add = [&](LayerTensor t, std::vector<int64_t> shape, bool linear) {
      out.push_back({TensorName(i, t), std::move(shape), linear, t, i});
    };
    add(LayerTensor::kInputNorm, {h}, false);
    add(LayerTensor::kQ, {q, h}, true);
    add(LayerTensor::kK, {kv, h}, true);
    add(LayerTensor::kV, {kv, h}, true);
    if (c.qkv_bias) {
      add(LayerTensor::kQBias, {q}, false);
      add(LayerTensor::kKBias, {kv}, false);
      add(LayerTensor::kVBias, {kv}, false);
    }
    if (c.qk_norm) {
      add(LayerTensor::kQNorm, {c.head_dim}, false);
      add(LayerTensor::kKNorm, {c.head_dim}, false);
    }
    add(LayerTensor::kO, {h, q}, true);
    add(LayerTensor::kPostNorm, {h}, false);
    add(LayerTensor::kGate, {ff, h}, true);
    add(LayerTensor::kUp, {ff, h}, true);
    add(LayerTensor::kDown, {h, ff}, true);
  }
  whole(ModelTensor::kFinalNorm, {h});
  if (!c.tie_word_embeddings) whole(ModelTensor::kLmHead, {c.vocab_size, h});
  return out;
}

}  // namespace octet
