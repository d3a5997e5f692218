// The tokenizer a GGUF file describes in its metadata (tokenizer.ggml.*),
// as one of octet's tokenizers.
//
// `tokenizer.ggml.model = gpt2` (byte-level BPE: Llama 3, Qwen2, SmolLM)
// becomes the tokenizer.json that Hugging Face's tokenizers would hold for
// it -- the vocabulary and merges from the file; tokens the file marks
// CONTROL as special added tokens, USER_DEFINED as plain ones; the split
// pattern that `tokenizer.ggml.pre` names (llama.cpp's table: smollm,
// llama-bpe, qwen2 ...) -- read by model/bpe_tokenizer.h. Other models
// (`llama`'s SentencePiece scores, ...) and pre-tokenizers octet does not
// know are errors naming them.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "model/gguf.h"
#include "model/tokenizer.h"

namespace octet {

// The tokenizer.json text for `file`'s tokenizer (what GgufTokenizer
// loads; `octet tokenize` and the tests read it too).
absl::StatusOr<std::string> GgufTokenizerJson(const GgufFile& file);

// The tokenizer of `file`: null when its metadata has none
// (tokenizer.ggml.model absent), an error when it cannot be built.
absl::StatusOr<std::unique_ptr<Tokenizer>> GgufTokenizer(const GgufFile& file);

// tokenizer.chat_template, or "" when it has none (for the chat API).
std::string GgufChatTemplate(const GgufFile& file);

}  // namespace octet
