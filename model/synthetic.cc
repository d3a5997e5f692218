#include "model/synthetic.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <utility>
#include <variant>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/bf16.h"
#include "base/f16.h"
#include "base/status_macros.h"
#include "model/bpe_tokenizer.h"
#include "model/checkpoint.h"
#include "model/checkpoint_writer.h"
#include "model/safetensors.h"
#include "model/sentencepiece_bridge.h"
#include "model/tokenizer_corpus.h"
#include "nlohmann/json.hpp"

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
  using L = LayerTensor;
  const L* part = std::get_if<L>(&t.role);
  const auto is = [part](L which) { return part != nullptr && *part == which; };
  // Biases (Qwen2's q/k/v) of the order of the projections' outputs.
  if (is(L::kQBias) || is(L::kKBias) || is(L::kVBias)) return {0.0f, 0.5f};
  if (t.shape.size() == 1) return {1.0f, 0.05f};  // RMSNorm weights
  const float fan_in = static_cast<float>(t.shape[1]);
  if (t.role == decltype(t.role){ModelTensor::kEmbedding}) {
    // Tied: the same matrix makes the logits, which must stay of order one.
    return {0.0f, c.tie_word_embeddings ? 1.0f / std::sqrt(fan_in) : 1.0f};
  }
  float s = 1.0f / std::sqrt(fan_in);
  if (is(L::kO) || is(L::kDown)) {
    s /= std::sqrt(2.0f * static_cast<float>(c.num_layers));
  }
  // Parts of one fused projection differ in scale, as in trained models (so
  // that FP8 loading meets parts with different weight_scales).
  if (is(L::kK)) s *= 0.8f;
  if (is(L::kV)) s *= 1.25f;
  if (is(L::kUp)) s *= 0.9f;
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
  return {"tiny",       "tiny-mistral", "tiny-qwen2", "tiny-qwen3",
          "tiny-smollm", "llama-1b",    "mistral-7b"};
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
  if (name == "tiny-qwen2") {  // q/k/v biases
    ModelConfig c = Base("Qwen2ForCausalLM", 64, 2, 4, 2, 16, 192, 512, 1024);
    c.qkv_bias = true;
    c.rope_theta = 1000000.0;
    c.tie_word_embeddings = true;
    return c;
  }
  if (name == "tiny-qwen3") {  // q/k norms; heads wider than hidden / heads
    ModelConfig c = Base("Qwen3ForCausalLM", 64, 2, 4, 2, 32, 192, 512, 1024);
    c.qk_norm = true;
    c.rope_theta = 1000000.0;
    c.tie_word_embeddings = true;
    return c;
  }
  if (name == "tiny-smollm") {  // SmolLM2's shape: heads split by 3, not 2
    ModelConfig c = Base("LlamaForCausalLM", 96, 2, 3, 1, 32, 192, 384, 1024);
    c.rope_theta = 100000.0;
    c.tie_word_embeddings = true;
    c.rms_norm_eps = 1e-5;
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
      absl::StrCat("unknown preset '", name, "' (",
                   absl::StrJoin(SyntheticPresetNames(), ", "), ")"));
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

namespace {

// The built-in text in pieces, as Llama 3's split regex roughly cuts it
// (a space joins the word after it; digits in threes; punctuation runs),
// each in the byte alphabet, with its count.
std::map<std::string, int64_t> TrainingWords() {
  std::map<std::string, int64_t> words;
  for (const std::string& line : TokenizerCorpus()) {
    size_t i = 0;
    while (i < line.size()) {
      const size_t start = i;
      const auto alpha = [&](size_t k) {
        return k < line.size() && absl::ascii_isalpha(line[k]);
      };
      if (alpha(i) || (line[i] == ' ' && alpha(i + 1))) {
        ++i;
        while (alpha(i)) ++i;
      } else if (absl::ascii_isdigit(line[i])) {
        while (i < line.size() && i - start < 3 && absl::ascii_isdigit(line[i]))
          ++i;
      } else {
        ++i;
        while (i < line.size() && !absl::ascii_isalnum(line[i]) &&
               line[i] != ' ') {
          ++i;
        }
      }
      ++words[ToByteLevelChars(
          absl::string_view(line).substr(start, i - start))];
    }
  }
  return words;
}

// Up to `count` merges learned from `words`: each time the most frequent
// adjacent pair (seen at least twice; the smallest pair among equals).
std::vector<std::pair<std::string, std::string>> LearnMerges(
    const std::map<std::string, int64_t>& words, int64_t count) {
  std::vector<std::pair<std::vector<std::string>, int64_t>> split;
  for (const auto& [word, n] : words) {
    std::vector<std::string> symbols;
    for (size_t i = 0; i < word.size();) {  // one character each
      size_t len = 1;
      while (i + len < word.size() &&
             (static_cast<uint8_t>(word[i + len]) & 0xC0) == 0x80) {
        ++len;
      }
      symbols.push_back(word.substr(i, len));
      i += len;
    }
    split.emplace_back(std::move(symbols), n);
  }
  std::vector<std::pair<std::string, std::string>> merges;
  while (static_cast<int64_t>(merges.size()) < count) {
    std::map<std::pair<std::string, std::string>, int64_t> pairs;
    for (const auto& [symbols, n] : split) {
      for (size_t k = 0; k + 1 < symbols.size(); ++k) {
        pairs[{symbols[k], symbols[k + 1]}] += n;
      }
    }
    const auto best = std::max_element(
        pairs.begin(), pairs.end(),
        [](const auto& a, const auto& b) { return a.second < b.second; });
    if (best == pairs.end() || best->second < 2) break;
    const auto [left, right] = best->first;
    merges.push_back(best->first);
    for (auto& [symbols, n] : split) {
      std::vector<std::string> merged;
      for (size_t k = 0; k < symbols.size(); ++k) {
        if (k + 1 < symbols.size() && symbols[k] == left &&
            symbols[k + 1] == right) {
          merged.push_back(left + right);
          ++k;
        } else {
          merged.push_back(symbols[k]);
        }
      }
      symbols = std::move(merged);
    }
  }
  return merges;
}

using Json = nlohmann::ordered_json;

// Llama 3's pre-tokenizer: its split regex, then bytes as characters.
Json PreTokenizerJson() {
  Json split = {{"type", "Split"},
                {"pattern", {{"Regex", std::string(kLlama3SplitPattern)}}},
                {"behavior", "Isolated"},
                {"invert", false}};
  Json byte_level = {{"type", "ByteLevel"},
                     {"add_prefix_space", false},
                     {"trim_offsets", true},
                     {"use_regex", false}};
  return {{"type", "Sequence"},
          {"pretokenizers", Json::array({split, byte_level})}};
}

// A template that puts <|begin_of_text|> (id `bos_id`) before each text.
Json PostProcessorJson(int64_t bos_id) {
  Json bos_special = {{"id", "<|begin_of_text|>"},
                      {"ids", Json::array({bos_id})},
                      {"tokens", Json::array({"<|begin_of_text|>"})}};
  Json post = {{"type", "TemplateProcessing"}};
  const auto bos = [](int type) {
    return Json{
        {"SpecialToken", {{"id", "<|begin_of_text|>"}, {"type_id", type}}}};
  };
  const auto sequence = [](const char* id, int type) {
    return Json{{"Sequence", {{"id", id}, {"type_id", type}}}};
  };
  post["single"] = Json::array({bos(0), sequence("A", 0)});
  post["pair"] =
      Json::array({bos(0), sequence("A", 0), bos(1), sequence("B", 1)});
  post["special_tokens"] = {{"<|begin_of_text|>", bos_special}};
  return post;
}

// The three special tokens, ids from `first_id` on.
Json AddedTokensJson(int64_t first_id) {
  Json added = Json::array();
  for (const char* special :
       {"<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"}) {
    added.push_back({{"id", first_id++},
                     {"content", special},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", true}});
  }
  return added;
}

}  // namespace

absl::StatusOr<SyntheticTokenizerJson> TrainSyntheticTokenizerJson(
    int64_t vocab_size) {
  constexpr int64_t kBytes = 256, kSpecials = 3;
  if (vocab_size < kBytes + kSpecials + 16 || vocab_size > (int64_t{1} << 20)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a synthetic tokenizer needs a vocabulary of ", kBytes + kSpecials + 16,
        " to 2^20 ids, got ", vocab_size));
  }
  Json vocab = Json::object();
  int64_t next = 0;
  for (int b = 0; b < 256; ++b) {
    vocab[ToByteLevelChars(std::string(1, static_cast<char>(b)))] = next++;
  }
  const int64_t base = vocab_size - kSpecials;  // ids below: the vocabulary
  Json merges = Json::array();
  for (const auto& [left, right] :
       LearnMerges(TrainingWords(), std::min(kLearnedPieces, base - kBytes))) {
    merges.push_back(Json::array({left, right}));
    if (!vocab.contains(left + right)) vocab[left + right] = next++;
  }
  for (int64_t i = 0; next < base; ++i) {  // fillers no merge makes
    const std::string filler = absl::StrCat("<extra_", i, ">");
    if (!vocab.contains(filler)) vocab[filler] = next++;
  }
  SyntheticTokenizerJson out;
  out.bos_id = base;
  out.eos_ids = {base + 1, base + 2};
  Json j;
  j["version"] = "1.0";
  j["added_tokens"] = AddedTokensJson(base);
  j["normalizer"] = nullptr;
  j["pre_tokenizer"] = PreTokenizerJson();
  j["post_processor"] = PostProcessorJson(out.bos_id);
  // Every field `tokenizers` itself writes, which it needs to read it.
  j["decoder"] = {{"type", "ByteLevel"},
                  {"add_prefix_space", true},
                  {"trim_offsets", true},
                  {"use_regex", true}};
  j["model"] = {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"ignore_merges", true},
                {"vocab", vocab},
                {"merges", merges}};
  out.json = j.dump(1);
  return out;
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
  using Tok = SyntheticOptions::Tokenizer;
  if (options.tokenizer == Tok::kSentencePiece) {
    OCTET_ASSIGN_OR_RETURN(const std::string tok,
                           TrainSyntheticTokenizer(c.vocab_size));
    OCTET_RETURN_IF_ERROR(
        WriteTextFile((fs::path(dir) / "tokenizer.model").string(), tok));
  } else if (options.tokenizer == Tok::kJson) {
    OCTET_ASSIGN_OR_RETURN(const SyntheticTokenizerJson tok,
                           TrainSyntheticTokenizerJson(c.vocab_size));
    OCTET_RETURN_IF_ERROR(
        WriteTextFile((fs::path(dir) / "tokenizer.json").string(), tok.json));
    c.bos_token_id = tok.bos_id;  // its special tokens, as Llama 3's
    c.eos_token_ids = tok.eos_ids;
  }
  return WriteTextFile((fs::path(dir) / "config.json").string(),
                       ModelConfigToJson(c));
}

}  // namespace octet
