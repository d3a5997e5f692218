#include "model/checkpoint_writer.h"

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "nlohmann/json.hpp"

namespace octet {
namespace {

namespace fs = std::filesystem;

uint64_t Bytes(const SafetensorsWriter::Spec& s) {
  uint64_t b = DTypeSize(s.dtype);
  for (int64_t d : s.shape) b *= static_cast<uint64_t>(d);
  return b;
}

}  // namespace

absl::Status WriteTextFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) return absl::InternalError(absl::StrCat(path, ": write failed"));
  return absl::OkStatus();
}

absl::Status WriteCheckpointTensors(const std::string& dir,
                                    const std::vector<TensorSource>& tensors,
                                    uint64_t shard_bytes) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    return absl::PermissionDeniedError(
        absl::StrCat(dir, ": cannot create: ", ec.message()));
  }
  // Shards: tensors in order, a new file when the next would pass the limit.
  std::vector<std::vector<const TensorSource*>> shards(1);
  uint64_t size = 0, total = 0;
  for (const TensorSource& t : tensors) {
    const uint64_t b = Bytes(t.spec);
    if (size > 0 && size + b > shard_bytes) {
      shards.emplace_back();
      size = 0;
    }
    shards.back().push_back(&t);
    size += b;
    total += b;
  }
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string file =
        shards.size() == 1 ? "model.safetensors"
                           : absl::StrFormat("model-%05d-of-%05d.safetensors",
                                             s + 1, shards.size());
    std::vector<SafetensorsWriter::Spec> specs;
    for (const TensorSource* t : shards[s]) {
      specs.push_back(t->spec);
      weight_map[t->spec.name] = file;
    }
    OCTET_ASSIGN_OR_RETURN(
        std::unique_ptr<SafetensorsWriter> w,
        SafetensorsWriter::Create((fs::path(dir) / file).string(), specs,
                                  {{"format", "pt"}}));
    for (const TensorSource* t : shards[s]) {
      OCTET_RETURN_IF_ERROR(t->write(*w));
    }
    OCTET_RETURN_IF_ERROR(w->Finish());
  }
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  if (shards.size() > 1) {
    nlohmann::ordered_json j;
    j["metadata"] = {{"total_size", total}};
    j["weight_map"] = weight_map;
    return WriteTextFile(index.string(), j.dump(2) + "\n");
  }
  fs::remove(index, ec);
  fs::remove(fs::path(dir) / "model-00001-of-00001.safetensors", ec);
  return absl::OkStatus();
}

}  // namespace octet
