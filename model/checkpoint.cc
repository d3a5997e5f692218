#include "model/checkpoint.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/bf16.h"
#include "base/f16.h"
#include "base/status_macros.h"
#include "model/gguf_checkpoint.h"
#include "model/gguf_tokenizer.h"
#include "model/safetensors.h"
#include "model/safetensors_checkpoint.h"

namespace octet {
namespace {

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

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

int64_t TensorView::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// The four functions below are where a checkpoint's format is chosen: a
// path naming a file is a GGUF file (model/gguf_checkpoint.h); anything
// else is read as a Hugging Face safetensors directory, so that its errors
// (no config.json, no model.safetensors) are what a user sees.

namespace {
bool IsGgufPath(const std::string& path) {
  std::error_code ignored;
  return std::filesystem::is_regular_file(path, ignored);
}
}  // namespace

absl::StatusOr<std::unique_ptr<Checkpoint>> Checkpoint::Open(
    const std::string& path) {
  if (IsGgufPath(path)) {
    OCTET_ASSIGN_OR_RETURN(std::unique_ptr<GgufCheckpoint> c,
                           GgufCheckpoint::Open(path));
    return std::unique_ptr<Checkpoint>(std::move(c));
  }
  OCTET_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsCheckpoint> c,
                         SafetensorsCheckpoint::Open(path));
  return std::unique_ptr<Checkpoint>(std::move(c));
}

absl::StatusOr<ModelConfig> ReadCheckpointConfig(const std::string& path) {
  if (!IsGgufPath(path)) return LoadModelConfig(path);
  OCTET_ASSIGN_OR_RETURN(const std::unique_ptr<GgufFile> file,
                         GgufFile::Open(path));
  return GgufModelConfig(*file);
}

absl::StatusOr<std::unique_ptr<Tokenizer>> ReadCheckpointTokenizer(
    const std::string& path, const ModelConfig& config) {
  if (!IsGgufPath(path)) return LoadTokenizerFor(path, config);
  OCTET_ASSIGN_OR_RETURN(const std::unique_ptr<GgufFile> file,
                         GgufFile::Open(path));
  OCTET_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> t, GgufTokenizer(*file));
  if (t != nullptr && t->vocab_size() > config.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": the tokenizer has ", t->vocab_size(),
        " ids, more than the model's vocabulary of ", config.vocab_size));
  }
  return t;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> ReadTokenizerAlone(
    const std::string& path) {
  if (!IsGgufPath(path)) return Tokenizer::Load(path);
  OCTET_ASSIGN_OR_RETURN(const std::unique_ptr<GgufFile> file,
                         GgufFile::Open(path));
  OCTET_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> t, GgufTokenizer(*file));
  if (t == nullptr) {
    return absl::NotFoundError(
        absl::StrCat(path, " has no tokenizer.ggml metadata"));
  }
  return t;
}

absl::StatusOr<std::optional<ChatTemplateSource>> ReadCheckpointChatTemplate(
    const std::string& path) {
  if (!IsGgufPath(path)) return ReadHfChatTemplate(path);
  OCTET_ASSIGN_OR_RETURN(const std::unique_ptr<GgufFile> file,
                         GgufFile::Open(path));
  return ReadGgufChatTemplate(*file, path);
}

absl::Status Checkpoint::Validate() const {
  for (const ExpectedTensor& want : ExpectedTensors(config_)) {
    const absl::Status checked = CheckTensor(want);
    // Done with it, and with its scales (no-op for names that do not exist).
    for (const std::string& name :
         {want.name, WeightScaleName(want.name), InputScaleName(want.name)}) {
      ReleasePages(name);
    }
    OCTET_RETURN_IF_ERROR(checked);
  }
  return absl::OkStatus();
}

absl::Status Checkpoint::CheckTensor(const ExpectedTensor& want) const {
  OCTET_ASSIGN_OR_RETURN(const TensorView t, Describe(want.name));
  if (t.shape != want.shape) {
    return absl::InvalidArgumentError(absl::StrCat(
        t.file, ": tensor '", want.name, "' has shape ", ShapeString(t.shape),
        " but config.json implies ", ShapeString(want.shape)));
  }
  if (IsFloat(t.dtype)) return absl::OkStatus();
  // Only the projections of an FP8 checkpoint may hold e4m3 codes, and
  // then with their scales.
  if (!(want.linear && t.dtype == DType::kE4m3 && config_.fp8)) {
    return absl::InvalidArgumentError(absl::StrCat(
        t.file, ": tensor '", want.name, "' has dtype ",
        SafetensorsDTypeName(t.dtype),
        want.linear ? " but config.json has no fp8 quantization_config"
                    : ", which only FP8 projection weights may have"));
  }
  std::vector<std::pair<std::string, std::vector<float>>> scales;
  const std::string weight_scale = WeightScaleName(want.name);
  if (config_.fp8->weight_per_channel) {
    OCTET_ASSIGN_OR_RETURN(std::vector<float> rows,
                           GetRowScales(weight_scale, t.shape[0]));
    scales.emplace_back(weight_scale, std::move(rows));
  } else {
    OCTET_ASSIGN_OR_RETURN(const float v, GetScalar(weight_scale));
    scales.push_back({weight_scale, {v}});
  }
  if (config_.fp8->static_activations) {
    const std::string input_scale = InputScaleName(want.name);
    OCTET_ASSIGN_OR_RETURN(const float v, GetScalar(input_scale));
    scales.push_back({input_scale, {v}});
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
  return absl::OkStatus();
}

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
