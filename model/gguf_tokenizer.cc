// A GGUF file's tokenizer as tokenizer.json or tokenizer.model
// (gguf_tokenizer.h says which). The conventions follow transformers' GGUF
// reader (which the oracle test runs) and llama.cpp's llama-vocab.cpp
// (which wrote the files).
#include "model/gguf_tokenizer.h"

#include <cmath>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "model/bpe_tokenizer.h"
#include "model/chat_template.h"
#include "model/sentencepiece_model.pb.h"
#include "nlohmann/json.hpp"

namespace octet {
namespace {

using Json = nlohmann::json;

// llama.cpp's token types (tokenizer.ggml.token_type).
constexpr int64_t kControl = 3;
constexpr int64_t kUserDefined = 4;

// Qwen2's split pattern: Llama 3's with single digits.
constexpr char kQwen2SplitPattern[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

Json SplitStep(const std::string& regex) {
  return {{"type", "Split"},
          {"pattern", {{"Regex", regex}}},
          {"behavior", "Isolated"},
          {"invert", false}};
}

Json ByteLevelStep(bool use_regex) {
  return {{"type", "ByteLevel"},
          {"add_prefix_space", false},
          {"trim_offsets", false},
          {"use_regex", use_regex}};
}

// The pre-tokenizer `tokenizer.ggml.pre` names (llama.cpp's
// LLAMA_VOCAB_PRE_TYPE_* split patterns), or an error naming it.
absl::StatusOr<Json> PreTokenizerFor(const std::string& pre,
                                     const std::string& path) {
  std::vector<Json> steps;
  if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3") {
    steps = {SplitStep(kLlama3SplitPattern), ByteLevelStep(false)};
  } else if (pre == "qwen2") {
    steps = {SplitStep(kQwen2SplitPattern), ByteLevelStep(false)};
  } else if (pre == "smollm") {  // single digits, then GPT-2's split
    steps = {SplitStep("\\p{N}"), ByteLevelStep(true)};
  } else if (pre == "gpt-2" || pre == "gpt2") {
    steps = {ByteLevelStep(true)};
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": tokenizer.ggml.pre is '", pre,
        "'; octet knows the pre-tokenizers smollm, llama-bpe, qwen2 and "
        "gpt-2"));
  }
  return Json{{"type", "Sequence"}, {"pretokenizers", steps}};
}

// GPT-2's byte alphabet: the printable character each byte is written as.
const std::set<std::string>& ByteAlphabet() {
  static const std::set<std::string>* alphabet = [] {
    auto* s = new std::set<std::string>();
    for (int b = 0; b < 256; ++b) {
      s->insert(ToByteLevelChars(std::string(1, static_cast<char>(b))));
    }
    return s;
  }();
  return *alphabet;
}

// Whether every character of `token` (valid UTF-8) is in the byte alphabet,
// as a byte-level vocabulary spells its tokens.
bool SpelledInByteAlphabet(const std::string& token) {
  for (size_t i = 0; i < token.size();) {
    const unsigned char c = token[i];
    const size_t n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    if (!ByteAlphabet().contains(token.substr(i, n))) return false;
    i += n;
  }
  return true;
}

// The post-processor: BOS before (add_bos_token) and EOS after
// (add_eos_token), as llama.cpp adds them; null when neither.
Json PostProcessorFor(const GgufFile& f,
                      const std::vector<std::string>& tokens) {
  Json single = Json::array(), specials = Json::object();
  auto special = [&](const char* flag, const char* id_key, bool before) {
    const absl::StatusOr<uint64_t> id = f.GetUint(id_key);
    if (!f.GetBool(flag).value_or(false) || !id.ok() || *id >= tokens.size()) {
      return;
    }
    const std::string& t = tokens[*id];
    Json item = {{"SpecialToken", {{"id", t}, {"type_id", 0}}}};
    if (before) {
      single.insert(single.begin(), item);
    } else {
      single.push_back(item);
    }
    specials[t] = {{"id", t}, {"ids", {*id}}, {"tokens", {t}}};
  };
  single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
  special("tokenizer.ggml.add_bos_token", "tokenizer.ggml.bos_token_id", true);
  special("tokenizer.ggml.add_eos_token", "tokenizer.ggml.eos_token_id", false);
  if (specials.empty()) return Json();
  return {{"type", "TemplateProcessing"},
          {"single", single},
          {"pair", single},
          {"special_tokens", specials}};
}

// The BPE model: vocabulary (respelled in the byte alphabet where the file
// spells a token otherwise, as transformers does) and merges.
absl::StatusOr<Json> BpeModelFor(const GgufFile& f,
                                 const std::vector<std::string>& tokens) {
  Json vocab = Json::object();
  for (size_t id = 0; id < tokens.size(); ++id) {
    const std::string& t = tokens[id];
    if (t.empty() || Utf8Lossy(t) != t) {
      return absl::InvalidArgumentError(absl::StrCat(
          f.path(), ": tokenizer.ggml.tokens[", id,
          "] is empty or not valid UTF-8"));
    }
    vocab[SpelledInByteAlphabet(t) ? t : ToByteLevelChars(t)] = id;
  }
  OCTET_ASSIGN_OR_RETURN(const std::vector<std::string>* merges,
                         f.GetStrings("tokenizer.ggml.merges"));
  for (size_t k = 0; k < merges->size(); ++k) {
    if (Utf8Lossy((*merges)[k]) != (*merges)[k]) {
      return absl::InvalidArgumentError(absl::StrCat(
          f.path(), ": tokenizer.ggml.merges[", k, "] is not valid UTF-8"));
    }
  }
  return Json{{"type", "BPE"},           {"vocab", vocab},
              {"merges", *merges},       {"byte_fallback", false},
              {"ignore_merges", false}};
}

// CONTROL tokens as special added tokens, USER_DEFINED as plain ones (each
// only when spelled in the byte alphabet: transformers skips the others).
absl::StatusOr<Json> AddedTokensFor(const GgufFile& f,
                                    const std::vector<std::string>& tokens) {
  Json added = Json::array();
  if (f.FindValue("tokenizer.ggml.token_type") == nullptr) return added;
  OCTET_ASSIGN_OR_RETURN(const std::vector<int64_t>* types,
                         f.GetInts("tokenizer.ggml.token_type"));
  if (types->size() != tokens.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        f.path(), ": tokenizer.ggml.token_type has ", types->size(),
        " entries for ", tokens.size(), " tokens"));
  }
  for (size_t id = 0; id < tokens.size(); ++id) {
    const int64_t type = (*types)[id];
    if ((type != kControl && type != kUserDefined) ||
        !SpelledInByteAlphabet(tokens[id])) {
      continue;
    }
    added.push_back({{"id", id},
                     {"content", tokens[id]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", type == kControl}});
  }
  return added;
}

// The byte-level BPE (`gpt2`) as tokenizer.json.
absl::StatusOr<std::string> ByteLevelTokenizerJson(
    const GgufFile& f, const std::vector<std::string>& tokens) {
  const std::string pre = f.GetString("tokenizer.ggml.pre").value_or("");
  OCTET_ASSIGN_OR_RETURN(Json pre_tokenizer, PreTokenizerFor(pre, f.path()));
  OCTET_ASSIGN_OR_RETURN(Json bpe, BpeModelFor(f, tokens));
  OCTET_ASSIGN_OR_RETURN(Json added, AddedTokensFor(f, tokens));
  const Json j = {{"version", "1.0"},
                  {"added_tokens", added},
                  {"normalizer", nullptr},
                  {"pre_tokenizer", pre_tokenizer},
                  {"post_processor", PostProcessorFor(f, tokens)},
                  {"decoder", ByteLevelStep(true)},
                  {"model", bpe}};
  return j.dump();
}

// The pieces of a SentencePiece vocabulary: each token with its score and
// type (llama.cpp's types are SentencePiece's: 1 normal ... 6 byte); sets
// *unk to the one UNKNOWN piece and *bytes to whether there are BYTE ones.
absl::Status AddSentencePieces(const GgufFile& f,
                               const std::vector<std::string>& tokens,
                               spm::ModelProto* m, int64_t* unk, bool* bytes) {
  OCTET_ASSIGN_OR_RETURN(const std::vector<double>* scores,
                         f.GetFloats("tokenizer.ggml.scores"));
  OCTET_ASSIGN_OR_RETURN(const std::vector<int64_t>* types,
                         f.GetInts("tokenizer.ggml.token_type"));
  if (scores->size() != tokens.size() || types->size() != tokens.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(f.path(), ": ", tokens.size(), " tokens, ", scores->size(),
                     " tokenizer.ggml.scores and ", types->size(),
                     " tokenizer.ggml.token_type: they must match"));
  }
  *unk = -1;
  *bytes = false;
  for (size_t id = 0; id < tokens.size(); ++id) {
    const std::string& t = tokens[id];
    const int64_t type = (*types)[id];
    const std::string where = absl::StrCat(f.path(), ": token ", id);
    if (t.empty() || Utf8Lossy(t) != t) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, " is empty or not valid UTF-8"));
    }
    if (type < 1 || type > 6) {  // SentencePiece's Type: NORMAL ... BYTE
      return absl::InvalidArgumentError(
          absl::StrCat(where, " has token_type ", type, " (1 to 6 are known)"));
    }
    const float score = static_cast<float>((*scores)[id]);
    if (!std::isfinite(score)) {  // (a binary64 score may overflow binary32)
      return absl::InvalidArgumentError(
          absl::StrCat(where, " has score ", (*scores)[id]));
    }
    if (type == spm::ModelProto::SentencePiece::UNKNOWN) {
      if (*unk >= 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, " is a second UNKNOWN token (the first is ", *unk, ")"));
      }
      *unk = static_cast<int64_t>(id);
    }
    *bytes |= type == spm::ModelProto::SentencePiece::BYTE;
    spm::ModelProto::SentencePiece* p = m->add_pieces();
    p->set_piece(t);
    p->set_score(score);
    p->set_type(static_cast<spm::ModelProto::SentencePiece::Type>(type));
  }
  if (*unk < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(f.path(),
                     ": no token has token_type 2 (UNKNOWN); SentencePiece "
                     "needs one"));
  }
  return absl::OkStatus();
}

// The flag `key`, or `absent` when the file has none (another type is an
// error naming it).
absl::StatusOr<bool> FlagOr(const GgufFile& f, const char* key, bool absent) {
  if (f.FindValue(key) == nullptr) return absent;
  return f.GetBool(key);
}

// The special token `id_key` names, which SentencePiece finds by its piece
// and counts only if CONTROL: -1 when the file has no such key or it is
// another type (an error when `needed`).
absl::StatusOr<int32_t> SpecialToken(const GgufFile& f, const char* id_key,
                                     bool needed, const spm::ModelProto& m) {
  if (f.FindValue(id_key) == nullptr) return -1;
  OCTET_ASSIGN_OR_RETURN(const uint64_t i, f.GetUint(id_key));
  if (i < static_cast<uint64_t>(m.pieces_size()) &&
      m.pieces(static_cast<int>(i)).type() ==
          spm::ModelProto::SentencePiece::CONTROL) {
    return static_cast<int32_t>(i);
  }
  if (!needed) return -1;
  return absl::InvalidArgumentError(absl::StrCat(
      f.path(), ": ", id_key, " ", i, " is not a CONTROL token of the ",
      m.pieces_size(), " (SentencePiece knows its special tokens so)"));
}

// The SentencePiece BPE (`llama`) as a tokenizer.model.
absl::StatusOr<GgufTokenizerFile> SentencePieceModel(
    const GgufFile& f, const std::vector<std::string>& tokens) {
  OCTET_ASSIGN_OR_RETURN(const bool add_eos,
                         FlagOr(f, "tokenizer.ggml.add_eos_token", false));
  OCTET_ASSIGN_OR_RETURN(const bool add_bos,
                         FlagOr(f, "tokenizer.ggml.add_bos_token", true));
  OCTET_ASSIGN_OR_RETURN(const bool space_prefix,
                         FlagOr(f, "tokenizer.ggml.add_space_prefix", true));
  OCTET_ASSIGN_OR_RETURN(
      const bool remove_extra_whitespaces,
      FlagOr(f, "tokenizer.ggml.remove_extra_whitespaces", false));
  if (add_eos) {
    return absl::InvalidArgumentError(
        absl::StrCat(f.path(),
                     ": tokenizer.ggml.add_eos_token is true; octet's "
                     "SentencePiece tokenizers add no EOS to a prompt"));
  }
  spm::ModelProto m;
  int64_t unk = -1;
  bool bytes = false;
  OCTET_RETURN_IF_ERROR(AddSentencePieces(f, tokens, &m, &unk, &bytes));
  spm::TrainerSpec* t = m.mutable_trainer_spec();
  t->set_model_type(spm::TrainerSpec::BPE);
  t->set_vocab_size(m.pieces_size());
  t->set_byte_fallback(bytes);
  t->set_unk_id(static_cast<int32_t>(unk));
  t->set_unk_piece(tokens[unk]);
  // BOS must be one SentencePiece knows when it is added. An EOS it does
  // not know is no loss: generation stops on the config's EOS ids.
  OCTET_ASSIGN_OR_RETURN(
      const int32_t bos,
      SpecialToken(f, "tokenizer.ggml.bos_token_id", add_bos, m));
  OCTET_ASSIGN_OR_RETURN(
      const int32_t eos,
      SpecialToken(f, "tokenizer.ggml.eos_token_id", /*needed=*/false, m));
  // No such token: the UNKNOWN piece, which SentencePiece reports as none
  // (an empty piece would read as its default, "<s>" or "</s>").
  t->set_bos_id(bos);
  t->set_bos_piece(tokens[bos >= 0 ? bos : unk]);
  t->set_eos_id(eos);
  t->set_eos_piece(tokens[eos >= 0 ? eos : unk]);
  t->set_pad_id(-1);
  spm::NormalizerSpec* n = m.mutable_normalizer_spec();
  n->set_name("identity");
  n->set_add_dummy_prefix(space_prefix);
  n->set_remove_extra_whitespaces(remove_extra_whitespaces);
  n->set_escape_whitespaces(true);
  return GgufTokenizerFile{"tokenizer.model", m.SerializeAsString(), add_bos};
}

}  // namespace

absl::StatusOr<GgufTokenizerFile> GgufTokenizerAsFile(const GgufFile& f) {
  OCTET_ASSIGN_OR_RETURN(const std::string model,
                         f.GetString("tokenizer.ggml.model"));
  if (model != "gpt2" && model != "llama") {
    return absl::InvalidArgumentError(absl::StrCat(
        f.path(), ": tokenizer.ggml.model is '", model,
        "'; octet reads byte-level BPE ('gpt2') and SentencePiece BPE "
        "('llama') tokenizers from GGUF"));
  }
  OCTET_ASSIGN_OR_RETURN(const std::vector<std::string>* tokens,
                         f.GetStrings("tokenizer.ggml.tokens"));
  if (model == "llama") return SentencePieceModel(f, *tokens);
  OCTET_ASSIGN_OR_RETURN(std::string json, ByteLevelTokenizerJson(f, *tokens));
  return GgufTokenizerFile{"tokenizer.json", std::move(json)};
}

absl::StatusOr<std::unique_ptr<Tokenizer>> GgufTokenizer(const GgufFile& f) {
  if (f.FindValue("tokenizer.ggml.model") == nullptr) {
    return std::unique_ptr<Tokenizer>();
  }
  OCTET_ASSIGN_OR_RETURN(const GgufTokenizerFile file, GgufTokenizerAsFile(f));
  const std::string what = absl::StrCat(f.path(), " (tokenizer.ggml)");
  if (file.name == "tokenizer.model") {
    return Tokenizer::FromSerialized(file.bytes, what, file.adds_bos);
  }
  return LoadTokenizerJson(file.bytes, what);
}

absl::StatusOr<std::vector<GgufTokenizerFile>> GgufTokenizerFiles(
    const GgufFile& f) {
  std::vector<GgufTokenizerFile> files;
  nlohmann::ordered_json config = nlohmann::ordered_json::object();
  if (f.FindValue("tokenizer.ggml.model") != nullptr) {
    OCTET_ASSIGN_OR_RETURN(GgufTokenizerFile tokenizer, GgufTokenizerAsFile(f));
    if (tokenizer.name == "tokenizer.model") {
      config["add_bos_token"] = tokenizer.adds_bos;
    }
    files.push_back(std::move(tokenizer));
  }
  OCTET_ASSIGN_OR_RETURN(const std::optional<ChatTemplateSource> chat,
                         ReadGgufChatTemplate(f, f.path()));
  if (chat.has_value()) {
    for (const auto& [key, text] : {std::pair<const char*, const std::string*>{
                                        "chat_template", &chat->text},
                                    {"bos_token", &chat->bos_token},
                                    {"eos_token", &chat->eos_token}}) {
      if (Utf8Lossy(*text) != *text) {
        return absl::InvalidArgumentError(absl::StrCat(
            f.path(), ": the chat template's ", key, " is not valid UTF-8"));
      }
      if (!text->empty()) config[key] = *text;
    }
  }
  if (!config.empty()) {
    files.push_back({"tokenizer_config.json", config.dump(2) + "\n"});
  }
  return files;
}

std::string GgufChatTemplate(const GgufFile& f) {
  return f.GetString("tokenizer.chat_template").value_or("");
}

}  // namespace octet
