// A Llama-family model's shape and numerics, read from a Hugging Face
// config.json (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM,
// Qwen3ForCausalLM). The four share one forward pass (worker/llama_model.h);
// what sets them apart is a flag each: Mistral's sliding window, Qwen2's
// q/k/v biases, Qwen3's per-head q/k RMSNorm.
//
// Fields the forward pass depends on are validated; anything octet does not
// implement (another architecture, o_proj or MLP biases, another rope
// scaling, per-layer sliding windows, block-wise FP8 ...) is an error naming
// the field, never silently ignored.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/dtype.h"

namespace octet {

struct RopeScaling {
  // Llama 3's frequency-dependent scaling ("rope_type": "llama3").
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

// quantization_config of an FP8 checkpoint (model/README.md): vLLM's
// quant_method "fp8" (per-tensor scales), or llm-compressor's
// "compressed-tensors" (format "float-quantized"; weights per tensor or per
// output channel, activations per tensor or, dynamic, per token). Their
// tensors are the same: *.weight in e4m3, *.weight_scale (one, or one per
// row), and with static activations *.input_scale.
struct Fp8CheckpointConfig {
  enum class Layout { kVllmFp8, kCompressedTensors };
  Layout layout = Layout::kVllmFp8;
  bool static_activations = false;    // input_scale tensors, no dynamic scales
  bool weight_per_channel = false;    // weight_scale [rows, 1]
  bool activation_per_token = false;  // a dynamic scale per token
  std::vector<std::string> ignored_layers;  // left unquantized by the writer
};

struct ModelConfig {
  // "LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM" or
  // "Qwen3ForCausalLM".
  std::string architecture;
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;  // hidden_size / num_heads unless given
  int64_t intermediate_size = 0;
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  std::optional<RopeScaling> rope_scaling;
  // A GGUF file's rope_freqs.weight (llama.cpp's form of Llama 3's scaling,
  // which its converter computes from rope_scaling): rotary pair i's
  // frequency is divided by factor i. Empty: none. config.json has no form
  // for it (ModelConfigToJson leaves it out; `octet quantize` refuses it).
  std::vector<float> rope_freq_factors;
  std::optional<int64_t> sliding_window;  // Mistral v0.1
  // Qwen2: q_proj, k_proj and v_proj have biases (*.bias, [rows]), added to
  // the projection's output, never quantized.
  bool qkv_bias = false;
  // Qwen3: each query and key head is RMS-normalized over head_dim
  // (self_attn.q_norm.weight, self_attn.k_norm.weight) before RoPE.
  bool qk_norm = false;
  bool tie_word_embeddings = false;
  DType torch_dtype = DType::kBf16;  // kF32, kBf16 or kF16
  std::optional<int64_t> bos_token_id;
  std::vector<int64_t> eos_token_ids;
  std::optional<Fp8CheckpointConfig> fp8;  // present for FP8 checkpoints
};

// Whether an FP8 checkpoint's writer left the projection `module` (its
// name without ".weight", e.g. "model.layers.0.mlp.down_proj")
// unquantized: listed in ignored_layers by name, or matched by an entry
// "re:PATTERN", a regex matched from the start of the name as
// compressed-tensors and vLLM match it (Python's re.match; PCRE2 here).
// Such layers run unquantized in an FP8 model, as vLLM runs them.
bool IsIgnoredLayer(const Fp8CheckpointConfig& fp8, absl::string_view module);

// Parses config.json text; `path` names the file in errors.
absl::StatusOr<ModelConfig> ParseModelConfig(absl::string_view json,
                                             absl::string_view path);

// Reads and parses DIR/config.json.
absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& model_dir);

// Whether the model splits across `size` tensor-parallel ranks (Megatron
// layout, worker/shard_plan.h): attention heads, the MLP's rows and the
// vocabulary divide by `size`, and KV heads divide by it or it by them.
// InvalidArgument naming the dimension otherwise. Known from config.json
// alone, so the coordinator checks it before any worker starts.
absl::Status CheckTensorParallelSplit(const ModelConfig& config, int size);

// The least memory a model's workers need, all ranks together, known from
// config.json and the serving flags alone: the linear layers' weights at
// `weight_bytes` a parameter (1 for FP8), the embedding at 2, and on every
// rank a KV cache of `kv_tokens` slots at 2 bytes a value (the narrowest
// activation type). A lower bound: norms, activations, scratch and the
// runtime come on top, and CPU ranks keep wider types. Bytes, saturating
// at INT64_MAX.
struct MemoryNeed {
  int64_t weights = 0;
  int64_t kv_cache = 0;
  int64_t total() const;
};
MemoryNeed LeastMemoryNeed(const ModelConfig& config, int tp, int weight_bytes,
                           int64_t kv_tokens);

// The quantization method a model is served with, from the --quantization
// flag and its config.json: "auto" is the checkpoint's own ("fp8" when it
// has an FP8 quantization_config, else "none"); "fp8" also serves an
// unquantized checkpoint, quantized at load; "none" cannot serve an FP8
// checkpoint (its weights are e4m3 codes), an InvalidArgument naming both.
// Returns "none" or "fp8"; an unknown flag value is an InvalidArgument.
absl::StatusOr<std::string> ResolveQuantization(absl::string_view flag,
                                                const ModelConfig& config,
                                                absl::string_view model_dir);

// What a model served with `method` ("none" or "fp8") runs, as
// GetModelInfo reports it: "none", or "fp8-" and the weights' scales
// ("tensor": one per weight; "channel": one per output row), then the
// activations' unless dynamic per tensor ("-token": dynamic per token;
// "-static": a checkpoint's input scales): "fp8-tensor",
// "fp8-channel-token", "fp8-tensor-static" ...
std::string QuantizationScheme(const ModelConfig& config,
                               absl::string_view method);

// config.json text for `config` (what make-model and quantize write).
std::string ModelConfigToJson(const ModelConfig& config);

}  // namespace octet
