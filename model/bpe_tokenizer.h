// Byte-level BPE from a Hugging Face tokenizer.json (Llama 3, Qwen2, GPT-2
// and most current checkpoints), as the `tokenizers` library defines it:
//
//   text ─► added tokens matched (leftmost, longest) ─► the rest normalized
//        ─► pre-tokenized (regex Split, ByteLevel: bytes as printable chars)
//        ─► each word merged by BPE rank ─► ids, wrapped by the template
//
// and back: ids ─► token strings ─► ByteLevel chars to bytes ─► UTF-8, each
// invalid sequence one U+FFFD (so a token ending mid-character reads as
// U+FFFD until the next completes it, which TextStream relies on).
//
// The regexes run on PCRE2 (UTF and Unicode properties, JIT-compiled); the
// JSON is read with nlohmann-json; NFC and the other Unicode normal forms
// come from utf8proc. Parts of tokenizer.json octet does not implement
// (another model type, a WordPiece decoder, a Metaspace pre-tokenizer ...)
// are errors naming the part, never silently ignored. The oracle is the
// `tokenizers` package itself: tests/model/hf_tokenizers_oracle.py.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "model/tokenizer.h"

namespace octet {

// A tokenizer from the text of a tokenizer.json; `what` names it in errors.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizerJson(
    const std::string& json, const std::string& what);

// `bytes` in GPT-2's byte alphabet: each byte as the printable character
// byte-level BPE vocabularies write it as (0x20 as 'Ġ', ...).
std::string ToByteLevelChars(absl::string_view bytes);

// Llama 3's pre-tokenizer split pattern.
extern const char kLlama3SplitPattern[];

// `bytes` as UTF-8 with each invalid sequence (its maximal valid prefix, at
// least one byte) replaced by U+FFFD, as Rust's String::from_utf8_lossy.
std::string Utf8Lossy(const std::string& bytes);

}  // namespace octet
