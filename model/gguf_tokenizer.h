// The tokenizer a GGUF file describes in its metadata (tokenizer.ggml.*),
// as one of octet's tokenizers.
//
// `tokenizer.ggml.model = gpt2` (byte-level BPE: Llama 3, Qwen2, SmolLM)
// becomes the tokenizer.json that Hugging Face's tokenizers would hold for
// it -- the vocabulary and merges from the file; tokens the file marks
// CONTROL as special added tokens, USER_DEFINED as plain ones; the split
// pattern that `tokenizer.ggml.pre` names (llama.cpp's table: smollm,
// llama-bpe, qwen2 ...) -- read by model/bpe_tokenizer.h.
//
// `tokenizer.ggml.model = llama` (SentencePiece BPE with scores: Llama 2,
// Mistral, TinyLlama) becomes the tokenizer.model SentencePiece would hold
// for it (model/sentencepiece_model.proto) -- each token a piece with its
// score and type (llama.cpp's token types are SentencePiece's), byte
// fallback when the vocabulary has <0xXX> pieces, the space in front of
// the text as `add_space_prefix` says, BOS added as `add_bos_token` says
// -- read by SentencePiece itself, as a checkpoint's own tokenizer.model is.
// Other models and pre-tokenizers octet does not know are errors naming them.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "model/gguf.h"
#include "model/tokenizer.h"

namespace octet {

// `file`'s tokenizer as the file a Hugging Face checkpoint would hold it
// in: what GgufTokenizer loads, and what `octet quantize` writes beside an
// FP8 checkpoint made from a GGUF file.
struct GgufTokenizerFile {
  std::string name;   // "tokenizer.json" (gpt2) or "tokenizer.model" (llama)
  std::string bytes;  // its contents
  // A tokenizer.model's BOS is added (false: tokenizer_config.json's
  // "add_bos_token": false beside it says not to).
  bool adds_bos = true;
};
absl::StatusOr<GgufTokenizerFile> GgufTokenizerAsFile(const GgufFile& file);

// `file`'s tokenizer and chat template as the files a Hugging Face
// directory holds them in (what `octet quantize` writes): GgufTokenizerAsFile's
// when it has a tokenizer, and tokenizer_config.json when there is
// something to say -- add_bos_token (a tokenizer.model's), chat_template
// with its bos_token and eos_token text. Empty when it has neither.
absl::StatusOr<std::vector<GgufTokenizerFile>> GgufTokenizerFiles(
    const GgufFile& file);

// The tokenizer of `file`: null when its metadata has none
// (tokenizer.ggml.model absent), an error when it cannot be built.
absl::StatusOr<std::unique_ptr<Tokenizer>> GgufTokenizer(const GgufFile& file);

// tokenizer.chat_template, or "" when it has none (for the chat API).
std::string GgufChatTemplate(const GgufFile& file);

}  // namespace octet
