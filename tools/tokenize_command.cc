#include "tools/tokenize_command.h"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "model/checkpoint.h"
#include "model/tokenizer.h"
#include "nlohmann/json.hpp"

namespace octet {
namespace {

using Json = nlohmann::json;

// Each line of `path` parsed as JSON; an error names the line.
absl::StatusOr<std::vector<Json>> ReadJsonLines(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::vector<Json> lines;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    Json j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", number, ": not a JSON value"));
    }
    lines.push_back(std::move(j));
  }
  return lines;
}

absl::StatusOr<std::vector<int64_t>> ParseIds(const std::string& text) {
  std::vector<int64_t> ids;
  for (absl::string_view id : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int64_t v;
    if (!absl::SimpleAtoi(id, &v) || v < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--ids: '", id, "' is not a token id"));
    }
    ids.push_back(v);
  }
  return ids;
}

// Text as a JSON string (anything not UTF-8 would read as U+FFFD).
std::string JsonString(const std::string& text) {
  return Json(text).dump(-1, ' ', false, Json::error_handler_t::replace);
}

absl::Status EncodeLines(const Tokenizer& t, const std::string& path,
                         bool add_special) {
  OCTET_ASSIGN_OR_RETURN(const std::vector<Json> lines, ReadJsonLines(path));
  std::vector<std::string> texts;
  int64_t bytes = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (!lines[i].is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", i + 1, ": not a JSON string"));
    }
    texts.push_back(lines[i].get<std::string>());
    bytes += static_cast<int64_t>(texts.back().size());
  }
  std::vector<std::vector<int64_t>> ids;
  ids.reserve(texts.size());
  const auto start = std::chrono::steady_clock::now();
  for (const std::string& text : texts)
    ids.push_back(t.Encode(text, add_special));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  for (const std::vector<int64_t>& line : ids) {
    std::printf("[%s]\n", absl::StrJoin(line, ", ").c_str());
  }
  std::fprintf(stderr, "tokenize: %lld bytes in %.1f ms = %.2f MB/s\n",
               static_cast<long long>(bytes), seconds * 1e3,
               seconds > 0 ? bytes / seconds / 1e6 : 0.0);
  return absl::OkStatus();
}

absl::Status DecodeLines(const Tokenizer& t, const std::string& path) {
  OCTET_ASSIGN_OR_RETURN(const std::vector<Json> lines, ReadJsonLines(path));
  for (size_t i = 0; i < lines.size(); ++i) {
    std::vector<int64_t> ids;
    bool ok = lines[i].is_array();
    for (const Json& id : ok ? lines[i] : Json::array()) {
      ok = ok && id.is_number_integer();
      if (ok) ids.push_back(id.get<int64_t>());
    }
    if (!ok) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", i + 1, ": not a JSON array of ids"));
    }
    std::printf("%s\n", JsonString(t.Decode(ids)).c_str());
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckTokenizeCommand(const TokenizeCommand& c) {
  if (c.model_dir.empty()) {
    return absl::InvalidArgumentError("tokenize needs --model DIR");
  }
  if (!c.text.empty() + !c.ids.empty() + !c.jsonl.empty() +
          !c.decode_jsonl.empty() !=
      1) {
    return absl::InvalidArgumentError(
        "tokenize needs exactly one of --text, --ids, --jsonl and "
        "--decode_jsonl");
  }
  return absl::OkStatus();
}

absl::Status RunTokenize(const TokenizeCommand& c) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> t =
      ReadTokenizerAlone(c.model_dir);
  if (absl::IsNotFound(t.status())) {
    return absl::NotFoundError(absl::StrCat(
        c.model_dir, " has no tokenizer (tokenizer.model, tokenizer.json, or "
                     "a GGUF file's tokenizer.ggml)"));
  }
  if (!t.ok()) return t.status();
  if (!c.text.empty()) {
    std::printf(
        "%s\n",
        absl::StrJoin((*t)->Encode(c.text, c.add_special), ",").c_str());
    return absl::OkStatus();
  }
  if (!c.ids.empty()) {
    OCTET_ASSIGN_OR_RETURN(const std::vector<int64_t> ids, ParseIds(c.ids));
    std::printf("%s\n", (*t)->Decode(ids).c_str());
    return absl::OkStatus();
  }
  if (!c.jsonl.empty()) return EncodeLines(**t, c.jsonl, c.add_special);
  return DecodeLines(**t, c.decode_jsonl);
}

}  // namespace octet
