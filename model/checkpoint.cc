#include "model/checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/bf16.h"
#include "kernels/f16.h"
#include "base/status_macros.h"
#include "base/file_util.h"
#include "nlohmann/json.hpp"

namespace octet {
namespace {

namespace fs = std::filesystem;

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// The safetensors files of DIR: those the index names, or model.safetensors.
absl::StatusOr<std::vector<std::string>> ShardFiles(
    const std::string& dir,
    std::vector<std::pair<std::string, std::string>>* weight_map) {
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  OCTET_ASSIGN_OR_RETURN(const bool indexed, PathExists(index.string()));
  if (indexed) {
    // An index lists every tensor once: a few MB even for the largest models.
    OCTET_ASSIGN_OR_RETURN(const std::string text,
                           ReadSmallFile(index.string(), size_t{64} << 20));
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("weight_map") ||
        !j["weight_map"].is_object()) {
      return absl::InvalidArgumentError(absl::StrCat(
          index.string(), ": not a JSON object with a \"weight_map\" object"));
    }
    std::set<std::string> files;
    for (const auto& [name, file] : j["weight_map"].items()) {
      if (!file.is_string() ||
          file.get<std::string>().find('/') != std::string::npos) {
        return absl::InvalidArgumentError(absl::StrCat(
            index.string(), ": tensor '", name,
            "' maps to something other than a file name in this directory"));
      }
      files.insert(file.get<std::string>());
      weight_map->emplace_back(name, file.get<std::string>());
    }
    if (files.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(index.string(), ": weight_map is empty"));
    }
    return std::vector<std::string>(files.begin(), files.end());
  }
  OCTET_ASSIGN_OR_RETURN(
      const bool single,
      PathExists((fs::path(dir) / "model.safetensors").string()));
  if (single) return std::vector<std::string>{"model.safetensors"};
  return absl::NotFoundError(absl::StrCat(
      dir, ": no model.safetensors or model.safetensors.index.json"));
}

}  // namespace

int64_t TensorView::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<ExpectedTensor> ExpectedTensors(const ModelConfig& c) {
  const int64_t h = c.hidden_size, q = c.num_heads * c.head_dim,
                kv = c.num_kv_heads * c.head_dim, ff = c.intermediate_size;
  std::vector<ExpectedTensor> out;
  out.push_back({"model.embed_tokens.weight", {c.vocab_size, h}, false});
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = absl::StrCat("model.layers.", i, ".");
    out.push_back({p + "input_layernorm.weight", {h}, false});
    out.push_back({p + "self_attn.q_proj.weight", {q, h}, true});
    out.push_back({p + "self_attn.k_proj.weight", {kv, h}, true});
    out.push_back({p + "self_attn.v_proj.weight", {kv, h}, true});
    if (c.qkv_bias) {
      out.push_back({p + "self_attn.q_proj.bias", {q}, false});
      out.push_back({p + "self_attn.k_proj.bias", {kv}, false});
      out.push_back({p + "self_attn.v_proj.bias", {kv}, false});
    }
    if (c.qk_norm) {
      out.push_back({p + "self_attn.q_norm.weight", {c.head_dim}, false});
      out.push_back({p + "self_attn.k_norm.weight", {c.head_dim}, false});
    }
    out.push_back({p + "self_attn.o_proj.weight", {h, q}, true});
    out.push_back({p + "post_attention_layernorm.weight", {h}, false});
    out.push_back({p + "mlp.gate_proj.weight", {ff, h}, true});
    out.push_back({p + "mlp.up_proj.weight", {ff, h}, true});
    out.push_back({p + "mlp.down_proj.weight", {h, ff}, true});
  }
  out.push_back({"model.norm.weight", {h}, false});
  if (!c.tie_word_embeddings) {
    out.push_back({"lm_head.weight", {c.vocab_size, h}, false});
  }
  return out;
}

absl::StatusOr<std::unique_ptr<Checkpoint>> Checkpoint::Open(
    const std::string& dir) {
  std::unique_ptr<Checkpoint> ckpt(new Checkpoint());
  ckpt->dir_ = dir;
  OCTET_ASSIGN_OR_RETURN(ckpt->config_, LoadModelConfig(dir));

  std::vector<std::pair<std::string, std::string>> weight_map;
  OCTET_ASSIGN_OR_RETURN(const std::vector<std::string> files,
                         ShardFiles(dir, &weight_map));
  absl::flat_hash_map<std::string, size_t> file_index;
  for (const std::string& name : files) {
    OCTET_ASSIGN_OR_RETURN(
        std::unique_ptr<SafetensorsFile> f,
        SafetensorsFile::Open((fs::path(dir) / name).string()));
    file_index[name] = ckpt->files_.size();
    ckpt->files_.push_back(std::move(f));
  }
  for (size_t i = 0; i < ckpt->files_.size(); ++i) {
    for (const SafetensorsEntry& e : ckpt->files_[i]->header().tensors) {
      auto [it, inserted] = ckpt->index_.emplace(e.name, std::make_pair(i, &e));
      if (!inserted) {
        return absl::InvalidArgumentError(
            absl::StrCat(dir, ": tensor '", e.name, "' is stored twice (in ",
                         ckpt->files_[it->second.first]->path(), " and ",
                         ckpt->files_[i]->path(), ")"));
      }
    }
  }
  // The index must tell the truth about where each tensor is.
  for (const auto& [name, file] : weight_map) {
    auto it = ckpt->index_.find(name);
    if (it == ckpt->index_.end() || it->second.first != file_index[file]) {
      return absl::InvalidArgumentError(
          absl::StrCat(dir, "/model.safetensors.index.json: tensor '", name,
                       "' is not in ", file));
    }
  }
  OCTET_RETURN_IF_ERROR(ckpt->Validate());
  return ckpt;
}

absl::Status Checkpoint::Validate() const {
  for (const ExpectedTensor& want : ExpectedTensors(config_)) {
    OCTET_ASSIGN_OR_RETURN(const TensorView t, Get(want.name));
    if (t.shape != want.shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          t.file, ": tensor '", want.name, "' has shape ", ShapeString(t.shape),
          " but config.json implies ", ShapeString(want.shape)));
    }
    if (IsFloat(t.dtype)) continue;
    // Only the projections of an FP8 checkpoint may hold e4m3 codes, and
    // then with their scales.
    if (!(want.linear && t.dtype == DType::kE4m3 && config_.fp8)) {
      return absl::InvalidArgumentError(absl::StrCat(
          t.file, ": tensor '", want.name, "' has dtype ",
          SafetensorsDTypeName(t.dtype),
          want.linear ? " but config.json has no fp8 quantization_config"
                      : ", which only FP8 projection weights may have"));
    }
    const std::string stem =
        want.name.substr(0, want.name.size() - 7);  // ".weight"
    std::vector<std::pair<std::string, std::vector<float>>> scales;
    if (config_.fp8->weight_per_channel) {
      OCTET_ASSIGN_OR_RETURN(std::vector<float> rows,
                             GetRowScales(want.name + "_scale", t.shape[0]));
      scales.emplace_back(want.name + "_scale", std::move(rows));
    } else {
      OCTET_ASSIGN_OR_RETURN(const float v, GetScalar(want.name + "_scale"));
      scales.push_back({want.name + "_scale", {v}});
    }
    if (config_.fp8->static_activations) {
      OCTET_ASSIGN_OR_RETURN(const float v, GetScalar(stem + ".input_scale"));
      scales.push_back({stem + ".input_scale", {v}});
    }
    for (const auto& [name, values] : scales) {
      for (float v : values) {
        if (!(std::isfinite(v) && v > 0)) {
          return absl::InvalidArgumentError(
              absl::StrCat(dir_, ": tensor '", name, "' holds ", v,
                           "; a scale must be finite and > 0"));
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<TensorView> Checkpoint::Get(absl::string_view name) const {
  auto it = index_.find(name);
  if (it == index_.end()) {
    return absl::NotFoundError(
        absl::StrCat(dir_, ": checkpoint has no tensor '", name, "'"));
  }
  const SafetensorsFile& f = *files_[it->second.first];
  const SafetensorsEntry& e = *it->second.second;
  return TensorView{e.name, f.path(), e.dtype, e.shape, f.Data(e)};
}

void Checkpoint::ReleasePages(absl::string_view name) const {
  auto it = index_.find(name);
  if (it != index_.end())
    files_[it->second.first]->ReleasePages(*it->second.second);
}

bool Checkpoint::Has(absl::string_view name) const {
  return index_.contains(name);
}

std::vector<std::string> Checkpoint::TensorNames() const {
  std::vector<std::string> names;
  for (const auto& [name, unused] : index_) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

namespace {

// Element i of a float tensor (F32, BF16 or F16) as a float.
float FloatAt(const TensorView& t, int64_t i) {
  if (t.dtype == DType::kF32) {
    float v;
    std::memcpy(&v, t.bytes.data() + 4 * i, sizeof(v));
    return v;
  }
  uint16_t bits;
  std::memcpy(&bits, t.bytes.data() + 2 * i, sizeof(bits));
  return t.dtype == DType::kBf16 ? Bf16ToFloat(Bf16{bits})
                                 : F16ToFloat(F16{bits});
}

}  // namespace

// (compressed-tensors writes scales in the model's dtype.)
absl::StatusOr<float> Checkpoint::GetScalar(absl::string_view name) const {
  OCTET_ASSIGN_OR_RETURN(const TensorView t, Get(name));
  if (!IsFloat(t.dtype) || t.num_elements() != 1 || t.shape.size() > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(t.file, ": tensor '", name,
                     "' must be a scalar F32, BF16 or F16 (shape [] or [1])"));
  }
  return FloatAt(t, 0);
}

absl::StatusOr<std::vector<float>> Checkpoint::GetRowScales(
    absl::string_view name, int64_t rows) const {
  OCTET_ASSIGN_OR_RETURN(const TensorView t, Get(name));
  const bool shape_ok =
      (t.shape.size() == 1 && t.shape[0] == rows) ||
      (t.shape.size() == 2 && t.shape[0] == rows && t.shape[1] == 1);
  if (!IsFloat(t.dtype) || !shape_ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        t.file, ": tensor '", name, "' must be F32, BF16 or F16 of shape [",
        rows, ", 1] (one scale per row)"));
  }
  std::vector<float> out(rows);
  for (int64_t i = 0; i < rows; ++i) out[i] = FloatAt(t, i);
  return out;
}

}  // namespace octet
