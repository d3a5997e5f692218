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
#include "model/model_config.h"

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
  // The most bytes of text one token stands for (a word piece's, plus the
  // space SentencePiece strips in front of it): a text of N bytes has at
  // least N / max_token_bytes() tokens, known without encoding it.
  int64_t max_token_bytes() const { return max_token_bytes_; }

 private:
  explicit Tokenizer(std::unique_ptr<sp_bridge::Processor> p);
  std::unique_ptr<sp_bridge::Processor> processor_;
  int64_t max_token_bytes_ = 1;
};

// The tokenizer of the checkpoint in `dir` whose config.json is `config`:
// null when it has none (token ids only), an error when it cannot be read
// or does not fit the model (more pieces than config.vocab_size: ids the
// model cannot embed).
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizerFor(
    const std::string& dir, const ModelConfig& config);

// Turns a stream of generated ids into text pieces to send as they arrive.
// Decoding ids one at a time would split multi-byte characters (byte-fallback
// pieces decode to U+FFFD until the character is complete) and lose the
// leading spaces SentencePiece strips at the start of a decode, so each step
// decodes a short window of recent ids with and without the new ones and
// emits the difference once it no longer ends in U+FFFD. Costs O(window) per
// id, not O(sequence). One per sequence; not thread-safe.
class TextStream {
 public:
  explicit TextStream(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {}
  // The text `id` completes; empty while a character is still incomplete.
  std::string Add(int64_t id);
  // Whatever is still held back (an incomplete character becomes U+FFFD).
  std::string Finish();

 private:
  std::string Pending(bool final);
  const Tokenizer& tokenizer_;
  std::vector<int64_t> ids_;
  size_t prefix_ = 0;  // ids_[prefix_, read_) were emitted; context only
  size_t read_ = 0;    // ids_[read_, end) are not emitted yet
};

}  // namespace octet
