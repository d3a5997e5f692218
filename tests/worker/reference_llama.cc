#include "tests/worker/reference_llama.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/bf16.h"
#include "kernels/fp8.h"
#include "worker/linear_loader.h"

namespace octet::testing {
namespace {

using Matrix = std::vector<double>;  // row-major

struct Weights {
  int64_t rows = 0, cols = 0;
  Matrix w;
  std::vector<float> scale;  // FP8: each row's (all alike per tensor)
};

Matrix Load(const Checkpoint& ckpt, const std::string& name) {
  const std::vector<float> f = ToFloat(*ckpt.Get(name));
  return Matrix(f.begin(), f.end());
}

// The contract's codes of `v` (values rounded to binary32) at the scale of
// their absmax, replacing them by the codes' values.
E4m3Scale FakeQuantize(double* v, int64_t n, std::vector<uint8_t>* codes) {
  float absmax = 0;
  for (int64_t i = 0; i < n; ++i)
    absmax = std::max(absmax, std::fabs(static_cast<float>(v[i])));
  const E4m3Scale s = E4m3ScaleFromAbsmax(absmax);
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t code = EncodeE4m3(static_cast<float>(v[i]) * s.inv);
    if (codes != nullptr) codes->push_back(code);
    v[i] = DecodeE4m3(code);
  }
  return s;
}

// Stacks projections by rows; with fp8, fake-quantizes them with one scale
// from their joint absmax (or, per channel, each row with its own):
// w' = decode(encode(w * inv)) * scale, in binary32.
Weights Projection(const Checkpoint& ckpt,
                   const std::vector<std::string>& parts,
                   const ReferenceOptions& o) {
  Weights out;
  for (const std::string& p : parts) {
    const TensorView t = *ckpt.Get(p);
    out.rows += t.shape[0];
    out.cols = t.shape[1];
    const Matrix m = Load(ckpt, p);
    out.w.insert(out.w.end(), m.begin(), m.end());
  }
  if (!o.fp8) return out;
  if (o.per_channel) {
    for (int64_t r = 0; r < out.rows; ++r) {
      out.scale.push_back(
          FakeQuantize(&out.w[r * out.cols], out.cols, nullptr).scale);
    }
  } else {
    out.scale.assign(out.rows,
                     FakeQuantize(out.w.data(), out.w.size(), nullptr).scale);
  }
  return out;
}

// ReferenceOptions::bf16_inputs's rounding of one input value.
double RoundToBf16(double v) {
  return Bf16ToFloat(FloatToBf16(static_cast<float>(v)));
}

// y[t][r] = sum_c x[t][c] * w[r][c]. With fp8, x is first rounded to binary32
// (the model's activation dtype on the CPU) and quantized with its own
// scale (per tensor, or per token), and the dot products of code values are
// multiplied by the binary32 product of the two scales, as the contract's
// GEMM does. Without fp8, bf16_inputs rounds x to bfloat16 (via binary32).
Matrix Apply(const Weights& w, const Matrix& x, int64_t tokens,
             const ReferenceOptions& o,
             std::vector<std::vector<uint8_t>>* codes) {
  Matrix xq = x;
  if (!o.fp8 && o.bf16_inputs) {
    for (double& v : xq) v = RoundToBf16(v);
  }
  std::vector<float> x_scale(tokens, 1.0f);  // each token's
  if (o.fp8) {
    codes->emplace_back();
    if (o.per_token) {
      for (int64_t t = 0; t < tokens; ++t) {
        x_scale[t] =
            FakeQuantize(&xq[t * w.cols], w.cols, &codes->back()).scale;
      }
    } else {
      x_scale.assign(tokens,
                     FakeQuantize(xq.data(), xq.size(), &codes->back()).scale);
    }
  }
  Matrix y(tokens * w.rows);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t r = 0; r < w.rows; ++r) {
      double dot = 0;
      for (int64_t c = 0; c < w.cols; ++c)
        dot += xq[t * w.cols + c] * w.w[r * w.cols + c];
      // One binary32 product of the scales.
      y[t * w.rows + r] = o.fp8 ? dot * (x_scale[t] * w.scale[r]) : dot;
    }
  }
  return y;
}

Matrix RmsNorm(const Matrix& x, const Matrix& weight, int64_t tokens,
               int64_t cols, double eps) {
  Matrix y(x.size());
  for (int64_t t = 0; t < tokens; ++t) {
    double ss = 0;
    for (int64_t c = 0; c < cols; ++c) ss += x[t * cols + c] * x[t * cols + c];
    const double inv = 1.0 / std::sqrt(ss / cols + eps);
    for (int64_t c = 0; c < cols; ++c)
      y[t * cols + c] = x[t * cols + c] * inv * weight[c];
  }
  return y;
}

// RoPE frequencies from the formulas in the Llama 3 reference code.
std::vector<double> Frequencies(const ModelConfig& c) {
  std::vector<double> f(c.head_dim / 2);
  for (size_t i = 0; i < f.size(); ++i) {
    f[i] = 1.0 / std::pow(c.rope_theta, (2.0 * i) / c.head_dim);
    if (!c.rope_scaling) continue;
    const RopeScaling& s = *c.rope_scaling;
    const double wavelen = 2 * M_PI / f[i];
    const double low = s.original_max_position_embeddings / s.low_freq_factor;
    const double high = s.original_max_position_embeddings / s.high_freq_factor;
    if (wavelen < high) continue;
    if (wavelen > low) {
      f[i] /= s.factor;
    } else {
      const double smooth =
          (s.original_max_position_embeddings / wavelen - s.low_freq_factor) /
          (s.high_freq_factor - s.low_freq_factor);
      f[i] = (1 - smooth) * f[i] / s.factor + smooth * f[i];
    }
  }
  return f;
}

void Rotate(double* head, int64_t head_dim, int64_t pos,
            const std::vector<double>& f) {
  const int64_t half = head_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    const double a = head[i], b = head[i + half];
    const double cs = std::cos(pos * f[i]), sn = std::sin(pos * f[i]);
    head[i] = a * cs - b * sn;
    head[i + half] = b * cs + a * sn;
  }
}

}  // namespace

ReferenceResult ReferenceForward(const Checkpoint& ckpt,
                                 const std::vector<int32_t>& tokens,
                                 const ReferenceOptions& options) {
  const ModelConfig& c = ckpt.config();
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t h = c.hidden_size, hd = c.head_dim, nh = c.num_heads,
                nkv = c.num_kv_heads, ff = c.intermediate_size;
  const ReferenceOptions& fp8 = options;
  ReferenceResult result;

  const Matrix emb = Load(ckpt, "model.embed_tokens.weight");
  Matrix x(n * h);
  for (int64_t t = 0; t < n; ++t) {
    std::copy(emb.begin() + tokens[t] * h, emb.begin() + (tokens[t] + 1) * h,
              x.begin() + t * h);
  }
  const std::vector<double> freq = Frequencies(c);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    const Matrix a_in = RmsNorm(x, Load(ckpt, p + "input_layernorm.weight"), n,
                                h, c.rms_norm_eps);
    const Weights qkv_w = Projection(
        ckpt,
        {p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight",
         p + "self_attn.v_proj.weight"},
        fp8);
    Matrix qkv = Apply(qkv_w, a_in, n, fp8, &result.codes);
    const int64_t width = (nh + 2 * nkv) * hd;
    if (c.qkv_bias) {  // Qwen2: after the projection, unquantized
      Matrix bias;
      for (const char* part : {"q_proj", "k_proj", "v_proj"}) {
        const Matrix b = Load(ckpt, p + "self_attn." + part + ".bias");
        bias.insert(bias.end(), b.begin(), b.end());
      }
      for (int64_t i = 0; i < n * width; ++i) qkv[i] += bias[i % width];
    }
    if (c.qk_norm) {  // Qwen3: each q and k head normalized before RoPE
      const Matrix qn = Load(ckpt, p + "self_attn.q_norm.weight");
      const Matrix kn = Load(ckpt, p + "self_attn.k_norm.weight");
      for (int64_t t = 0; t < n; ++t) {
        for (int64_t head = 0; head < nh + nkv; ++head) {
          double* v = &qkv[t * width + head * hd];
          const Matrix normed = RmsNorm(Matrix(v, v + hd), head < nh ? qn : kn,
                                        1, hd, c.rms_norm_eps);
          std::copy(normed.begin(), normed.end(), v);
        }
      }
    }
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t head = 0; head < nh + nkv; ++head) {  // q heads then k heads
        Rotate(&qkv[t * width + head * hd], hd, t, freq);
      }
    }
    Matrix attn(n * nh * hd, 0.0);
    for (int64_t t = 0; t < n; ++t) {
      const int64_t first =
          c.sliding_window ? std::max<int64_t>(0, t - *c.sliding_window + 1)
                           : 0;
      for (int64_t head = 0; head < nh; ++head) {
        const int64_t kvh = head / (nh / nkv);
        const double* q = &qkv[t * width + head * hd];
        std::vector<double> w(t + 1 - first);
        double mx = -INFINITY;
        for (int64_t j = first; j <= t; ++j) {
          const double* k = &qkv[j * width + (nh + kvh) * hd];
          double dot = 0;
          for (int64_t d = 0; d < hd; ++d) dot += q[d] * k[d];
          w[j - first] = dot / std::sqrt(static_cast<double>(hd));
          mx = std::max(mx, w[j - first]);
        }
        double z = 0;
        for (double& v : w) z += (v = std::exp(v - mx));
        for (int64_t j = first; j <= t; ++j) {
          const double* v = &qkv[j * width + (nh + nkv + kvh) * hd];
          for (int64_t d = 0; d < hd; ++d)
            attn[t * nh * hd + head * hd + d] += w[j - first] / z * v[d];
        }
      }
    }
    const Matrix o =
        Apply(Projection(ckpt, {p + "self_attn.o_proj.weight"}, fp8), attn, n,
              fp8, &result.codes);
    for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];
    const Matrix m_in =
        RmsNorm(x, Load(ckpt, p + "post_attention_layernorm.weight"), n, h,
                c.rms_norm_eps);
    const Matrix gu = Apply(
        Projection(ckpt, {p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"},
                   fp8),
        m_in, n, fp8, &result.codes);
    Matrix act(n * ff);
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t i = 0; i < ff; ++i) {
        const double g = gu[t * 2 * ff + i], u = gu[t * 2 * ff + ff + i];
        act[t * ff + i] = g / (1 + std::exp(-g)) * u;
      }
    }
    const Matrix d = Apply(Projection(ckpt, {p + "mlp.down_proj.weight"}, fp8),
                           act, n, fp8, &result.codes);
    for (size_t i = 0; i < x.size(); ++i) x[i] += d[i];
  }
  const Matrix final_x =
      RmsNorm(x, Load(ckpt, "model.norm.weight"), n, h, c.rms_norm_eps);
  const Matrix head =
      Load(ckpt, c.tie_word_embeddings ? "model.embed_tokens.weight"
                                       : "lm_head.weight");
  for (int64_t t = 0; t < n; ++t) {
    std::vector<double> logits(c.vocab_size);
    for (int64_t v = 0; v < c.vocab_size; ++v) {
      double dot = 0;
      for (int64_t i = 0; i < h; ++i) {
        const double xi = final_x[t * h + i];
        dot += (options.bf16_inputs ? RoundToBf16(xi) : xi) * head[v * h + i];
      }
      logits[v] = dot;
    }
    result.logits.push_back(std::move(logits));
  }
  return result;
}

}  // namespace octet::testing
