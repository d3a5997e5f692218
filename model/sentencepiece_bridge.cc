// The SentencePiece module (liboctet_sentencepiece.so): the only code that
// includes SentencePiece's headers or links its library. It runs in a link
// namespace of its own, with its own libc and libstdc++
// (sentencepiece_loader.cc), so it speaks only the C interface of
// sentencepiece_abi.h: results leave through the caller's sinks, the
// processors it makes are freed here, and no exception leaves an entry point.
// See sentencepiece_bridge.h for why it is a module of its own, and why no
// abseil header may be included here.
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <exception>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "model/sentencepiece_abi.h"

struct OctetSpProcessor {
  sentencepiece::SentencePieceProcessor sp;
};

namespace {

std::string ToString(OctetSpString s) { return std::string(s.data, s.size); }

void Send(OctetSpBytesSink sink, void* ctx, const std::string& bytes) {
  sink(ctx, bytes.data(), bytes.size());
}

// Runs `body` (which returns 1 or 0); an exception becomes an error.
template <typename Body>
int Guarded(OctetSpBytesSink error, void* ctx, Body body) {
  try {
    return body();
  } catch (const std::exception& e) {
    Send(error, ctx, std::string("SentencePiece threw: ") + e.what());
  } catch (...) {
    Send(error, ctx, "SentencePiece threw an unknown exception");
  }
  return 0;
}

// Sends a failed status to `error`; 1 when `status` is ok.
int Report(const sentencepiece::util::Status& status, OctetSpBytesSink error,
           void* ctx) {
  if (status.ok()) return 1;
  Send(error, ctx, status.ToString());
  return 0;
}

OctetSpProcessor* Load(OctetSpString serialized, OctetSpBytesSink error,
                       void* ctx) {
  OctetSpProcessor* p = nullptr;
  Guarded(error, ctx, [&] {
    auto loaded = std::make_unique<OctetSpProcessor>();
    if (!Report(loaded->sp.LoadFromSerializedProto(ToString(serialized)), error,
                ctx)) {
      return 0;
    }
    p = loaded.release();
    return 1;
  });
  return p;
}

void Destroy(OctetSpProcessor* p) { delete p; }

int Encode(const OctetSpProcessor* p, OctetSpString text, OctetSpIdsSink sink,
           OctetSpBytesSink error, void* ctx) {
  return Guarded(error, ctx, [&] {
    std::vector<int> ids;
    if (!Report(p->sp.Encode(ToString(text), &ids), error, ctx)) return 0;
    sink(ctx, ids.data(), ids.size());
    return 1;
  });
}

int Decode(const OctetSpProcessor* p, const int* ids, size_t count,
           OctetSpBytesSink sink, OctetSpBytesSink error, void* ctx) {
  return Guarded(error, ctx, [&] {
    std::string text;
    if (!Report(p->sp.Decode(std::vector<int>(ids, ids + count), &text), error,
                ctx)) {
      return 0;
    }
    Send(sink, ctx, text);
    return 1;
  });
}

int PieceSize(const OctetSpProcessor* p) { return p->sp.GetPieceSize(); }
int BosId(const OctetSpProcessor* p) { return p->sp.bos_id(); }
int EosId(const OctetSpProcessor* p) { return p->sp.eos_id(); }

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

// The trainer's flags for a Llama-style BPE model (sentencepiece_bridge.h).
std::unordered_map<std::string, std::string> TrainerArgs(
    const OctetSpTrainArgs& args) {
  std::string symbols;
  for (size_t i = 0; i < args.user_defined_symbol_count; ++i) {
    if (!symbols.empty()) symbols += ',';
    symbols += ToString(args.user_defined_symbols[i]);
  }
  return {
      {"model_type", "bpe"},
      {"vocab_size", std::to_string(args.vocab_size)},
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
}

int TrainBpe(const OctetSpTrainArgs* args, OctetSpBytesSink model,
             OctetSpBytesSink error, void* ctx) {
  return Guarded(error, ctx, [&] {
    std::vector<std::string> sentences;
    sentences.reserve(args->sentence_count);
    for (size_t i = 0; i < args->sentence_count; ++i) {
      sentences.push_back(ToString(args->sentences[i]));
    }
    VectorIterator it(sentences);
    std::string serialized;
    if (!Report(sentencepiece::SentencePieceTrainer::Train(TrainerArgs(*args),
                                                           &it, &serialized),
                error, ctx)) {
      return 0;
    }
    Send(model, ctx, serialized);
    return 1;
  });
}

constexpr OctetSpApi kApi = {
    .version = OCTET_SP_ABI_VERSION,
    .load = Load,
    .destroy = Destroy,
    .encode = Encode,
    .decode = Decode,
    .piece_size = PieceSize,
    .bos_id = BosId,
    .eos_id = EosId,
    .train_bpe = TrainBpe,
};

}  // namespace

extern "C" __attribute__((visibility("default"))) const OctetSpApi*
OctetSentencePieceApi(void) {
  return &kApi;
}
