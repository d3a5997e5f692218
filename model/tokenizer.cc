#include "model/tokenizer.h"

#include <algorithm>
#include <filesystem>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "kernels/status_macros.h"
#include "model/file_util.h"
#include "model/sentencepiece_bridge.h"

namespace octet {

Tokenizer::Tokenizer(std::unique_ptr<sp_bridge::Processor> p)
    : processor_(std::move(p)) {
  // Each piece decoded alone (once, ~1 us a piece). A byte-fallback piece
  // reads as U+FFFD, 3 bytes for its 1: an overestimate, the safe side.
  for (int64_t id = 0; id < vocab_size(); ++id) {
    const int64_t bytes = static_cast<int64_t>(Decode({&id, 1}).size()) + 1;
    max_token_bytes_ = std::max(max_token_bytes_, bytes);
  }
}
Tokenizer::~Tokenizer() = default;

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Load(
    const std::string& dir) {
  const std::string path =
      (std::filesystem::path(dir) / "tokenizer.model").string();
  // SentencePiece models are a few MB at most.
  OCTET_ASSIGN_OR_RETURN(const std::string bytes,
                         ReadSmallFile(path, size_t{64} << 20));
  return FromSerialized(bytes, path);
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromSerialized(
    const std::string& serialized, const std::string& what) {
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
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(p)));
}

std::vector<int64_t> Tokenizer::Encode(const std::string& text,
                                       bool add_bos) const {
  std::vector<int64_t> out;
  if (add_bos && processor_->BosId() >= 0) out.push_back(processor_->BosId());
  for (int id : processor_->Encode(text)) out.push_back(id);
  return out;
}

std::string Tokenizer::Decode(absl::Span<const int64_t> ids) const {
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

int64_t Tokenizer::vocab_size() const { return processor_->PieceSize(); }

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadTokenizerFor(
    const std::string& dir, const ModelConfig& config) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::Load(dir);
  if (absl::IsNotFound(t.status())) return std::unique_ptr<Tokenizer>();
  if (!t.ok()) return t.status();
  if ((*t)->vocab_size() > config.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        dir, "/tokenizer.model has ", (*t)->vocab_size(),
        " pieces, more than config.json's vocab_size ", config.vocab_size,
        ": it would make ids the model cannot embed"));
  }
  return t;
}
int64_t Tokenizer::bos_id() const { return processor_->BosId(); }
int64_t Tokenizer::eos_id() const { return processor_->EosId(); }

}  // namespace octet
