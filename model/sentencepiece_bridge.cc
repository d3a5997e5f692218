// The SentencePiece module (liboctet_sentencepiece.so): the only code that
// includes SentencePiece's headers or links its library. See
// sentencepiece_bridge.h for why it is a module of its own, and why no
// abseil header may be included here.
#include "model/sentencepiece_bridge.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <string>
#include <unordered_map>

namespace octet::sp_bridge {
namespace {

class SpProcessor : public Processor {
 public:
  sentencepiece::SentencePieceProcessor sp;

  std::vector<int> Encode(const std::string& text) const override {
    std::vector<int> ids;
    if (!sp.Encode(text, &ids).ok()) ids.clear();
    return ids;
  }
  bool Decode(const std::vector<int>& ids, std::string* text,
              std::string* error) const override {
    const auto status = sp.Decode(ids, text);
    if (!status.ok()) *error = status.ToString();
    return status.ok();
  }
  int PieceSize() const override { return sp.GetPieceSize(); }
  int BosId() const override { return sp.bos_id(); }
  int EosId() const override { return sp.eos_id(); }
};

class VectorIterator : public sentencepiece::SentenceIterator {
 public:
  explicit VectorIterator(const std::vector<std::string>& v) : v_(v) {}
  bool done() const override { return i_ >= v_.size(); }
  void Next() override { ++i_; }
  const std::string& value() const override { return v_[i_]; }
  sentencepiece::util::Status status() const override {
    return sentencepiece::util::Status();
  }

 private:
  const std::vector<std::string>& v_;
  size_t i_ = 0;
};

std::unique_ptr<Processor> Load(const std::string& serialized,
                                std::string* error) {
  auto p = std::make_unique<SpProcessor>();
  const auto status = p->sp.LoadFromSerializedProto(serialized);
  if (!status.ok()) {
    *error = status.ToString();
    return nullptr;
  }
  return p;
}

bool Train(const std::vector<std::string>& sentences,
           const TrainOptions& options, std::string* serialized,
           std::string* error) {
  std::string symbols;
  for (const std::string& s : options.user_defined_symbols) {
    if (!symbols.empty()) symbols += ',';
    symbols += s;
  }
  const std::unordered_map<std::string, std::string> args = {
      {"model_type", "bpe"},
      {"vocab_size", std::to_string(options.vocab_size)},
      {"byte_fallback", "true"},
      {"character_coverage", "1.0"},
      {"split_digits", "true"},
      // As Llama's tokenizer: text kept as is (no NFKC, no whitespace
      // folding), so that decoding returns exactly what was encoded.
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"allow_whitespace_only_pieces", "true"},
      {"unk_id", "0"},
      {"bos_id", "1"},
      {"eos_id", "2"},
      {"pad_id", "-1"},
      {"num_threads", "1"},
      {"minloglevel", "2"},
      {"user_defined_symbols", symbols},
      {"hard_vocab_limit", "true"},
  };
  VectorIterator it(sentences);
  const auto status =
      sentencepiece::SentencePieceTrainer::Train(args, &it, serialized);
  if (!status.ok()) *error = status.ToString();
  return status.ok();
}

constexpr Api kApi = {kApiVersion, &Load, &Train};

}  // namespace
}  // namespace octet::sp_bridge

extern "C" __attribute__((visibility("default"))) const octet::sp_bridge::Api*
OctetSentencePieceApi() {
  return &octet::sp_bridge::kApi;
}
