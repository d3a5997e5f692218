// GGUF as a Checkpoint (see gguf_checkpoint.h): the config from the
// metadata, the name table, and decoding on Get.
#include "model/gguf_checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "model/tensor_names.h"

namespace octet {
namespace {

// Llama 3's RoPE factors (ReadRopeFreqFactors), read into the config.
constexpr char kRopeFreqs[] = "rope_freqs.weight";

// GGUF's name for a tensor (llama.cpp's LLM_TENSOR_NAMES).
std::string GgufName(const ExpectedTensor& want) {
  if (const auto* t = std::get_if<ModelTensor>(&want.role)) {
    switch (*t) {
      case ModelTensor::kEmbedding: return "token_embd.weight";
      case ModelTensor::kFinalNorm: return "output_norm.weight";
      case ModelTensor::kLmHead: return "output.weight";
    }
  }
  static constexpr const char* kLayer[] = {
      "attn_norm.weight",   "attn_q.weight",      "attn_k.weight",
      "attn_v.weight",      "attn_q.bias",        "attn_k.bias",
      "attn_v.bias",        "attn_q_norm.weight", "attn_k_norm.weight",
      "attn_output.weight", "ffn_norm.weight",    "ffn_gate.weight",
      "ffn_up.weight",      "ffn_down.weight"};  // in LayerTensor's order
  static_assert(std::size(kLayer) ==
                static_cast<size_t>(LayerTensor::kDown) + 1);
  const auto t = std::get<LayerTensor>(want.role);
  return absl::StrCat("blk.", want.layer, ".",
                      kLayer[static_cast<int>(t)]);
}

// The architectures octet serves from GGUF: general.architecture -> the
// Hugging Face name whose forward pass it is.
struct GgufArchitecture {
  const char* gguf;
  const char* hf;
  bool qkv_bias;
  bool rotary_interleaved;  // llama.cpp's converter permuted q/k rows
};
constexpr GgufArchitecture kArchitectures[] = {
    {"llama", "LlamaForCausalLM", false, true},
    {"qwen2", "Qwen2ForCausalLM", true, false},
};

absl::StatusOr<const GgufArchitecture*> ArchitectureOf(const GgufFile& f) {
  OCTET_ASSIGN_OR_RETURN(const std::string arch,
                         f.GetString("general.architecture"));
  for (const GgufArchitecture& a : kArchitectures) {
    if (arch == a.gguf) return &a;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      f.path(), ": general.architecture is '", arch,
      "'; octet serves 'llama' and 'qwen2' GGUF files"));
}

// "<arch>.<key>" as an unsigned integer, or `fallback` when absent.
absl::StatusOr<int64_t> ArchUint(const GgufFile& f, const std::string& arch,
                                 const char* key,
                                 std::optional<int64_t> fallback) {
  const std::string full = absl::StrCat(arch, ".", key);
  if (fallback.has_value() && f.FindValue(full) == nullptr) return *fallback;
  OCTET_ASSIGN_OR_RETURN(const uint64_t v, f.GetUint(full));
  if (v == 0 || v > (uint64_t{1} << 31)) {
    return absl::InvalidArgumentError(absl::StrCat(
        f.path(), ": metadata '", full, "' is ", v, "; want 1 to 2^31"));
  }
  return static_cast<int64_t>(v);
}

// What octet's forward pass does not do, refused by the key that asks for
// it.
absl::Status RefuseUnsupported(const GgufFile& f, const std::string& arch) {
  if (f.FindValue(arch + ".expert_count") != nullptr &&
      f.GetUint(arch + ".expert_count").value_or(1) > 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        f.path(), ": metadata '", arch,
        ".expert_count': mixture-of-experts models are not supported"));
  }
  const std::string scaling = arch + ".rope.scaling.type";
  if (f.FindValue(scaling) != nullptr &&
      f.GetString(scaling).value_or("?") != "none") {
    return absl::InvalidArgumentError(absl::StrCat(
        f.path(), ": metadata '", scaling,
        "': RoPE scaling from a GGUF file is not supported"));
  }
  return absl::OkStatus();
}

// Llama 3's RoPE scaling as llama.cpp's converter writes it: tensor
// rope_freqs.weight, F32, one factor per rotary pair, each dividing that
// pair's frequency.
absl::Status ReadRopeFreqFactors(const GgufFile& f, ModelConfig& c) {
  const GgufTensorInfo* t = f.FindTensor(kRopeFreqs);
  if (t == nullptr) return absl::OkStatus();
  if (t->type != GgmlType::kF32 || t->dims.size() != 1 ||
      t->dims[0] != c.head_dim / 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(f.path(), ": tensor '", kRopeFreqs, "' must be F32 with ",
                     c.head_dim / 2, " values (one per rotary pair)"));
  }
  c.rope_freq_factors.resize(c.head_dim / 2);
  std::memcpy(c.rope_freq_factors.data(), f.Data(*t).data(),
              c.rope_freq_factors.size() * sizeof(float));
  for (size_t i = 0; i < c.rope_freq_factors.size(); ++i) {
    if (!(c.rope_freq_factors[i] > 0) ||
        !std::isfinite(c.rope_freq_factors[i])) {
      return absl::InvalidArgumentError(absl::StrCat(
          f.path(), ": ", kRopeFreqs, "[", i, "] is ", c.rope_freq_factors[i],
          "; a factor must be positive and finite"));
    }
  }
  return absl::OkStatus();
}

// head_dim from key_length, checked against value_length and the rotary
// dimension (octet rotates whole heads).
absl::Status ReadHeadDim(const GgufFile& f, const std::string& arch,
                         ModelConfig& c) {
  OCTET_ASSIGN_OR_RETURN(
      c.head_dim, ArchUint(f, arch, "attention.key_length",
                           c.hidden_size / c.num_heads));
  for (const char* key : {"attention.value_length", "rope.dimension_count"}) {
    OCTET_ASSIGN_OR_RETURN(const int64_t v,
                           ArchUint(f, arch, key, c.head_dim));
    if (v != c.head_dim) {
      return absl::InvalidArgumentError(absl::StrCat(
          f.path(), ": metadata '", arch, ".", key, "' is ", v,
          " but the head dimension is ", c.head_dim,
          "; octet needs them equal"));
    }
  }
  return absl::OkStatus();
}

// BOS and the ids that end a sequence, from the tokenizer metadata.
void ReadSpecialIds(const GgufFile& f, ModelConfig& c) {
  if (f.FindValue("tokenizer.ggml.bos_token_id") != nullptr) {
    c.bos_token_id = f.GetUint("tokenizer.ggml.bos_token_id").value_or(0);
  }
  for (const char* key : {"tokenizer.ggml.eos_token_id",
                          "tokenizer.ggml.eot_token_id",
                          "tokenizer.ggml.eom_token_id"}) {
    if (f.FindValue(key) == nullptr) continue;
    absl::StatusOr<uint64_t> id = f.GetUint(key);
    if (id.ok() && std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(),
                             static_cast<int64_t>(*id)) ==
                       c.eos_token_ids.end()) {
      c.eos_token_ids.push_back(static_cast<int64_t>(*id));
    }
  }
}

// F32 when any 2-D weight must be decoded (or is F32), else theirs.
DType CheckpointDType(const GgufFile& f) {
  std::optional<DType> common;
  for (const GgufTensorInfo& t : f.contents().tensors) {
    if (t.dims.size() < 2) continue;
    const DType d = t.type == GgmlType::kF16    ? DType::kF16
                    : t.type == GgmlType::kBf16 ? DType::kBf16
                                                : DType::kF32;
    if (common.has_value() && *common != d) return DType::kF32;
    common = d;
  }
  return common.value_or(DType::kF32);
}

absl::StatusOr<int64_t> VocabularyOf(const GgufFile& f,
                                     const std::string& arch, int64_t hidden) {
  const GgufTensorInfo* embd = f.FindTensor("token_embd.weight");
  if (embd == nullptr || embd->dims.size() != 2 || embd->dims[0] != hidden) {
    return absl::InvalidArgumentError(
        absl::StrCat(f.path(), ": no tensor 'token_embd.weight' of [",
                     hidden, ", vocabulary] values"));
  }
  OCTET_ASSIGN_OR_RETURN(const int64_t vocab,
                         ArchUint(f, arch, "vocab_size", embd->dims[1]));
  if (vocab != embd->dims[1]) {
    return absl::InvalidArgumentError(absl::StrCat(
        f.path(), ": metadata '", arch, ".vocab_size' is ", vocab,
        " but token_embd.weight has ", embd->dims[1], " rows"));
  }
  return vocab;
}

}  // namespace

absl::StatusOr<ModelConfig> GgufModelConfig(const GgufFile& f) {
  OCTET_ASSIGN_OR_RETURN(const GgufArchitecture* a, ArchitectureOf(f));
  const std::string arch = a->gguf;
  OCTET_RETURN_IF_ERROR(RefuseUnsupported(f, arch));
  ModelConfig c;
  c.architecture = a->hf;
  c.qkv_bias = a->qkv_bias;
  OCTET_ASSIGN_OR_RETURN(c.num_layers, ArchUint(f, arch, "block_count", {}));
  OCTET_ASSIGN_OR_RETURN(c.hidden_size,
                         ArchUint(f, arch, "embedding_length", {}));
  OCTET_ASSIGN_OR_RETURN(c.intermediate_size,
                         ArchUint(f, arch, "feed_forward_length", {}));
  OCTET_ASSIGN_OR_RETURN(c.num_heads,
                         ArchUint(f, arch, "attention.head_count", {}));
  OCTET_ASSIGN_OR_RETURN(
      c.num_kv_heads, ArchUint(f, arch, "attention.head_count_kv", c.num_heads));
  OCTET_ASSIGN_OR_RETURN(c.max_position_embeddings,
                         ArchUint(f, arch, "context_length", {}));
  OCTET_RETURN_IF_ERROR(ReadHeadDim(f, arch, c));
  OCTET_RETURN_IF_ERROR(ReadRopeFreqFactors(f, c));
  OCTET_ASSIGN_OR_RETURN(c.rms_norm_eps,
                         f.GetFloat(arch + ".attention.layer_norm_rms_epsilon"));
  if (f.FindValue(arch + ".rope.freq_base") != nullptr) {
    OCTET_ASSIGN_OR_RETURN(c.rope_theta, f.GetFloat(arch + ".rope.freq_base"));
  }
  OCTET_ASSIGN_OR_RETURN(c.vocab_size, VocabularyOf(f, arch, c.hidden_size));
  c.tie_word_embeddings = f.FindTensor("output.weight") == nullptr;
  c.torch_dtype = CheckpointDType(f);
  ReadSpecialIds(f, c);
  std::vector<int64_t> special = c.eos_token_ids;
  if (c.bos_token_id) special.push_back(*c.bos_token_id);
  for (int64_t id : special) {
    if (id >= c.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          f.path(), ": tokenizer.ggml's special token id ", id,
          " is outside the vocabulary of ", c.vocab_size));
    }
  }
  if (!(c.rms_norm_eps > 0) || !(c.rope_theta > 0) ||
      c.num_heads % c.num_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        f.path(), ": the attention metadata does not describe a model (eps ",
        c.rms_norm_eps, ", RoPE base ", c.rope_theta, ", ", c.num_heads,
        " heads, ", c.num_kv_heads, " KV heads)"));
  }
  return c;
}

absl::StatusOr<std::unique_ptr<GgufCheckpoint>> GgufCheckpoint::Open(
    const std::string& path) {
  OCTET_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::Open(path));
  OCTET_ASSIGN_OR_RETURN(ModelConfig config, GgufModelConfig(*file));
  std::unique_ptr<GgufCheckpoint> ckpt(
      new GgufCheckpoint(path, std::move(config), std::move(file)));
  OCTET_RETURN_IF_ERROR(ckpt->MapNames());
  OCTET_RETURN_IF_ERROR(ckpt->Validate());
  return ckpt;
}

absl::Status GgufCheckpoint::MapNames() {
  const bool interleaved = config().architecture == "LlamaForCausalLM";
  for (const ExpectedTensor& want : ExpectedTensors(config())) {
    const std::string gguf = GgufName(want);
    const GgufTensorInfo* t = file_->FindTensor(gguf);
    if (t == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(dir(), ": tensor '", gguf, "' is missing"));
    }
    Entry e{t, 0};
    const auto* role = std::get_if<LayerTensor>(&want.role);
    if (interleaved && role != nullptr) {
      if (*role == LayerTensor::kQ) e.rotary_heads = config().num_heads;
      if (*role == LayerTensor::kK) e.rotary_heads = config().num_kv_heads;
    }
    entries_[want.name] = e;
  }
  // Every tensor of the file is one octet uses (rope_freqs.weight is read
  // into the config): another is a part of a model octet would silently
  // leave out.
  const size_t in_config = config().rope_freq_factors.empty() ? 0 : 1;
  if (file_->contents().tensors.size() != entries_.size() + in_config) {
    std::vector<std::string> extra;
    for (const GgufTensorInfo& t : file_->contents().tensors) {
      const bool used = std::any_of(entries_.begin(), entries_.end(),
                                    [&](auto& e) { return e.second.tensor == &t; });
      if (!used && !(in_config == 1 && t.name == kRopeFreqs)) {
        extra.push_back(t.name);
      }
    }
    return absl::InvalidArgumentError(
        absl::StrCat(dir(), ": tensors octet's ", config().architecture,
                     " has no use for: ", absl::StrJoin(extra, ", ")));
  }
  return absl::OkStatus();
}

const std::vector<float>& GgufCheckpoint::Decoded(const std::string& name,
                                                  const Entry& e) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::unique_ptr<std::vector<float>>& slot = decoded_[name];
  if (slot != nullptr) return *slot;
  const GgufTensorInfo& t = *e.tensor;
  std::vector<float> values(t.num_elements());
  DequantizeGgml(t.type, file_->Data(t), t.num_elements(), values.data());
  if (e.rotary_heads > 0) {
    // llama.cpp stored row (head, i, half) where Hugging Face has
    // (head, half, i), i < head_dim / 2: put each row back.
    const int64_t cols = t.dims[0], rows = t.num_elements() / cols;
    const int64_t head_dim = rows / e.rotary_heads, half = head_dim / 2;
    std::vector<float> out(values.size());
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t head = r / head_dim, k = (r % head_dim) / half,
                    i = r % half;
      const int64_t from = head * head_dim + 2 * i + k;
      std::copy_n(values.begin() + from * cols, cols,
                  out.begin() + r * cols);
    }
    values = std::move(out);
  }
  slot = std::make_unique<std::vector<float>>(std::move(values));
  return *slot;
}

absl::StatusOr<TensorView> GgufCheckpoint::Describe(
    absl::string_view name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) {
    return absl::NotFoundError(
        absl::StrCat(dir(), ": no tensor '", name, "'"));
  }
  const Entry& e = it->second;
  const GgufTensorInfo& t = *e.tensor;
  TensorView v;
  v.name = std::string(name);
  v.file = dir();
  v.shape.assign(t.dims.rbegin(), t.dims.rend());
  // Float tensors whose rows stay put are served as stored; the rest are
  // decoded to binary32.
  v.dtype = e.rotary_heads > 0           ? DType::kF32
            : t.type == GgmlType::kF16  ? DType::kF16
            : t.type == GgmlType::kBf16 ? DType::kBf16
                                        : DType::kF32;
  return v;
}

absl::StatusOr<TensorView> GgufCheckpoint::Get(absl::string_view name) const {
  OCTET_ASSIGN_OR_RETURN(TensorView v, Describe(name));
  const Entry& e = entries_.find(name)->second;
  const GgufTensorInfo& t = *e.tensor;
  const bool stored_as_float = t.type == GgmlType::kF32 ||
                               t.type == GgmlType::kF16 ||
                               t.type == GgmlType::kBf16;
  if (stored_as_float && e.rotary_heads == 0) {
    v.bytes = file_->Data(t);
    return v;
  }
  const std::vector<float>& values = Decoded(v.name, e);
  v.bytes = absl::Span<const uint8_t>(
      reinterpret_cast<const uint8_t*>(values.data()), 4 * values.size());
  return v;
}

bool GgufCheckpoint::Has(absl::string_view name) const {
  return entries_.contains(name);
}

std::vector<std::string> GgufCheckpoint::TensorNames() const {
  std::vector<std::string> names;
  for (const auto& [name, e] : entries_) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

void GgufCheckpoint::ReleasePages(absl::string_view name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) return;
  file_->ReleasePages(*it->second.tensor);
  std::lock_guard<std::mutex> lock(mu_);
  decoded_.erase(std::string(name));
}

}  // namespace octet
