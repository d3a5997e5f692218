// The tokenizers behind Tokenizer (tokenizer.h): SentencePiece through its
// module (sentencepiece_bridge.h), tokenizer.json through bpe_tokenizer.h;
// and TextStream's windowed decoding.
#include "model/tokenizer.h"

#include <algorithm>
#include <filesystem>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/file_util.h"
#include "base/status_macros.h"
#include "model/bpe_tokenizer.h"
#include "model/sentencepiece_bridge.h"
#include "nlohmann/json.hpp"

namespace octet {
namespace {

constexpr size_t kMaxTokenizerBytes = size_t{64} << 20;  // real ones: < 20 MB

// A SentencePiece model (tokenizer.model), through the bridge module.
class SentencePieceTokenizer : public Tokenizer {
 public:
  SentencePieceTokenizer(std::unique_ptr<sp_bridge::Processor> p, bool adds_bos)
      : processor_(std::move(p)), adds_bos_(adds_bos) {
    // Each piece decoded alone (once, ~1 us a piece), plus the space
    // SentencePiece strips in front of a word. A byte-fallback piece reads as
    // U+FFFD, 3 bytes for its 1: an overestimate, the safe side.
    for (int64_t id = 0; id < vocab_size(); ++id) {
      const int64_t bytes = static_cast<int64_t>(Decode({&id, 1}).size()) + 1;
      max_token_bytes_ = std::max(max_token_bytes_, bytes);
    }
  }

  std::vector<int64_t> Encode(const std::string& text,
                              bool add_bos) const override {
    std::vector<int64_t> out;
    if (add_bos && adds_bos_ && bos_id() >= 0) out.push_back(bos_id());
    for (int id : processor_->Encode(text)) out.push_back(id);
    return out;
  }

  std::string Decode(absl::Span<const int64_t> ids) const override {
    // Decode runs of known ids together (SentencePiece joins byte pieces and
    // word boundaries across them); unknown ids split the runs.
    std::string text;
    std::vector<int> run;
    auto flush = [&] {
      if (run.empty()) return;
      std::string piece, error;
      if (processor_->Decode(run, &piece, &error)) text += piece;
      run.clear();
    };
    for (int64_t id : ids) {
      if (id >= 0 && id < processor_->PieceSize()) {
        run.push_back(static_cast<int>(id));
      } else {
        flush();
        text += "\xEF\xBF\xBD";  // U+FFFD
      }
    }
    flush();
    return text;
  }

  int64_t vocab_size() const override { return processor_->PieceSize(); }
  int64_t bos_id() const override { return processor_->BosId(); }
  int64_t eos_id() const override { return processor_->EosId(); }

 private:
  std::unique_ptr<sp_bridge::Processor> processor_;
  bool adds_bos_;
};

// tokenizer_config.json's add_bos_token beside a tokenizer.model: true when
// the file or the key is absent (SentencePiece models add BOS).
absl::StatusOr<bool> AddsBos(const std::filesystem::path& dir) {
  const std::filesystem::path path = dir / "tokenizer_config.json";
  OCTET_ASSIGN_OR_RETURN(const bool exists, PathExists(path.string()));
  if (!exists) return true;
  OCTET_ASSIGN_OR_RETURN(const std::string text,
                         ReadSmallFile(path.string(), kMaxTokenizerBytes));
  const nlohmann::json j =
      nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path.string(), ": not a JSON object"));
  }
  const auto it = j.find("add_bos_token");
  if (it == j.end() || it->is_null()) return true;
  if (!it->is_boolean()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path.string(), ": add_bos_token is not true or false"));
  }
  return it->get<bool>();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Load(
    const std::string& dir) {
  const std::filesystem::path model =
      std::filesystem::path(dir) / "tokenizer.model";
  const std::filesystem::path json =
      std::filesystem::path(dir) / "tokenizer.json";
  if (!std::filesystem::exists(model) && std::filesystem::exists(json)) {
    OCTET_ASSIGN_OR_RETURN(const std::string text,
                           ReadSmallFile(json.string(), kMaxTokenizerBytes));
    return LoadTokenizerJson(text, json.string());
  }
  OCTET_ASSIGN_OR_RETURN(const std::string bytes,
                         ReadSmallFile(model.string(), kMaxTokenizerBytes));
  OCTET_ASSIGN_OR_RETURN(const bool adds_bos, AddsBos(dir));
  return FromSerialized(bytes, model.string(), adds_bos);
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromSerialized(
    const std::string& serialized, const std::string& what, bool adds_bos) {
  std::string error;
  if (!sp_bridge::ModuleAvailable(&error)) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, ": cannot use the tokenizer: ", error));
  }
  std::unique_ptr<sp_bridge::Processor> p =
      sp_bridge::LoadProcessor(serialized, &error);
  if (p == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": not a SentencePiece model: ", error));
  }
  return std::unique_ptr<Tokenizer>(
      new SentencePieceTokenizer(std::move(p), adds_bos));
}

std::string TextStream::Add(int64_t id) {
  ids_.push_back(id);
  return Pending(/*final=*/false);
}

std::string TextStream::Finish() { return Pending(/*final=*/true); }

std::string TextStream::Pending(bool final) {
  const absl::Span<const int64_t> ids(ids_);
  const std::string emitted =
      tokenizer_.Decode(ids.subspan(prefix_, read_ - prefix_));
  const std::string all = tokenizer_.Decode(ids.subspan(prefix_));
  if (all.size() <= emitted.size() || !absl::StartsWith(all, emitted)) {
    return "";
  }
  if (!final && absl::EndsWith(all, "\xEF\xBF\xBD")) return "";
  prefix_ = read_;
  read_ = ids_.size();
  return all.substr(emitted.size());
}

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizerFor(
    const std::string& dir, const ModelConfig& config) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::Load(dir);
  if (absl::IsNotFound(t.status())) return std::unique_ptr<Tokenizer>();
  if (!t.ok()) return t.status();
  if ((*t)->vocab_size() > config.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        dir, ": the tokenizer has ", (*t)->vocab_size(),
        " ids, more than config.json's vocab_size ", config.vocab_size,
        ": it would make ids the model cannot embed"));
  }
  return t;
}

}  // namespace octet
