// Text <-> token ids: a SentencePiece tokenizer.model (Llama 2, Mistral) or
// a Hugging Face tokenizer.json with byte-level BPE (Llama 3, Qwen2:
// model/bpe_tokenizer.h), whichever the checkpoint has (tokenizer.model
// first). Optional: every API that takes text also takes token ids, so a
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

class Tokenizer {
 public:
  // Loads DIR/tokenizer.model (adding BOS unless DIR/tokenizer_config.json
  // says "add_bos_token": false; a tokenizer_config.json that is not a JSON
  // object, or whose add_bos_token is not a bool, is an error), else
  // DIR/tokenizer.json (whose post-processor decides BOS); NotFound if
  // there is neither.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> Load(
      const std::string& dir);
  // From the bytes of a SentencePiece tokenizer.model; `what` names it in
  // errors. `adds_bos`: whether Encode's add_bos puts the BOS id first.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromSerialized(
      const std::string& serialized, const std::string& what,
      bool adds_bos = true);
  virtual ~Tokenizer() = default;

  // Token ids of `text`. With `add_bos`, the model's special tokens too:
  // SentencePiece's BOS id first (when it has one and adds it);
  // tokenizer.json's post-processor template (Llama 3's <|begin_of_text|>;
  // none for Qwen2).
  virtual std::vector<int64_t> Encode(const std::string& text,
                                      bool add_bos) const = 0;

  // Text of `ids`. Ids the tokenizer does not know (a model vocabulary can be
  // padded beyond the tokenizer's) become U+FFFD; control and special ids
  // (BOS, EOS, <|eot_id|>) become nothing.
  virtual std::string Decode(absl::Span<const int64_t> ids) const = 0;

  // One more than the largest id it can produce.
  virtual int64_t vocab_size() const = 0;
  virtual int64_t bos_id() const = 0;  // -1 when none
  virtual int64_t eos_id() const = 0;  // -1 when none
  // The most bytes of text one token stands for: a text of N bytes has at
  // least N / max_token_bytes() tokens, known without encoding it.
  int64_t max_token_bytes() const { return max_token_bytes_; }

 protected:
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
