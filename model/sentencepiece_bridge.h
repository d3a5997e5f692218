// Internal: SentencePiece behind a std-only interface, in a module of its
// own (liboctet_sentencepiece.so, built from sentencepiece_bridge.cc) that
// is loaded at run time with its own symbol scope (sentencepiece_loader.cc).
//
// Two reasons. Debian's libsentencepiece carries and exports its own copy of
// protobuf (3.14, "builtin_pb"), whose symbols clash with the system
// protobuf (3.21) that gRPC links: in one symbol scope SentencePiece's
// generated code binds to the wrong protobuf and aborts at start. Loaded
// with RTLD_LOCAL | RTLD_DEEPBIND it resolves to its own copy, and the rest
// of the program never sees it. And sentencepiece_processor.h declares
// `namespace absl { using std::string_view; }`, which collides with
// abseil's absl::string_view in any file that includes both, so
// model/tokenizer.h (absl-based) builds on this interface instead.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace octet::sp_bridge {

class Processor {
 public:
  virtual ~Processor() = default;
  virtual std::vector<int> Encode(const std::string& text) const = 0;
  // False (with *error set) if SentencePiece rejects the ids.
  virtual bool Decode(const std::vector<int>& ids, std::string* text,
                      std::string* error) const = 0;
  virtual int PieceSize() const = 0;
  virtual int BosId() const = 0;  // -1 when the model has none
  virtual int EosId() const = 0;
};

// True when the SentencePiece module could be loaded; false with *error
// saying where it was looked for.
bool ModuleAvailable(std::string* error);

// Loads a serialized model (the bytes of tokenizer.model); nullptr and
// *error on failure.
std::unique_ptr<Processor> LoadProcessor(const std::string& serialized,
                                         std::string* error);

struct TrainOptions {
  int vocab_size = 0;
  // Filler symbols appended so the vocabulary has exactly vocab_size pieces
  // even when the text supports fewer learned pieces.
  std::vector<std::string> user_defined_symbols;
};

// Trains a Llama-style BPE model (byte fallback, identity normalization,
// <unk>=0, <s>=1, </s>=2) on `sentences`, single-threaded so that the result
// is deterministic. Returns the serialized model, or false with *error set.
bool TrainBpe(const std::vector<std::string>& sentences,
              const TrainOptions& options, std::string* serialized,
              std::string* error);

// The module's entry points, as the module exports them (C symbol
// OctetSentencePieceApi). Both sides are built together from this header.
inline constexpr int kApiVersion = 1;
struct Api {
  int version;
  std::unique_ptr<Processor> (*load)(const std::string& serialized,
                                     std::string* error);
  bool (*train)(const std::vector<std::string>& sentences,
                const TrainOptions& options, std::string* serialized,
                std::string* error);
};

}  // namespace octet::sp_bridge
