// Random-weight checkpoints in the Hugging Face layout, for tests,
// benchmarks and the demo (no model hub is reachable): config.json, the
// safetensors weights (sharded with an index above a size), and a real
// tokenizer trained on a small built-in text: SentencePiece's
// tokenizer.model (Llama 2, Mistral) or a byte-level BPE tokenizer.json
// (Llama 3).
//
// Deterministic: the same config, dtype and seed give the same bytes. Each
// tensor draws from its own stream (seeded by the seed and its name), scaled
// so that activations keep a realistic range through every layer:
// projections ~ 1/sqrt(fan_in), the residual branches' output projections
// further by 1/sqrt(2 * layers), norms near 1, logits of order one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/model_config.h"

namespace octet {

// "tiny" (Llama 3 style: GQA, llama3 rope scaling, tied embeddings),
// "tiny-mistral" (sliding window, untied), "tiny-qwen2" (q/k/v biases),
// "tiny-qwen3" (q/k norms, head_dim above hidden / heads), "llama-1b"
// (Llama 3.2 1B's shapes), "mistral-7b" (Mistral 7B v0.1's shapes).
std::vector<std::string> SyntheticPresetNames();
absl::StatusOr<ModelConfig> SyntheticPreset(absl::string_view name);

struct SyntheticOptions {
  DType dtype = DType::kBf16;  // weights: kF32, kBf16 or kF16
  uint64_t seed = 0;
  // Weights above this size are split into shards with an index.
  uint64_t shard_bytes = uint64_t{4} << 30;
  enum class Tokenizer { kSentencePiece, kJson, kNone };
  Tokenizer tokenizer = Tokenizer::kSentencePiece;
};

// Writes the checkpoint into `dir` (created if needed; existing files of
// the same names are replaced).
absl::Status WriteSyntheticCheckpoint(const ModelConfig& config,
                                      const SyntheticOptions& options,
                                      const std::string& dir);

// A byte-level BPE tokenizer.json in Llama 3's layout (its split regex,
// ignore_merges, a BOS template) with exactly `vocab_size` ids: the 256
// byte characters, merges learned on the built-in text, fillers, and three
// special tokens last: <|begin_of_text|> (bos_id), <|end_of_text|> and
// <|eot_id|> (eos_ids).
struct SyntheticTokenizerJson {
  std::string json;
  int64_t bos_id = 0;
  std::vector<int64_t> eos_ids;
};
absl::StatusOr<SyntheticTokenizerJson> TrainSyntheticTokenizerJson(
    int64_t vocab_size);

// A SentencePiece model with exactly `vocab_size` pieces (BPE with byte
// fallback, <unk>=0, <s>=1, </s>=2), serialized.
absl::StatusOr<std::string> TrainSyntheticTokenizer(int64_t vocab_size);

}  // namespace octet
