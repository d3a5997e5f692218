// RoPE's inverse frequencies, from a model's config: the rotary angle of
// head dimension pair i at position p is p * inv_freq[i].
#pragma once

#include <vector>

#include "model/model_config.h"

namespace octet {

// inv_freq[i] = theta^(-2i / head_dim) for i < head_dim / 2, with Llama 3
// scaling applied (ModelConfig::rope_freq_factors, else rope_scaling):
// computed in double, rounded once to binary32.
std::vector<float> RopeInverseFrequencies(const ModelConfig& config);

}  // namespace octet
