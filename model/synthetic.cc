#include "model/synthetic.h"

#include <cmath>
#include <cstring>
#include <filesystem>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/bf16.h"
#include "kernels/f16.h"
#include "kernels/status_macros.h"
#include "model/checkpoint.h"
#include "model/checkpoint_writer.h"
#include "model/safetensors.h"
#include "model/sentencepiece_bridge.h"
#include "model/tokenizer_corpus.h"

namespace octet {
namespace {

namespace fs = std::filesystem;

// Pieces of a synthetic tokenizer besides the fillers: 3 specials, 256 byte
// pieces and up to this many learned merges (what the built-in text supports
// with room to spare).
constexpr int64_t kLearnedPieces = 200;
constexpr int64_t kFixedPieces = 3 + 256;

ModelConfig Base(const char* arch, int64_t hidden, int64_t layers,
                 int64_t heads, int64_t kv_heads, int64_t head_dim,
                 int64_t intermediate, int64_t vocab, int64_t max_pos) {
  ModelConfig c;
  c.architecture = arch;
  c.hidden_size = hidden;
  c.num_layers = layers;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.head_dim = head_dim;
  c.intermediate_size = intermediate;
  c.vocab_size = vocab;
  c.max_position_embeddings = max_pos;
  c.bos_token_id = 1;
  c.eos_token_ids = {2};
  return c;
}

// splitmix64: seeds a stream from (seed, tensor name).
uint64_t Mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

uint64_t StreamSeed(uint64_t seed, absl::string_view name) {
  uint64_t h = 0xCBF29CE484222325ull;  // FNV-1a of the name
  for (char ch : name) h = (h ^ static_cast<uint8_t>(ch)) * 0x100000001B3ull;
  return Mix(seed ^ Mix(h));
}

// Uniform values in [-limit, limit) from a xorshift64* stream.
class Stream {
 public:
  explicit Stream(uint64_t seed) : s_(seed | 1) {}
  float Next(float limit) {
    s_ ^= s_ >> 12;
    s_ ^= s_ << 25;
    s_ ^= s_ >> 27;
    const uint64_t r = s_ * 0x2545F4914F6CDD1Dull;
    return limit * (static_cast<float>(r >> 40) * 0x1p-23f - 1.0f);
  }

 private:
  uint64_t s_;
};

// Standard deviation of each tensor's values (see the header comment).
struct Init {
  float center;  // norms: 1, everything else: 0
  float stddev;
};

Init InitFor(const ModelConfig& c, const ExpectedTensor& t) {
  const absl::string_view n = t.name;
  if (t.shape.size() == 1) return {1.0f, 0.05f};  // RMSNorm weights
  const float fan_in = static_cast<float>(t.shape[1]);
  if (n == "model.embed_tokens.weight") {
    // Tied: the same matrix makes the logits, which must stay of order one.
    return {0.0f, c.tie_word_embeddings ? 1.0f / std::sqrt(fan_in) : 1.0f};
  }
  float s = 1.0f / std::sqrt(fan_in);
  if (n.find("o_proj") != n.npos || n.find("down_proj") != n.npos) {
    s /= std::sqrt(2.0f * static_cast<float>(c.num_layers));
  }
  // Parts of one fused projection differ in scale, as in trained models (so
  // that FP8 loading meets parts with different weight_scales).
  if (n.find("k_proj") != n.npos) s *= 0.8f;
  if (n.find("v_proj") != n.npos) s *= 1.25f;
  if (n.find("up_proj") != n.npos) s *= 0.9f;
  return {0.0f, s};
}

absl::Status WriteTensorData(SafetensorsWriter& w, const ExpectedTensor& t,
                             const Init& init, DType dtype, uint64_t seed) {
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  Stream stream(StreamSeed(seed, t.name));
  const float limit =
      init.stddev * std::sqrt(3.0f);  // uniform's std = limit/sqrt(3)
  constexpr int64_t kChunk = int64_t{1} << 20;
  std::vector<uint8_t> buf(kChunk * DTypeSize(dtype));
  for (int64_t done = 0; done < n; done += kChunk) {
    const int64_t len = std::min(kChunk, n - done);
    for (int64_t i = 0; i < len; ++i) {
      const float v = init.center + stream.Next(limit);
      uint8_t* out = buf.data() + i * DTypeSize(dtype);
      if (dtype == DType::kF32) {
        std::memcpy(out, &v, 4);
      } else if (dtype == DType::kBf16) {
        const uint16_t b = FloatToBf16(v).bits;
        std::memcpy(out, &b, 2);
      } else {
        const uint16_t h = FloatToF16(v).bits;
        std::memcpy(out, &h, 2);
      }
    }
    OCTET_RETURN_IF_ERROR(
        w.Write({buf.data(), static_cast<size_t>(len) * DTypeSize(dtype)}));
  }
  return absl::OkStatus();
}

}  // namespace

std::vector<std::string> SyntheticPresetNames() {
  return {"tiny", "tiny-mistral", "llama-1b", "mistral-7b"};
}

absl::StatusOr<ModelConfig> SyntheticPreset(absl::string_view name) {
  if (name == "tiny") {
    ModelConfig c = Base("LlamaForCausalLM", 64, 2, 4, 2, 16, 160, 512, 1024);
    c.rope_theta = 10000.0;
    c.rope_scaling = RopeScaling{8.0, 1.0, 4.0, 128};
    c.tie_word_embeddings = true;
    c.rms_norm_eps = 1e-5;
    return c;
  }
  if (name == "tiny-mistral") {
    ModelConfig c = Base("MistralForCausalLM", 96, 3, 6, 2, 16, 192, 384, 1024);
    c.sliding_window = 48;
    c.rms_norm_eps = 1e-6;
    return c;
  }
  if (name == "llama-1b") {  // Llama 3.2 1B
    ModelConfig c =
        Base("LlamaForCausalLM", 2048, 16, 32, 8, 64, 8192, 128256, 131072);
    c.rope_theta = 500000.0;
    c.rope_scaling = RopeScaling{32.0, 1.0, 4.0, 8192};
    c.tie_word_embeddings = true;
    c.rms_norm_eps = 1e-5;
    return c;
  }
  if (name == "mistral-7b") {  // Mistral 7B v0.1
    ModelConfig c =
        Base("MistralForCausalLM", 4096, 32, 32, 8, 128, 14336, 32000, 32768);
    c.sliding_window = 4096;
    c.rms_norm_eps = 1e-5;
    return c;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown preset '", name,
                   "' (tiny, tiny-mistral, llama-1b, mistral-7b)"));
}

absl::StatusOr<std::string> TrainSyntheticTokenizer(int64_t vocab_size) {
  if (vocab_size < kFixedPieces + 16 || vocab_size > (int64_t{1} << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat("a synthetic tokenizer needs a vocabulary of ",
                     kFixedPieces + 16, " to 2^20 pieces, got ", vocab_size));
  }
  sp_bridge::TrainOptions options;
  options.vocab_size = static_cast<int>(vocab_size);
  const int64_t learned = std::min(kLearnedPieces, vocab_size - kFixedPieces);
  for (int64_t i = 0; i < vocab_size - kFixedPieces - learned; ++i) {
    options.user_defined_symbols.push_back(absl::StrCat("<extra_", i, ">"));
  }
  std::string model, error;
  if (!sp_bridge::TrainBpe(TokenizerCorpus(), options, &model, &error)) {
    return absl::InternalError(absl::StrCat("training the tokenizer: ", error));
  }
  return model;
}

absl::Status WriteSyntheticCheckpoint(const ModelConfig& config,
                                      const SyntheticOptions& options,
                                      const std::string& dir) {
  if (options.dtype != DType::kF32 && options.dtype != DType::kBf16 &&
      options.dtype != DType::kF16) {
    return absl::InvalidArgumentError("weights must be f32, bf16 or f16");
  }
  ModelConfig c = config;
  c.torch_dtype = options.dtype;
  c.fp8.reset();
  const std::vector<ExpectedTensor> expected = ExpectedTensors(c);
  std::vector<TensorSource> sources;
  for (const ExpectedTensor& t : expected) {
    sources.push_back({{t.name, options.dtype, t.shape},
                       [&c, &options, &t](SafetensorsWriter& w) {
                         return WriteTensorData(w, t, InitFor(c, t),
                                                options.dtype, options.seed);
                       }});
  }
  OCTET_RETURN_IF_ERROR(
      WriteCheckpointTensors(dir, sources, options.shard_bytes));
  OCTET_RETURN_IF_ERROR(WriteTextFile((fs::path(dir) / "config.json").string(),
                                      ModelConfigToJson(c)));
  if (options.tokenizer) {
    OCTET_ASSIGN_OR_RETURN(const std::string tok,
                           TrainSyntheticTokenizer(c.vocab_size));
    OCTET_RETURN_IF_ERROR(
        WriteTextFile((fs::path(dir) / "tokenizer.model").string(), tok));
  }
  return absl::OkStatus();
}

}  // namespace octet
