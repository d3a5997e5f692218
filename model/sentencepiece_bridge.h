// Internal: SentencePiece behind a std-only interface, for the tokenizer
// and the synthetic checkpoints. SentencePiece itself lives in a module of
// its own (liboctet_sentencepiece.so, built from sentencepiece_bridge.cc),
// loaded at run time into a link namespace of its own
// (sentencepiece_loader.cc) and reached through a plain C interface
// (sentencepiece_abi.h).
//
// Why a module. Debian's libsentencepiece carries and exports its own copy
// of protobuf (3.14, "builtin_pb"), whose symbols clash with the system
// protobuf (3.21) that gRPC links: in one symbol scope SentencePiece's
// generated code binds to the wrong protobuf and aborts at start. And
// sentencepiece_processor.h declares `namespace absl { using
// std::string_view; }`, which collides with abseil's absl::string_view in any
// file that includes both, so model/tokenizer.h (absl-based) builds on this
// interface instead.
//
// Why its own link namespace (dlmopen with LM_ID_NEWLM) rather than
// dlopen(RTLD_LOCAL | RTLD_DEEPBIND), as it once was: DEEPBIND makes the
// module and its libraries resolve to their own symbols first, which keeps
// SentencePiece on its protobuf, but the sanitizer runtimes refuse it (they
// interpose malloc and friends, and a deep-bound library would bypass them),
// so ASan and TSan builds died at the first tokenizer. In a namespace of its
// own the module sees only its own libraries, so it keeps its protobuf
// without DEEPBIND; the price is that it also has its own libc and
// libstdc++, hence the C interface where nothing allocated on one side is
// freed on the other. The module is never built with sanitizers: no
// sanitizer runtime is loaded in its namespace.
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

}  // namespace octet::sp_bridge
