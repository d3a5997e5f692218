#include "model/rope.h"

#include <cmath>
#include <vector>

namespace octet {
std::vector<float> RopeInverseFrequencies(const ModelConfig& c) {
  const int64_t half = c.head_dim / 2;
  std::vector<float> out(half);
  constexpr double kPi = 3.14159265358979323846;
  for (int64_t i = 0; i < half; ++i) {
    double f =
        std::pow(c.rope_theta, -2.0 * i / static_cast<double>(c.head_dim));
    if (!c.rope_freq_factors.empty()) {
      f /= c.rope_freq_factors.at(i);  // GGUF's rope_freqs.weight
    } else if (c.rope_scaling) {
      // Llama 3: long wavelengths slowed by `factor`, short ones kept, a
      // smooth blend between.
      const RopeScaling& s = *c.rope_scaling;
      const double old_len =
          static_cast<double>(s.original_max_position_embeddings);
      const double low_wavelen = old_len / s.low_freq_factor;
      const double high_wavelen = old_len / s.high_freq_factor;
      const double wavelen = 2 * kPi / f;
      if (wavelen > low_wavelen) {
        f /= s.factor;
      } else if (wavelen >= high_wavelen) {
        const double smooth = (old_len / wavelen - s.low_freq_factor) /
                              (s.high_freq_factor - s.low_freq_factor);
        f = (1 - smooth) * f / s.factor + smooth * f;
      }
    }
    out[i] = static_cast<float>(f);
  }
  return out;
}

}  // namespace octet
