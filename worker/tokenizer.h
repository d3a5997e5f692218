// Text <-> token ids through a SentencePiece tokenizer.model (Llama 2,
// Mistral). Optional: every API that takes text also takes token ids, so a
// checkpoint without a tokenizer still serves id-in, id-out requests.
// Immutable after Load; thread-safe.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace octet {

namespace sp_bridge {
class Processor;
}

class Tokenizer {
 public:
  // Loads DIR/tokenizer.model; NotFound if there is none.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Load(
      const std::string& dir);
  // From the bytes of a tokenizer.model; `what` names it in errors.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromSerialized(
      const std::string& serialized, const std::string& what);
  ~Tokenizer();

  // Token ids of `text`, with the BOS id first when `add_bos` (and the model
  // has one).
  std::vector<int64_t> Encode(const std::string& text, bool add_bos) const;

  // Text of `ids`. Ids the tokenizer does not know (a model vocabulary can be
  // padded beyond the tokenizer's) become U+FFFD; control ids (BOS, EOS)
  // become nothing.
  std::string Decode(absl::Span<const int64_t> ids) const;

  int64_t vocab_size() const;
  int64_t bos_id() const;  // -1 when none
  int64_t eos_id() const;

 private:
  explicit Tokenizer(std::unique_ptr<sp_bridge::Processor> p);
  std::unique_ptr<sp_bridge::Processor> processor_;
};

}  // namespace octet
