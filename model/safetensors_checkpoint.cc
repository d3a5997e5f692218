#include "model/safetensors_checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/file_util.h"
#include "base/status_macros.h"
#include "nlohmann/json.hpp"

namespace octet {
namespace {

namespace fs = std::filesystem;

constexpr char kIndex[] = "model.safetensors.index.json";
constexpr char kSingle[] = "model.safetensors";

// The index's weight_map: (tensor, file) pairs, each file a name in DIR.
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ReadIndex(
    const std::string& path) {
  // An index lists every tensor once: a few MB even for the largest models.
  OCTET_ASSIGN_OR_RETURN(const std::string text,
                         ReadSmallFile(path, size_t{64} << 20));
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("weight_map") ||
      !j["weight_map"].is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a JSON object with a \"weight_map\" object"));
  }
  std::vector<std::pair<std::string, std::string>> weight_map;
  for (const auto& [name, file] : j["weight_map"].items()) {
    if (!file.is_string() ||
        file.get<std::string>().find('/') != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": tensor '", name,
          "' maps to something other than a file name in this directory"));
    }
    weight_map.emplace_back(name, file.get<std::string>());
  }
  if (weight_map.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": weight_map is empty"));
  }
  return weight_map;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SafetensorsCheckpoint>>
SafetensorsCheckpoint::Open(const std::string& dir) {
  OCTET_ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(dir));
  std::unique_ptr<SafetensorsCheckpoint> ckpt(
      new SafetensorsCheckpoint(dir, std::move(config)));

  const std::string index = (fs::path(dir) / kIndex).string();
  OCTET_ASSIGN_OR_RETURN(const bool indexed, PathExists(index));
  std::vector<std::pair<std::string, std::string>> weight_map;
  if (indexed) {
    OCTET_ASSIGN_OR_RETURN(weight_map, ReadIndex(index));
  } else {
    OCTET_ASSIGN_OR_RETURN(const bool single,
                           PathExists((fs::path(dir) / kSingle).string()));
    if (!single) {
      return absl::NotFoundError(
          absl::StrCat(dir, ": no ", kSingle, " or ", kIndex));
    }
  }
  std::set<std::string> files;
  for (const auto& [unused, file] : weight_map) files.insert(file);
  if (!indexed) files.insert(kSingle);
  const std::vector<std::string> names(files.begin(), files.end());
  OCTET_RETURN_IF_ERROR(ckpt->MapFiles(names));

  // The index must tell the truth about where each tensor is.
  for (const auto& [name, file] : weight_map) {
    auto it = ckpt->index_.find(name);
    const size_t file_index =
        std::lower_bound(names.begin(), names.end(), file) - names.begin();
    if (it == ckpt->index_.end() || it->second.first != file_index) {
      return absl::InvalidArgumentError(
          absl::StrCat(index, ": tensor '", name, "' is not in ", file));
    }
  }
  OCTET_RETURN_IF_ERROR(ckpt->Validate());
  return ckpt;
}

// Maps `files` (names in dir(), in this order) and indexes their tensors;
// a tensor stored twice is an error.
absl::Status SafetensorsCheckpoint::MapFiles(
    const std::vector<std::string>& files) {
  for (const std::string& name : files) {
    OCTET_ASSIGN_OR_RETURN(
        std::unique_ptr<SafetensorsFile> f,
        SafetensorsFile::Open((fs::path(dir()) / name).string()));
    files_.push_back(std::move(f));
  }
  for (size_t i = 0; i < files_.size(); ++i) {
    for (const SafetensorsEntry& e : files_[i]->header().tensors) {
      auto [it, inserted] = index_.emplace(e.name, std::make_pair(i, &e));
      if (!inserted) {
        return absl::InvalidArgumentError(absl::StrCat(
            dir(), ": tensor '", e.name, "' is stored twice (in ",
            files_[it->second.first]->path(), " and ", files_[i]->path(), ")"));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<TensorView> SafetensorsCheckpoint::Get(
    absl::string_view name) const {
  auto it = index_.find(name);
  if (it == index_.end()) {
    return absl::NotFoundError(
        absl::StrCat(dir(), ": checkpoint has no tensor '", name, "'"));
  }
  const SafetensorsFile& f = *files_[it->second.first];
  const SafetensorsEntry& e = *it->second.second;
  return TensorView{e.name, f.path(), e.dtype, e.shape, f.Data(e)};
}

void SafetensorsCheckpoint::ReleasePages(absl::string_view name) const {
  auto it = index_.find(name);
  if (it != index_.end())
    files_[it->second.first]->ReleasePages(*it->second.second);
}

bool SafetensorsCheckpoint::Has(absl::string_view name) const {
  return index_.contains(name);
}

std::vector<std::string> SafetensorsCheckpoint::TensorNames() const {
  std::vector<std::string> names;
  for (const auto& [name, unused] : index_) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace octet
