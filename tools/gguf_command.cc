// `octet gguf` (see gguf_command.h).
#include "tools/gguf_command.h"

#include <cstdio>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "model/gguf.h"
#include "model/gguf_checkpoint.h"

namespace octet {
namespace {

constexpr size_t kShownElements = 8;  // of a metadata array

std::string ValueText(const GgufValue& v) {
  switch (v.type) {
    case GgufValueType::kString:
      return v.s.size() > 80 ? absl::StrCat("\"", v.s.substr(0, 80), "\"... (",
                                            v.s.size(), " bytes)")
                             : absl::StrCat("\"", v.s, "\"");
    case GgufValueType::kArray: {
      const size_t n = v.strings.size() + v.ints.size() + v.floats.size();
      if (n > kShownElements) {
        return absl::StrCat("[", n, " ", GgufValueTypeName(v.element_type),
                            "]");
      }
      if (!v.strings.empty()) {
        return absl::StrCat("[\"", absl::StrJoin(v.strings, "\", \""), "\"]");
      }
      return absl::StrCat("[", absl::StrJoin(v.ints, ", "),
                          absl::StrJoin(v.floats, ", "), "]");
    }
    case GgufValueType::kFloat32:
    case GgufValueType::kFloat64:
      return absl::StrCat(v.f);
    case GgufValueType::kBool:
      return v.u ? "true" : "false";
    default:
      return v.is_signed ? absl::StrCat(v.i) : absl::StrCat(v.u);
  }
}

void PrintSummary(const GgufFile& f) {
  const GgufContents& c = f.contents();
  std::printf("%s: GGUF version %u, %zu metadata entries, %zu tensors\n",
              f.path().c_str(), c.version, c.metadata.size(),
              c.tensors.size());
  for (const auto& [key, value] : c.metadata) {
    std::printf("  %s = %s\n", key.c_str(), ValueText(value).c_str());
  }
  for (const GgufTensorInfo& t : c.tensors) {
    std::printf("  tensor %s %s [%s]\n", t.name.c_str(),
                GgmlTypeName(static_cast<uint32_t>(t.type)).c_str(),
                absl::StrJoin(t.dims, ", ").c_str());
  }
  const absl::StatusOr<ModelConfig> config = GgufModelConfig(f);
  if (!config.ok()) {
    std::printf("octet cannot serve it: %s\n",
                std::string(config.status().message()).c_str());
    return;
  }
  std::printf(
      "octet serves it as %s: %lld layers, hidden %lld, %lld heads (%lld "
      "KV), head_dim %lld, FFN %lld, vocabulary %lld%s%s\n",
      config->architecture.c_str(), static_cast<long long>(config->num_layers),
      static_cast<long long>(config->hidden_size),
      static_cast<long long>(config->num_heads),
      static_cast<long long>(config->num_kv_heads),
      static_cast<long long>(config->head_dim),
      static_cast<long long>(config->intermediate_size),
      static_cast<long long>(config->vocab_size),
      config->tie_word_embeddings ? ", tied embeddings" : "",
      config->rope_freq_factors.empty() ? ""
                                        : ", RoPE scaled by rope_freqs.weight");
}

absl::Status WriteTensor(const GgufFile& f, const std::string& name,
                         const std::string& out) {
  const GgufTensorInfo* t = f.FindTensor(name);
  if (t == nullptr) {
    return absl::NotFoundError(
        absl::StrCat(f.path(), " has no tensor '", name, "'"));
  }
  std::vector<float> values(t->num_elements());
  DequantizeGgml(t->type, f.Data(*t), t->num_elements(), values.data());
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(
      std::fopen(out.c_str(), "wb"), &std::fclose);
  if (file == nullptr ||
      std::fwrite(values.data(), sizeof(float), values.size(), file.get()) !=
          values.size()) {
    return absl::InternalError(absl::StrCat("cannot write ", out));
  }
  std::fprintf(stderr, "octet: %s (%s, %zu values) -> %s\n", name.c_str(),
               GgmlTypeName(static_cast<uint32_t>(t->type)).c_str(),
               values.size(), out.c_str());
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckGgufCommand(const GgufCommand& c) {
  if (c.path.empty()) {
    return absl::InvalidArgumentError("gguf needs --model FILE.gguf");
  }
  if (c.tensor.empty() != c.out.empty()) {
    return absl::InvalidArgumentError(
        "gguf: --tensor and --out go together");
  }
  return absl::OkStatus();
}

absl::Status RunGguf(const GgufCommand& c) {
  OCTET_ASSIGN_OR_RETURN(const std::unique_ptr<GgufFile> f,
                         GgufFile::Open(c.path));
  if (c.tensor.empty()) {
    PrintSummary(*f);
    return absl::OkStatus();
  }
  return WriteTensor(*f, c.tensor, c.out);
}

}  // namespace octet
