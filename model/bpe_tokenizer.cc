#include "model/bpe_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <queue>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "base/status_macros.h"
#include "nlohmann/json.hpp"

namespace octet {
namespace {

using Json = nlohmann::json;

constexpr char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD

// GPT-2's split, which ByteLevel applies itself when `use_regex` is set.
constexpr char kGpt2Pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|"
    "\\s+(?!\\S)|\\s+";

// ---------------------------------------------------------------- UTF-8

// At text[i] (i < text.size()): the length of the UTF-8 sequence there when
// it is valid
// (`*valid`), else of its maximal invalid prefix, at least 1 byte: what one
// U+FFFD replaces (Unicode's "maximal subpart" practice, as Rust's
// String::from_utf8_lossy).
size_t Utf8SequenceAt(absl::string_view text, size_t i, bool* valid) {
  const auto byte = [&](size_t k) { return static_cast<uint8_t>(text[i + k]); };
  const uint8_t lead = byte(0);
  *valid = lead < 0x80;
  if (*valid) return 1;
  size_t n;                      // the sequence's length
  uint8_t lo = 0x80, hi = 0xBF;  // the second byte's range
  if (lead >= 0xC2 && lead <= 0xDF) {
    n = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    n = 3;
    if (lead == 0xE0) lo = 0xA0;  // no overlong forms
    if (lead == 0xED) hi = 0x9F;  // no surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    n = 4;
    if (lead == 0xF0) lo = 0x90;
    if (lead == 0xF4) hi = 0x8F;  // nothing past U+10FFFF
  } else {
    return 1;
  }
  size_t k = 1;
  if (i + k < text.size() && byte(k) >= lo && byte(k) <= hi) ++k;
  while (k > 1 && k < n && i + k < text.size() && byte(k) >= 0x80 &&
         byte(k) <= 0xBF) {
    ++k;
  }
  *valid = k == n;
  return k;
}

// The length of the valid UTF-8 sequence at text[i], or 0 if it is not one.
size_t ValidSequenceAt(absl::string_view text, size_t i) {
  bool valid = false;
  const size_t n = Utf8SequenceAt(text, i, &valid);
  return valid ? n : 0;
}

// Each byte 0-255 as the printable character GPT-2's byte-level BPE writes
// it as: printable Latin-1 bytes stand for themselves, the others are
// shifted to U+0100 and up. As UTF-8.
struct ByteAlphabet {
  std::string char_of[256];
  absl::flat_hash_map<std::string, uint8_t> byte_of;

  ByteAlphabet() {
    int shifted = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable =
          (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      const int32_t cp = printable ? b : 256 + shifted++;
      uint8_t buf[4];
      const auto n = utf8proc_encode_char(cp, buf);
      char_of[b].assign(reinterpret_cast<char*>(buf), n);
      byte_of[char_of[b]] = static_cast<uint8_t>(b);
    }
  }
};

const ByteAlphabet& Alphabet() {
  static const ByteAlphabet* alphabet = new ByteAlphabet();
  return *alphabet;
}

// ---------------------------------------------------------------- regex

// A compiled PCRE2 pattern (UTF, Unicode properties, JIT when available).
// Each match is bounded (kMatchLimit): a pattern that backtracks without
// end, which a tokenizer.json could hold, ends the splitting of that text
// instead of hanging the server.
class Regex {
 public:
  static constexpr uint32_t kMatchLimit = 10'000'000;

  static absl::StatusOr<std::unique_ptr<Regex>> Compile(
      const std::string& pattern, const std::string& what) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    pcre2_code* code = pcre2_compile(
        reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
        PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
    if (code == nullptr) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error, message, sizeof(message));
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": the regex '", pattern, "' does not compile at ",
                       offset, ": ", reinterpret_cast<char*>(message)));
    }
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // else interpreted
    pcre2_match_context* context = pcre2_match_context_create(nullptr);
    pcre2_set_match_limit(context, kMatchLimit);
    pcre2_set_depth_limit(context, kMatchLimit);
    return std::unique_ptr<Regex>(new Regex(code, context));
  }
  ~Regex() {
    pcre2_match_context_free(context_);
    pcre2_code_free(code_);
  }

  // The [begin, end) byte ranges of the matches in `text` (valid UTF-8),
  // left to right, none empty.
  std::vector<std::pair<size_t, size_t>> Matches(absl::string_view text) const {
    std::vector<std::pair<size_t, size_t>> out;
    pcre2_match_data* data =
        pcre2_match_data_create_from_pattern(code_, nullptr);
    size_t at = 0;
    while (at < text.size()) {
      const int rc =
          pcre2_match(code_, reinterpret_cast<PCRE2_SPTR>(text.data()),
                      text.size(), at, PCRE2_NO_UTF_CHECK, data, context_);
      if (rc < 0) break;  // no more matches, or past the limit
      const PCRE2_SIZE* v = pcre2_get_ovector_pointer(data);
      if (v[1] == v[0]) {  // an empty match: step one character on
        if (v[0] >= text.size()) break;  // at the end: nothing follows
        at = v[0] + std::max<size_t>(1, ValidSequenceAt(text, v[0]));
        continue;
      }
      out.emplace_back(v[0], v[1]);
      at = v[1];
    }
    pcre2_match_data_free(data);
    return out;
  }

 private:
  Regex(pcre2_code* code, pcre2_match_context* context)
      : code_(code), context_(context) {}
  pcre2_code* code_;
  pcre2_match_context* context_;
};

// ---------------------------------------------------------------- the parts

// One step of the normalizer: a Unicode normal form.
enum class NormalForm { kNfc, kNfd, kNfkc, kNfkd };

// One step of the pre-tokenizer.
struct PreTokenizerStep {
  enum Kind { kSplit, kByteLevel } kind = kSplit;
  std::unique_ptr<Regex> regex;   // kSplit with a Regex pattern
  std::string literal;            // kSplit with a String pattern
  bool add_prefix_space = false;  // kByteLevel
  bool use_regex = false;         // kByteLevel: GPT-2's split first
};

// An entry of added_tokens.
struct AddedToken {
  int64_t id = 0;
  std::string content;
  bool special = false;
  bool lstrip = false, rstrip = false, single_word = false;
};

class BpeTokenizer : public Tokenizer {
 public:
  std::vector<int64_t> Encode(const std::string& text,
                              bool add_bos) const override;
  std::string Decode(absl::Span<const int64_t> ids) const override;
  int64_t vocab_size() const override { return vocab_size_; }
  int64_t bos_id() const override { return bos_id_; }
  int64_t eos_id() const override { return -1; }

  // Reading tokenizer.json (each names what it reads in errors).
  absl::Status ReadModel(const Json& model, const std::string& what);
  absl::Status ReadAddedTokens(const Json& added, const std::string& what);
  absl::Status ReadNormalizer(const Json& n, const std::string& what);
  absl::Status ReadPreTokenizer(const Json& p, const std::string& what);
  absl::Status ReadPostProcessor(const Json& p, const std::string& what);
  absl::Status ReadDecoder(const Json& d, const std::string& what);
  // After the Read* calls: the id tables and the bounds.
  absl::Status Finish(const std::string& what);

 private:
  // Appends the ids of `text` (no added tokens in it).
  void EncodeOrdinary(absl::string_view text, std::vector<int64_t>& out) const;
  // Appends the ids of one pre-tokenized word (byte-level characters).
  void EncodeWord(absl::string_view word, std::vector<int64_t>& out) const;
  std::string Normalize(absl::string_view text) const;
  std::vector<std::string> PreTokenize(std::string text) const;
  // The added token that starts at text[i] and is the longest there (and,
  // for a single_word one, stands alone there), or null.
  const AddedToken* AddedTokenAt(absl::string_view text, size_t i) const;

  absl::flat_hash_map<std::string, int64_t> vocab_;
  std::vector<std::string> token_of_;  // id -> token ("" if none)
  // (left id, right id) -> (rank, merged id)
  absl::flat_hash_map<uint64_t, std::pair<int32_t, int64_t>> merges_;
  bool ignore_merges_ = false;
  std::vector<AddedToken> added_;
  absl::flat_hash_map<int64_t, const AddedToken*> added_by_id_;
  std::vector<const AddedToken*> added_by_first_byte_[256];
  std::vector<NormalForm> normalizer_;
  std::vector<PreTokenizerStep> pre_tokenizer_;
  std::vector<int64_t> prefix_ids_, suffix_ids_;  // the template's
  int64_t vocab_size_ = 0;
  int64_t bos_id_ = -1;
};

uint64_t PairKey(int64_t a, int64_t b) {
  return (static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b);
}

absl::Status Unsupported(const std::string& what, const std::string& part,
                         const std::string& detail) {
  return absl::InvalidArgumentError(
      absl::StrCat(what, ": ", part, ": ", detail,
                   " is not supported (octet reads "
                   "byte-level BPE tokenizers: Llama 3, Qwen2, GPT-2)"));
}

std::string TypeOf(const Json& j) {
  auto t = j.find("type");
  return t != j.end() && t->is_string() ? t->get<std::string>() : "";
}

absl::Status BpeTokenizer::ReadModel(const Json& model,
                                     const std::string& what) {
  if (!model.is_object() || TypeOf(model) != "BPE") {
    return Unsupported(what, "model",
                       absl::StrCat("type '", TypeOf(model), "'"));
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (model.contains(key) && !model[key].is_null() &&
        !(model[key].is_string() && model[key].get<std::string>().empty())) {
      return Unsupported(what, "model", key);
    }
  }
  if (model.value("byte_fallback", false)) {
    return Unsupported(what, "model", "byte_fallback");
  }
  ignore_merges_ = model.value("ignore_merges", false);
  const Json& vocab = model.value("vocab", Json());
  if (!vocab.is_object() || vocab.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": model.vocab must be a non-empty object"));
  }
  for (const auto& [token, id] : vocab.items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
        id.get<int64_t>() >= (int64_t{1} << 31)) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": model.vocab: the id of '", token, "' is not in [0, 2^31)"));
    }
    vocab_[token] = id.get<int64_t>();
  }
  const Json& merges = model.value("merges", Json::array());
  if (!merges.is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": model.merges must be an array"));
  }
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const Json& m = merges[rank];
    std::string left, right;
    if (m.is_string()) {  // "a b"
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != s.npos) {
        return absl::InvalidArgumentError(absl::StrCat(
            what, ": model.merges[", rank, "] '", s, "' is not two tokens"));
      }
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() &&
               m[1].is_string()) {  // ["a", "b"]
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": model.merges[", rank, "] is not a pair of tokens"));
    }
    const auto l = vocab_.find(left), r = vocab_.find(right),
               merged = vocab_.find(left + right);
    if (l == vocab_.end() || r == vocab_.end() || merged == vocab_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": model.merges[", rank, "] '", left, " ", right,
                       "' names a token that is not in the vocabulary"));
    }
    // The first (lowest) rank of a pair wins, as in `tokenizers`.
    merges_.try_emplace(PairKey(l->second, r->second),
                        static_cast<int32_t>(rank), merged->second);
  }
  return absl::OkStatus();
}

absl::Status BpeTokenizer::ReadAddedTokens(const Json& added,
                                           const std::string& what) {
  if (added.is_null()) return absl::OkStatus();
  if (!added.is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": added_tokens must be an array"));
  }
  for (const Json& a : added) {
    if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() ||
        a["id"].get<int64_t>() < 0 ||
        a["id"].get<int64_t>() >= (int64_t{1} << 31) ||
        !a.contains("content") || !a["content"].is_string() ||
        a["content"].get<std::string>().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what,
                       ": added_tokens: each needs an id in [0, 2^31) and a "
                       "non-empty content"));
    }
    AddedToken t;
    t.id = a["id"].get<int64_t>();
    t.content = a["content"].get<std::string>();
    t.special = a.value("special", false);
    t.lstrip = a.value("lstrip", false);
    t.rstrip = a.value("rstrip", false);
    t.single_word = a.value("single_word", false);
    if (ValidSequenceAt(t.content, 0) == 0 ||
        Utf8Lossy(t.content) != t.content) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": added token ", t.id, " is not valid UTF-8"));
    }
    added_.push_back(std::move(t));
  }
  return absl::OkStatus();
}

absl::Status BpeTokenizer::ReadNormalizer(const Json& n,
                                          const std::string& what) {
  if (n.is_null()) return absl::OkStatus();
  const std::string type = TypeOf(n);
  if (type == "Sequence") {
    for (const Json& step : n.value("normalizers", Json::array())) {
      OCTET_RETURN_IF_ERROR(ReadNormalizer(step, what));
    }
    return absl::OkStatus();
  }
  static const auto* forms = new absl::flat_hash_map<std::string, NormalForm>{
      {"NFC", NormalForm::kNfc},
      {"NFD", NormalForm::kNfd},
      {"NFKC", NormalForm::kNfkc},
      {"NFKD", NormalForm::kNfkd}};
  const auto f = forms->find(type);
  if (f == forms->end()) {
    return Unsupported(what, "normalizer", absl::StrCat("type '", type, "'"));
  }
  normalizer_.push_back(f->second);
  return absl::OkStatus();
}

absl::Status BpeTokenizer::ReadPreTokenizer(const Json& p,
                                            const std::string& what) {
  if (p.is_null()) return absl::OkStatus();
  const std::string type = TypeOf(p);
  if (type == "Sequence") {
    for (const Json& step : p.value("pretokenizers", Json::array())) {
      OCTET_RETURN_IF_ERROR(ReadPreTokenizer(step, what));
    }
    return absl::OkStatus();
  }
  PreTokenizerStep step;
  if (type == "ByteLevel") {
    step.kind = PreTokenizerStep::kByteLevel;
    step.add_prefix_space = p.value("add_prefix_space", false);
    step.use_regex = p.value("use_regex", true);
    if (step.use_regex) {
      OCTET_ASSIGN_OR_RETURN(step.regex, Regex::Compile(kGpt2Pattern, what));
    }
  } else if (type == "Split") {
    if (p.value("behavior", "") != "Isolated" || p.value("invert", false)) {
      return Unsupported(
          what, "pre_tokenizer Split",
          absl::StrCat("behavior '", p.value("behavior", ""), "'",
                       p.value("invert", false) ? " inverted" : ""));
    }
    const Json& pattern = p.value("pattern", Json());
    if (pattern.contains("Regex") && pattern["Regex"].is_string()) {
      OCTET_ASSIGN_OR_RETURN(
          step.regex,
          Regex::Compile(pattern["Regex"].get<std::string>(), what));
    } else if (pattern.contains("String") && pattern["String"].is_string() &&
               !pattern["String"].get<std::string>().empty()) {
      step.literal = pattern["String"].get<std::string>();
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": pre_tokenizer Split needs a Regex or String pattern"));
    }
  } else {
    return Unsupported(what, "pre_tokenizer",
                       absl::StrCat("type '", type, "'"));
  }
  pre_tokenizer_.push_back(std::move(step));
  return absl::OkStatus();
}

absl::Status BpeTokenizer::ReadPostProcessor(const Json& p,
                                             const std::string& what) {
  if (p.is_null()) return absl::OkStatus();
  const std::string type = TypeOf(p);
  if (type == "Sequence") {
    for (const Json& step : p.value("processors", Json::array())) {
      OCTET_RETURN_IF_ERROR(ReadPostProcessor(step, what));
    }
    return absl::OkStatus();
  }
  if (type == "ByteLevel") return absl::OkStatus();  // offsets only
  if (type != "TemplateProcessing") {
    return Unsupported(what, "post_processor",
                       absl::StrCat("type '", type, "'"));
  }
  // single: special tokens around one $A; their ids from special_tokens.
  const Json& specials = p.value("special_tokens", Json::object());
  bool after = false;
  for (const Json& item : p.value("single", Json::array())) {
    if (item.contains("Sequence")) {
      after = true;
      continue;
    }
    const Json& s = item.value("SpecialToken", Json());
    const std::string name = s.value("id", "");
    const Json& entry = specials.value(name, Json());
    const Json& ids = entry.value("ids", Json());
    if (!ids.is_array() || ids.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": post_processor: template token '", name,
                       "' has no ids in special_tokens"));
    }
    for (const Json& id : ids) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": post_processor: template token '", name,
                         "' has a bad id"));
      }
      (after ? suffix_ids_ : prefix_ids_).push_back(id.get<int64_t>());
    }
  }
  return absl::OkStatus();
}

absl::Status BpeTokenizer::ReadDecoder(const Json& d, const std::string& what) {
  if (d.is_null()) return absl::OkStatus();  // tokens as they are
  if (TypeOf(d) != "ByteLevel") {
    return Unsupported(what, "decoder", absl::StrCat("type '", TypeOf(d), "'"));
  }
  return absl::OkStatus();
}

absl::Status BpeTokenizer::Finish(const std::string& what) {
  for (const auto& [token, id] : vocab_) {
    vocab_size_ = std::max(vocab_size_, id + 1);
  }
  for (const AddedToken& t : added_) {
    vocab_size_ = std::max(vocab_size_, t.id + 1);
    added_by_id_[t.id] = &t;
    added_by_first_byte_[static_cast<uint8_t>(t.content[0])].push_back(&t);
  }
  for (int64_t id : prefix_ids_) vocab_size_ = std::max(vocab_size_, id + 1);
  for (int64_t id : suffix_ids_) vocab_size_ = std::max(vocab_size_, id + 1);
  // Real vocabularies number their entries densely; ids far past their
  // count would only size the id table (a file claiming id 2^31 - 1 once
  // asked for 64 GB).
  const int64_t entries = static_cast<int64_t>(vocab_.size() + added_.size());
  if (vocab_size_ > 2 * entries + 1024) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": ids reach ", vocab_size_ - 1, " with only ", entries,
        " tokens: a vocabulary's ids must be (nearly) dense"));
  }
  token_of_.assign(vocab_size_, "");
  for (const auto& [token, id] : vocab_) token_of_[id] = token;
  if (!prefix_ids_.empty()) bos_id_ = prefix_ids_.front();
  // A byte-level token is at most as many bytes as characters; an added
  // token its content, but one that strips whitespace has no bound.
  for (const auto& [token, id] : vocab_) {
    max_token_bytes_ =
        std::max<int64_t>(max_token_bytes_, static_cast<int64_t>(token.size()));
  }
  for (const AddedToken& t : added_) {
    max_token_bytes_ =
        t.lstrip || t.rstrip
            ? std::numeric_limits<int32_t>::max()
            : std::max<int64_t>(max_token_bytes_,
                                static_cast<int64_t>(t.content.size()));
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------- encoding

bool IsWordChar(absl::string_view text, size_t i) {
  utf8proc_int32_t cp = 0;
  if (utf8proc_iterate(reinterpret_cast<const uint8_t*>(text.data()) + i,
                       static_cast<utf8proc_ssize_t>(text.size() - i),
                       &cp) <= 0) {
    return false;
  }
  const utf8proc_category_t c = utf8proc_category(cp);
  return c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LL ||
         c == UTF8PROC_CATEGORY_LT || c == UTF8PROC_CATEGORY_LM ||
         c == UTF8PROC_CATEGORY_LO || c == UTF8PROC_CATEGORY_ND || cp == '_';
}

const AddedToken* BpeTokenizer::AddedTokenAt(absl::string_view text,
                                             size_t i) const {
  const AddedToken* best = nullptr;
  for (const AddedToken* t :
       added_by_first_byte_[static_cast<uint8_t>(text[i])]) {
    if (text.compare(i, t->content.size(), t->content) != 0) continue;
    if (best != nullptr && best->content.size() >= t->content.size()) continue;
    if (t->single_word) {   // not inside a word on either side
      size_t previous = i;  // the start of the character before
      while (previous > 0 &&
             (static_cast<uint8_t>(text[--previous]) & 0xC0) == 0x80) {
      }
      const size_t end = i + t->content.size();
      if ((i > 0 && IsWordChar(text, previous)) ||
          (end < text.size() && IsWordChar(text, end))) {
        continue;
      }
    }
    best = t;
  }
  return best;
}

std::string BpeTokenizer::Normalize(absl::string_view text) const {
  std::string s(text);
  for (NormalForm f : normalizer_) {
    const int options =
        UTF8PROC_STABLE |
        (f == NormalForm::kNfc || f == NormalForm::kNfkc ? UTF8PROC_COMPOSE
                                                         : UTF8PROC_DECOMPOSE) |
        (f == NormalForm::kNfkc || f == NormalForm::kNfkd ? UTF8PROC_COMPAT
                                                          : 0);
    utf8proc_uint8_t* out = nullptr;
    const utf8proc_ssize_t n =
        utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                     static_cast<utf8proc_ssize_t>(s.size()), &out,
                     static_cast<utf8proc_option_t>(options));
    if (n >= 0) s.assign(reinterpret_cast<char*>(out), n);
    std::free(out);
  }
  return s;
}

// Splits each piece at the matches of `step`, keeping matches and the gaps
// between them as pieces of their own ("Isolated").
void SplitIsolated(const PreTokenizerStep& step,
                   std::vector<std::string>& pieces) {
  std::vector<std::string> out;
  for (const std::string& piece : pieces) {
    std::vector<std::pair<size_t, size_t>> matches;
    if (step.regex != nullptr) {
      matches = step.regex->Matches(piece);
    } else {
      for (size_t at = piece.find(step.literal); at != std::string::npos;
           at = piece.find(step.literal, at + step.literal.size())) {
        matches.emplace_back(at, at + step.literal.size());
      }
    }
    size_t at = 0;
    for (const auto& [begin, end] : matches) {
      if (begin > at) out.push_back(piece.substr(at, begin - at));
      out.push_back(piece.substr(begin, end - begin));
      at = end;
    }
    if (at < piece.size()) out.push_back(piece.substr(at));
  }
  pieces = std::move(out);
}

std::vector<std::string> BpeTokenizer::PreTokenize(std::string text) const {
  std::vector<std::string> pieces;
  if (!text.empty()) pieces.push_back(std::move(text));
  for (const PreTokenizerStep& step : pre_tokenizer_) {
    if (step.kind == PreTokenizerStep::kByteLevel) {
      if (step.add_prefix_space) {
        for (std::string& p : pieces) {
          if (p[0] != ' ') p = " " + p;
        }
      }
      if (step.use_regex) SplitIsolated(step, pieces);
      for (std::string& p : pieces) p = ToByteLevelChars(p);
    } else {
      SplitIsolated(step, pieces);
    }
  }
  return pieces;
}

void BpeTokenizer::EncodeWord(absl::string_view word,
                              std::vector<int64_t>& out) const {
  if (ignore_merges_) {
    if (auto it = vocab_.find(word); it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  // The word's characters, a doubly linked list merged pair by pair, the
  // lowest rank first (leftmost among equals), as `tokenizers` does.
  struct Symbol {
    int64_t id;
    int prev, next;  // -1 at the ends
  };
  std::vector<Symbol> symbols;
  for (size_t i = 0; i < word.size();) {
    const size_t n = std::max<size_t>(1, ValidSequenceAt(word, i));
    const auto it = vocab_.find(word.substr(i, n));
    i += n;
    if (it == vocab_.end()) continue;  // no unk token: dropped
    const int k = static_cast<int>(symbols.size());
    symbols.push_back({it->second, k - 1, -1});
    if (k > 0) symbols[k - 1].next = k;
  }
  struct Candidate {
    int32_t rank;
    int left;  // position of the pair's left symbol
    int64_t left_id, right_id, merged;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto consider = [&](int left) {
    if (left < 0 || symbols[left].next < 0) return;
    const Symbol& a = symbols[left];
    const Symbol& b = symbols[a.next];
    const auto m = merges_.find(PairKey(a.id, b.id));
    if (m != merges_.end()) {
      queue.push({m->second.first, left, a.id, b.id, m->second.second});
    }
  };
  for (int k = 0; k < static_cast<int>(symbols.size()); ++k) consider(k);
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& a = symbols[c.left];
    // Stale: one side merged away since this pair was queued.
    if (a.id != c.left_id || a.next < 0 || symbols[a.next].id != c.right_id) {
      continue;
    }
    const int right = a.next;
    a.id = c.merged;
    a.next = symbols[right].next;
    if (a.next >= 0) symbols[a.next].prev = c.left;
    symbols[right].id = -1;  // gone
    consider(a.prev);
    consider(c.left);
  }
  for (int k = symbols.empty() ? -1 : 0; k >= 0; k = symbols[k].next) {
    out.push_back(symbols[k].id);
  }
}

void BpeTokenizer::EncodeOrdinary(absl::string_view text,
                                  std::vector<int64_t>& out) const {
  if (text.empty()) return;
  for (const std::string& word : PreTokenize(Normalize(text))) {
    EncodeWord(word, out);
  }
}

bool IsSpaceByte(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' ||
         c == '\f';
}

std::vector<int64_t> BpeTokenizer::Encode(const std::string& raw,
                                          bool add_bos) const {
  const std::string text = Utf8Lossy(raw);
  std::vector<int64_t> out;
  if (add_bos) out = prefix_ids_;
  // Added tokens split the text first; what lies between them is ordinary.
  size_t start = 0;  // of the ordinary text not yet encoded
  for (size_t i = 0; i < text.size();) {
    const AddedToken* t = AddedTokenAt(text, i);
    if (t == nullptr) {
      ++i;
      continue;
    }
    size_t ordinary_end = i, next = i + t->content.size();
    if (t->lstrip) {
      while (ordinary_end > start && IsSpaceByte(text[ordinary_end - 1]))
        --ordinary_end;
    }
    if (t->rstrip) {
      while (next < text.size() && IsSpaceByte(text[next])) ++next;
    }
    EncodeOrdinary(absl::string_view(text).substr(start, ordinary_end - start),
                   out);
    out.push_back(t->id);
    start = i = next;
  }
  EncodeOrdinary(absl::string_view(text).substr(start), out);
  out.insert(out.end(), suffix_ids_.begin(), suffix_ids_.end());
  return out;
}

// ---------------------------------------------------------------- decoding

std::string BpeTokenizer::Decode(absl::Span<const int64_t> ids) const {
  std::string bytes;
  for (int64_t id : ids) {
    if (const auto a = added_by_id_.find(id); a != added_by_id_.end()) {
      if (!a->second->special) bytes += a->second->content;
      continue;
    }
    if (id < 0 || id >= vocab_size_ || token_of_[id].empty()) {
      bytes += kReplacement;
      continue;
    }
    // Each character back to its byte; a token with a character outside
    // the byte alphabet stands for its own UTF-8, as in `tokenizers`.
    const std::string& token = token_of_[id];
    std::string decoded;
    bool byte_level = true;
    for (size_t i = 0; i < token.size() && byte_level;) {
      const size_t n = std::max<size_t>(1, ValidSequenceAt(token, i));
      const auto b = Alphabet().byte_of.find(token.substr(i, n));
      if (b == Alphabet().byte_of.end()) {
        byte_level = false;
      } else {
        decoded += static_cast<char>(b->second);
      }
      i += n;
    }
    bytes += byte_level ? decoded : token;
  }
  return Utf8Lossy(bytes);
}

}  // namespace

const char kLlama3SplitPattern[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

std::string ToByteLevelChars(absl::string_view bytes) {
  std::string out;
  for (unsigned char c : bytes) out += Alphabet().char_of[c];
  return out;
}

std::string Utf8Lossy(const std::string& bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size();) {
    bool valid = false;
    const size_t n = Utf8SequenceAt(bytes, i, &valid);
    if (valid) {
      out.append(bytes, i, n);
    } else {
      out += kReplacement;
    }
    i += n;
  }
  return out;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizerJson(
    const std::string& json, const std::string& what) {
  const Json root = Json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": not a well-formed JSON object"));
  }
  auto t = std::make_unique<BpeTokenizer>();
  try {
    OCTET_RETURN_IF_ERROR(t->ReadModel(root.value("model", Json()), what));
    OCTET_RETURN_IF_ERROR(
        t->ReadAddedTokens(root.value("added_tokens", Json()), what));
    OCTET_RETURN_IF_ERROR(
        t->ReadNormalizer(root.value("normalizer", Json()), what));
    OCTET_RETURN_IF_ERROR(
        t->ReadPreTokenizer(root.value("pre_tokenizer", Json()), what));
    OCTET_RETURN_IF_ERROR(
        t->ReadPostProcessor(root.value("post_processor", Json()), what));
    OCTET_RETURN_IF_ERROR(t->ReadDecoder(root.value("decoder", Json()), what));
  } catch (const Json::exception& e) {  // a field of the wrong JSON type
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": unexpected JSON: ", e.what()));
  }
  OCTET_RETURN_IF_ERROR(t->Finish(what));
  return std::unique_ptr<Tokenizer>(std::move(t));
}

}  // namespace octet
