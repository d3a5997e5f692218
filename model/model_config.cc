#include "model/model_config.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string>
#include <tuple>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "base/file_util.h"
#include "nlohmann/json.hpp"

namespace octet {
namespace {

using Json = nlohmann::json;

// Field access with errors that name the file and the field.
class Reader {
 public:
  Reader(const Json& root, absl::string_view path) : root_(root), path_(path) {}

  absl::Status Error(absl::string_view field, absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ": field '", field, "' ", what));
  }

  const Json* Find(const char* field) const {
    auto it = root_.find(field);
    return it == root_.end() || it->is_null() ? nullptr : &*it;
  }

  absl::StatusOr<int64_t> PositiveInt(const char* field) const {
    const Json* v = Find(field);
    if (v == nullptr) return Error(field, "is missing");
    return PositiveInt(field, *v);
  }
  absl::StatusOr<int64_t> PositiveInt(const char* field, const Json& v) const {
    if (!v.is_number_integer() || v.get<int64_t>() <= 0 ||
        v.get<int64_t>() >= (int64_t{1} << 31)) {
      return Error(field, "must be a positive integer (below 2^31)");
    }
    return v.get<int64_t>();
  }

  absl::StatusOr<double> PositiveNumber(const char* field,
                                        double fallback) const {
    const Json* v = Find(field);
    if (v == nullptr) return fallback;
    if (!v->is_number() || !(v->get<double>() > 0) ||
        !std::isfinite(v->get<double>())) {
      return Error(field, "must be a positive finite number");
    }
    return v->get<double>();
  }

  absl::StatusOr<bool> Bool(const char* field, bool fallback) const {
    const Json* v = Find(field);
    if (v == nullptr) return fallback;
    if (!v->is_boolean()) return Error(field, "must be true or false");
    return v->get<bool>();
  }

 private:
  const Json& root_;
  absl::string_view path_;
};

// Reads torch_dtype, or dtype as transformers >= 5 names it: bfloat16 when
// both are absent.
absl::StatusOr<DType> ParseTorchDType(const Reader& r) {
  const char* field =
      r.Find("torch_dtype") != nullptr ? "torch_dtype" : "dtype";
  const Json* v = r.Find(field);
  if (v == nullptr) return DType::kBf16;
  if (v->is_string()) {
    const std::string s = v->get<std::string>();
    if (s == "float32") return DType::kF32;
    if (s == "bfloat16") return DType::kBf16;
    if (s == "float16") return DType::kF16;
  }
  return r.Error(field, "must be float32, bfloat16 or float16");
}

// The architectures octet serves, with what sets each apart.
struct Architecture {
  const char* name;
  const char* model_type;
  bool qkv_bias, qk_norm;
  int64_t default_head_dim;  // 0: hidden_size / num_attention_heads
};
constexpr Architecture kArchitectures[] = {
    {"LlamaForCausalLM", "llama", false, false, 0},
    {"MistralForCausalLM", "mistral", false, false, 0},
    {"Qwen2ForCausalLM", "qwen2", true, false, 0},
    // transformers' Qwen3Config: head_dim 128 unless given.
    {"Qwen3ForCausalLM", "qwen3", false, true, 128},
};

const Architecture* FindArchitecture(absl::string_view name) {
  for (const Architecture& a : kArchitectures) {
    if (name == a.name) return &a;
  }
  return nullptr;
}

// Reads "architectures": exactly one, and one octet serves.
absl::Status ReadArchitecture(const Reader& r, ModelConfig* c) {
  const Json* arch = r.Find("architectures");
  if (arch == nullptr || !arch->is_array() || arch->size() != 1 ||
      !(*arch)[0].is_string()) {
    return r.Error("architectures", "must list exactly one architecture");
  }
  c->architecture = (*arch)[0].get<std::string>();
  const Architecture* a = FindArchitecture(c->architecture);
  if (a == nullptr) {
    std::string names;
    for (const Architecture& known : kArchitectures) {
      absl::StrAppend(&names, names.empty() ? "" : ", ", known.name);
    }
    return r.Error("architectures", absl::StrCat("names ", c->architecture,
                                                 "; octet serves ", names));
  }
  c->qkv_bias = a->qkv_bias;
  c->qk_norm = a->qk_norm;
  return absl::OkStatus();
}

// Reads the layer sizes and head counts, and derives head_dim when absent.
absl::Status ReadShape(const Reader& r, ModelConfig* c) {
  OCTET_ASSIGN_OR_RETURN(c->hidden_size, r.PositiveInt("hidden_size"));
  OCTET_ASSIGN_OR_RETURN(c->num_layers, r.PositiveInt("num_hidden_layers"));
  OCTET_ASSIGN_OR_RETURN(c->num_heads, r.PositiveInt("num_attention_heads"));
  OCTET_ASSIGN_OR_RETURN(c->intermediate_size,
                         r.PositiveInt("intermediate_size"));
  OCTET_ASSIGN_OR_RETURN(c->vocab_size, r.PositiveInt("vocab_size"));
  OCTET_ASSIGN_OR_RETURN(c->max_position_embeddings,
                         r.PositiveInt("max_position_embeddings"));
  c->num_kv_heads = c->num_heads;
  if (const Json* v = r.Find("num_key_value_heads")) {
    OCTET_ASSIGN_OR_RETURN(c->num_kv_heads,
                           r.PositiveInt("num_key_value_heads", *v));
  }
  if (c->num_heads % c->num_kv_heads != 0) {
    return r.Error(
        "num_key_value_heads",
        absl::StrCat("(", c->num_kv_heads,
                     ") must divide num_attention_heads (", c->num_heads, ")"));
  }
  if (const Json* v = r.Find("head_dim")) {
    OCTET_ASSIGN_OR_RETURN(c->head_dim, r.PositiveInt("head_dim", *v));
  } else if (const int64_t d =
                 FindArchitecture(c->architecture)->default_head_dim) {
    c->head_dim = d;
  } else {
    if (c->hidden_size % c->num_heads != 0) {
      return r.Error("hidden_size",
                     "must be a multiple of num_attention_heads "
                     "when head_dim is not given");
    }
    c->head_dim = c->hidden_size / c->num_heads;
  }
  if (c->head_dim % 2 != 0) return r.Error("head_dim", "must be even (RoPE)");
  return absl::OkStatus();
}

// Bounds on every size, far above any Llama-family model (Llama 3.1 405B:
// hidden 16384, 126 layers, 128 heads, MLP 53248, vocabulary 128256), so
// that a corrupt or hostile config.json is refused here, before anything
// is sized from it (a loader would otherwise list or allocate, e.g., 2^31
// layers' tensors before it looks at one).
absl::Status CheckSizeBounds(const Reader& r, const ModelConfig& c) {
  for (const auto& [value, field, bound] :
       {std::tuple<int64_t, const char*, int64_t>{c.hidden_size, "hidden_size",
                                                  int64_t{1} << 16},
        {c.num_layers, "num_hidden_layers", 1024},
        {c.num_heads, "num_attention_heads", 1024},
        {c.head_dim, "head_dim", 1024},
        {c.intermediate_size, "intermediate_size", int64_t{1} << 18},
        {c.vocab_size, "vocab_size", int64_t{1} << 22},
        {c.max_position_embeddings, "max_position_embeddings",
         int64_t{1} << 24}}) {
    if (value > bound) {
      return r.Error(
          field, absl::StrCat("is ", value, "; octet takes at most ", bound));
    }
  }
  return absl::OkStatus();
}

// Reads the numerics (eps, tying, dtype) and refuses the activations and
// biases octet does not implement.
absl::Status ReadNumerics(const Reader& r, ModelConfig* c) {
  OCTET_ASSIGN_OR_RETURN(c->rms_norm_eps,
                         r.PositiveNumber("rms_norm_eps", 1e-6));
  OCTET_ASSIGN_OR_RETURN(c->tie_word_embeddings,
                         r.Bool("tie_word_embeddings", false));
  OCTET_ASSIGN_OR_RETURN(c->torch_dtype, ParseTorchDType(r));
  if (const Json* act = r.Find("hidden_act");
      act != nullptr &&
      !(act->is_string() && act->get<std::string>() == "silu")) {
    return r.Error("hidden_act", "must be silu");
  }
  for (const char* bias : {"attention_bias", "mlp_bias"}) {
    OCTET_ASSIGN_OR_RETURN(const bool b, r.Bool(bias, false));
    if (b) return r.Error(bias, "is true; biases are not supported");
  }
  return absl::OkStatus();
}

// Reads the fields of a "llama3" rope_scaling (or rope_parameters) object.
absl::StatusOr<RopeScaling> ReadLlama3Scaling(const Json& rs,
                                              absl::string_view path,
                                              absl::string_view field) {
  const std::string rs_path = absl::StrCat(path, ": ", field);
  const Reader rr(rs, rs_path);
  RopeScaling s;
  OCTET_ASSIGN_OR_RETURN(s.factor, rr.PositiveNumber("factor", 0));
  OCTET_ASSIGN_OR_RETURN(s.low_freq_factor,
                         rr.PositiveNumber("low_freq_factor", 1.0));
  OCTET_ASSIGN_OR_RETURN(s.high_freq_factor,
                         rr.PositiveNumber("high_freq_factor", 4.0));
  OCTET_ASSIGN_OR_RETURN(s.original_max_position_embeddings,
                         rr.PositiveInt("original_max_position_embeddings"));
  if (s.factor == 0) return rr.Error("factor", "is missing");
  if (!(s.high_freq_factor > s.low_freq_factor)) {
    return rr.Error("high_freq_factor", "must exceed low_freq_factor");
  }
  return s;
}

// Reads one RoPE scaling object, `field`: rope_scaling (transformers < 5)
// or rope_parameters (transformers >= 5, where a missing rope_type is
// "default"). Absent or "default" is plain RoPE (nullopt), "llama3" is
// supported, any other type is an error.
absl::StatusOr<std::optional<RopeScaling>> ReadScalingObject(
    const Reader& r, absl::string_view path, const char* field) {
  const Json* rs = r.Find(field);
  if (rs == nullptr) return std::nullopt;
  if (!rs->is_object()) return r.Error(field, "must be an object");
  for (const auto& [key, value] : rs->items()) {
    if (value.is_object()) {  // per layer type ("full_attention": {...})
      return r.Error(field, absl::StrCat("holds an object, '", key,
                                         "': RoPE per layer type is not "
                                         "supported"));
    }
  }
  std::string type = std::string(field) == "rope_parameters" ? "default" : "";
  for (const char* key : {"rope_type", "type"}) {
    auto it = rs->find(key);
    if (it != rs->end() && it->is_string()) type = it->get<std::string>();
  }
  if (type == "default") return std::nullopt;  // Plain RoPE, as if absent.
  if (type != "llama3") {
    return r.Error(field,
                   absl::StrCat("type '", type, "' is not supported (llama3)"));
  }
  return ReadLlama3Scaling(*rs, path, field);
}

// rope_theta: top-level (transformers < 5) or in rope_parameters
// (transformers >= 5); 10000 when absent. Both given must agree.
absl::StatusOr<double> ReadRopeTheta(const Reader& r, absl::string_view path) {
  OCTET_ASSIGN_OR_RETURN(const double top, r.PositiveNumber("rope_theta", 0));
  double inner = 0;
  if (const Json* p = r.Find("rope_parameters"); p != nullptr) {
    if (!p->is_object()) return r.Error("rope_parameters", "must be an object");
    const Reader pr(*p, absl::StrCat(path, ": rope_parameters"));
    OCTET_ASSIGN_OR_RETURN(inner, pr.PositiveNumber("rope_theta", 0));
  }
  if (top > 0 && inner > 0 && top != inner) {
    return r.Error("rope_theta", "differs from rope_parameters' rope_theta");
  }
  return top > 0 ? top : inner > 0 ? inner : 10000.0;
}

bool SameScaling(const std::optional<RopeScaling>& a,
                 const std::optional<RopeScaling>& b) {
  if (!a || !b) return a.has_value() == b.has_value();
  return std::tie(a->factor, a->low_freq_factor, a->high_freq_factor,
                  a->original_max_position_embeddings) ==
         std::tie(b->factor, b->low_freq_factor, b->high_freq_factor,
                  b->original_max_position_embeddings);
}

// Reads RoPE's base and scaling, as transformers < 5 writes them (rope_theta,
// rope_scaling) or as transformers >= 5 does (rope_parameters: rope_type,
// rope_theta and the scaling's fields in one object). Both given must agree.
absl::Status ReadRope(const Reader& r, absl::string_view path, ModelConfig* c) {
  OCTET_ASSIGN_OR_RETURN(c->rope_theta, ReadRopeTheta(r, path));
  OCTET_ASSIGN_OR_RETURN(const std::optional<RopeScaling> legacy,
                         ReadScalingObject(r, path, "rope_scaling"));
  OCTET_ASSIGN_OR_RETURN(const std::optional<RopeScaling> params,
                         ReadScalingObject(r, path, "rope_parameters"));
  if (r.Find("rope_scaling") != nullptr &&
      r.Find("rope_parameters") != nullptr && !SameScaling(legacy, params)) {
    return r.Error("rope_scaling", "differs from rope_parameters");
  }
  c->rope_scaling = legacy ? legacy : params;
  return absl::OkStatus();
}

// Reads Mistral's sliding_window. As transformers: only Mistral has one
// window for every layer (LlamaConfig has no such field), 4096 when the key
// is absent, none when it is null. Qwen2 and Qwen3 window only the layers
// above max_window_layers, and only with use_sliding_window, which octet
// refuses.
absl::Status ReadSlidingWindow(const Json& root, const Reader& r,
                               ModelConfig* c) {
  if (c->architecture == "Qwen2ForCausalLM" ||
      c->architecture == "Qwen3ForCausalLM") {
    OCTET_ASSIGN_OR_RETURN(const bool windowed,
                           r.Bool("use_sliding_window", false));
    if (windowed) {
      return r.Error("use_sliding_window",
                     "is true; per-layer sliding windows are not supported");
    }
    return absl::OkStatus();
  }
  if (c->architecture != "MistralForCausalLM") return absl::OkStatus();
  int64_t w = 4096;
  if (!root.contains("sliding_window")) {
    // the default
  } else if (const Json* sw = r.Find("sliding_window")) {
    OCTET_ASSIGN_OR_RETURN(w, r.PositiveInt("sliding_window", *sw));
  } else {
    w = 0;  // null
  }
  if (w > 0 && w < c->max_position_embeddings) c->sliding_window = w;
  return absl::OkStatus();
}

// Reads bos_token_id and eos_token_id (one id or a list), all below
// vocab_size.
absl::Status ReadSpecialTokens(const Reader& r, ModelConfig* c) {
  if (const Json* v = r.Find("bos_token_id")) {
    if (!v->is_number_integer() || v->get<int64_t>() < 0) {
      return r.Error("bos_token_id", "must be a token id");
    }
    c->bos_token_id = v->get<int64_t>();
  }
  if (const Json* v = r.Find("eos_token_id")) {
    const Json list = v->is_array() ? *v : Json::array({*v});
    for (const Json& id : list) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
          id.get<int64_t>() >= c->vocab_size) {
        return r.Error("eos_token_id", "must be token ids below vocab_size");
      }
      c->eos_token_ids.push_back(id.get<int64_t>());
    }
  }
  if (c->bos_token_id && *c->bos_token_id >= c->vocab_size) {
    return r.Error("bos_token_id", "must be below vocab_size");
  }
  return absl::OkStatus();
}

// The names in a JSON array of strings (anything else skipped).
std::vector<std::string> StringList(const Json& q, const char* key) {
  std::vector<std::string> out;
  auto it = q.find(key);
  if (it == q.end() || !it->is_array()) return out;
  for (const Json& name : *it) {
    if (name.is_string()) out.push_back(name.get<std::string>());
  }
  return out;
}

// A compiled "re:" entry of an ignore list, or null with `error` set.
struct IgnorePattern {
  explicit IgnorePattern(absl::string_view pattern) {
    int code = 0;
    PCRE2_SIZE offset = 0;
    regex = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()),
                          pattern.size(), PCRE2_UTF, &code, &offset, nullptr);
    if (regex == nullptr) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(code, message, sizeof(message));
      error = absl::StrCat("does not compile at ", offset, ": ",
                           reinterpret_cast<char*>(message));
    }
  }
  ~IgnorePattern() { pcre2_code_free(regex); }
  // A match starting at the name's first character (re.match).
  bool MatchesStartOf(absl::string_view name) const {
    if (regex == nullptr) return false;
    pcre2_match_data* data =
        pcre2_match_data_create_from_pattern(regex, nullptr);
    const int rc = pcre2_match(regex, reinterpret_cast<PCRE2_SPTR>(name.data()),
                               name.size(), 0, PCRE2_ANCHORED, data, nullptr);
    pcre2_match_data_free(data);
    return rc >= 0;
  }

  pcre2_code* regex = nullptr;
  std::string error;
};

// Every "re:" entry of an ignore list must compile.
absl::Status CheckIgnorePatterns(const Reader& r, const char* field,
                                 const std::vector<std::string>& entries) {
  for (const std::string& e : entries) {
    if (!absl::StartsWith(e, "re:")) continue;
    const IgnorePattern p(absl::string_view(e).substr(3));
    if (p.regex == nullptr) {
      return r.Error("quantization_config",
                     absl::StrCat(field, ": '", e, "' ", p.error));
    }
  }
  return absl::OkStatus();
}

// vLLM's layout: quant_method "fp8", activation_scheme, ignored_layers.
absl::Status ReadVllmFp8(const Reader& r, const Json& q, ModelConfig* c) {
  if (q.contains("weight_block_size") && !q["weight_block_size"].is_null()) {
    return r.Error("quantization_config",
                   "weight_block_size: block-wise FP8 is not supported "
                   "(per-tensor scales only)");
  }
  Fp8CheckpointConfig fp8;
  auto scheme = q.find("activation_scheme");
  const std::string s = scheme != q.end() && scheme->is_string()
                            ? scheme->get<std::string>()
                            : "";
  if (s != "dynamic" && s != "static") {
    return r.Error("quantization_config",
                   "activation_scheme must be \"dynamic\" or \"static\"");
  }
  fp8.static_activations = s == "static";
  fp8.ignored_layers = StringList(q, "ignored_layers");
  OCTET_RETURN_IF_ERROR(
      CheckIgnorePatterns(r, "ignored_layers", fp8.ignored_layers));
  c->fp8 = fp8;
  return absl::OkStatus();
}

// One quantization args object of a compressed-tensors config group
// ("weights" or "input_activations"): 8-bit float, symmetric, no groups or
// blocks, with a strategy octet runs ("tensor" or `other`). `field` names it
// in errors. Whether it is `other`.
absl::StatusOr<bool> ReadCompressedTensorsArgs(const Reader& r,
                                               const Json& args,
                                               const std::string& field,
                                               const std::string& other) {
  if (!args.is_object()) return r.Error(field, "must be an object");
  if (args.value("num_bits", 0) != 8 || args.value("type", "") != "float") {
    return r.Error(field,
                   "must be 8-bit float (num_bits 8, type \"float\"): only "
                   "FP8 compressed-tensors checkpoints are supported");
  }
  if (!args.value("symmetric", true)) {
    return r.Error(field, "must be symmetric (FP8 has no zero point)");
  }
  for (const char* key : {"group_size", "block_structure"}) {
    if (args.contains(key) && !args[key].is_null()) {
      return r.Error(field, absl::StrCat(key,
                                         ": group- and block-wise "
                                         "scales are not supported"));
    }
  }
  const std::string strategy = args.value("strategy", "");
  if (strategy != "tensor" && strategy != other) {
    return r.Error(field, absl::StrCat("strategy '", strategy,
                                       "' is not supported (\"tensor\" or \"",
                                       other, "\")"));
  }
  return strategy == other;
}

// llm-compressor's layout: quant_method "compressed-tensors", format
// "float-quantized", one config group targeting Linear layers.
absl::Status ReadCompressedTensors(const Reader& r, const Json& q,
                                   ModelConfig* c) {
  const std::string format = q.value("format", "");
  if (format != "float-quantized") {
    return r.Error(
        "quantization_config",
        absl::StrCat("format '", format,
                     "' is not supported (FP8: \"float-quantized\")"));
  }
  const std::string status = q.value("quantization_status", "compressed");
  if (status != "compressed") {
    return r.Error("quantization_config",
                   absl::StrCat("quantization_status '", status,
                                "': the weights must be stored compressed"));
  }
  if (q.contains("kv_cache_scheme") && !q["kv_cache_scheme"].is_null()) {
    return r.Error("quantization_config",
                   "kv_cache_scheme: an FP8 KV cache is not supported");
  }
  const Json& groups = q.value("config_groups", Json());
  if (!groups.is_object() || groups.size() != 1) {
    return r.Error("quantization_config",
                   "config_groups must hold exactly one group");
  }
  // (Not `*groups.items().begin()`: that entry refers to a temporary
  // iterator, gone at the end of the statement; ASan caught it.)
  const std::string name = groups.begin().key();
  const Json& group = groups.begin().value();
  const std::string field = "quantization_config.config_groups." + name;
  const std::vector<std::string> targets = StringList(group, "targets");
  if (targets != std::vector<std::string>{"Linear"}) {
    return r.Error(field, "targets must be [\"Linear\"]");
  }
  Fp8CheckpointConfig fp8;
  fp8.layout = Fp8CheckpointConfig::Layout::kCompressedTensors;
  OCTET_ASSIGN_OR_RETURN(
      fp8.weight_per_channel,
      ReadCompressedTensorsArgs(r, group.value("weights", Json()),
                                field + ".weights", "channel"));
  if (group.value("weights", Json()).value("dynamic", false)) {
    return r.Error(field + ".weights", "must not be dynamic");
  }
  const Json& input = group.value("input_activations", Json());
  if (input.is_null()) {
    return r.Error(field,
                   "has no input_activations: weight-only FP8 is not "
                   "supported");
  }
  OCTET_ASSIGN_OR_RETURN(fp8.activation_per_token,
                         ReadCompressedTensorsArgs(
                             r, input, field + ".input_activations", "token"));
  fp8.static_activations = !input.value("dynamic", true);
  if (fp8.activation_per_token && fp8.static_activations) {
    return r.Error(field + ".input_activations",
                   "per-token scales must be dynamic");
  }
  if (group.contains("output_activations") &&
      !group["output_activations"].is_null()) {
    return r.Error(field, "output_activations are not supported");
  }
  fp8.ignored_layers = StringList(q, "ignore");
  OCTET_RETURN_IF_ERROR(CheckIgnorePatterns(r, "ignore", fp8.ignored_layers));
  c->fp8 = fp8;
  return absl::OkStatus();
}

// Reads quantization_config: absent, or FP8 with per-tensor scales in the
// vLLM or the compressed-tensors layout.
absl::Status ReadQuantizationConfig(const Reader& r, ModelConfig* c) {
  const Json* q = r.Find("quantization_config");
  if (q == nullptr) return absl::OkStatus();
  if (!q->is_object()) {
    return r.Error("quantization_config", "must be an object");
  }
  const std::string method = q->value("quant_method", "");
  try {  // (a field of the wrong JSON type throws)
    if (method == "fp8") return ReadVllmFp8(r, *q, c);
    if (method == "compressed-tensors") return ReadCompressedTensors(r, *q, c);
  } catch (const Json::exception& e) {
    return r.Error("quantization_config", e.what());
  }
  return r.Error("quantization_config",
                 absl::StrCat("quant_method '", method,
                              "' is not supported (\"fp8\" or "
                              "\"compressed-tensors\")"));
}

}  // namespace

absl::StatusOr<ModelConfig> ParseModelConfig(absl::string_view json,
                                             absl::string_view path) {
  const Json root = Json::parse(json.begin(), json.end(), nullptr,
                                /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a well-formed JSON object"));
  }
  const Reader r(root, path);
  ModelConfig c;
  OCTET_RETURN_IF_ERROR(ReadArchitecture(r, &c));
  OCTET_RETURN_IF_ERROR(ReadShape(r, &c));
  OCTET_RETURN_IF_ERROR(CheckSizeBounds(r, c));
  OCTET_RETURN_IF_ERROR(ReadNumerics(r, &c));
  OCTET_RETURN_IF_ERROR(ReadRope(r, path, &c));
  OCTET_RETURN_IF_ERROR(ReadSlidingWindow(root, r, &c));
  OCTET_RETURN_IF_ERROR(ReadSpecialTokens(r, &c));
  OCTET_RETURN_IF_ERROR(ReadQuantizationConfig(r, &c));
  return c;
}

bool IsIgnoredLayer(const Fp8CheckpointConfig& fp8, absl::string_view module) {
  for (const std::string& e : fp8.ignored_layers) {
    if (e == module) return true;
    if (absl::StartsWith(e, "re:") &&
        IgnorePattern(absl::string_view(e).substr(3)).MatchesStartOf(module)) {
      return true;  // (a pattern that does not compile matches nothing)
    }
  }
  return false;
}

absl::Status CheckTensorParallelSplit(const ModelConfig& c, int size) {
  if (size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor parallelism over ", size, " ranks"));
  }
  for (const auto& [value, name] :
       {std::pair<int64_t, const char*>{c.num_heads, "num_attention_heads"},
        {c.intermediate_size, "intermediate_size"},
        {c.vocab_size, "vocab_size"}}) {
    if (value % size != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " = ", value, " does not divide by the ", size,
                       " tensor-parallel ranks"));
    }
  }
  if (c.num_kv_heads % size != 0 && size % c.num_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_key_value_heads = ", c.num_kv_heads, " and the ", size,
        " tensor-parallel ranks: one must divide the other"));
  }
  return absl::OkStatus();
}

namespace {

// a * b * ..., saturating at INT64_MAX (the factors are >= 0).
int64_t SaturatingProduct(std::initializer_list<int64_t> factors) {
  int64_t out = 1;
  for (int64_t f : factors) {
    if (__builtin_mul_overflow(out, f, &out)) {
      return std::numeric_limits<int64_t>::max();
    }
  }
  return out;
}

int64_t SaturatingSum(int64_t a, int64_t b) {
  int64_t out = 0;
  return __builtin_add_overflow(a, b, &out)
             ? std::numeric_limits<int64_t>::max()
             : out;
}

}  // namespace

int64_t MemoryNeed::total() const { return SaturatingSum(weights, kv_cache); }

MemoryNeed LeastMemoryNeed(const ModelConfig& c, int tp, int weight_bytes,
                           int64_t kv_tokens) {
  const int64_t q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
  // q, k, v, o and the MLP's gate, up and down, per layer.
  const int64_t per_layer = c.hidden_size * (2 * q + 2 * kv) +
                            3 * c.hidden_size * c.intermediate_size;
  int64_t linear = SaturatingProduct({per_layer, c.num_layers});
  if (!c.tie_word_embeddings) {  // lm_head
    linear = SaturatingSum(linear, c.vocab_size * c.hidden_size);
  }
  MemoryNeed need;
  need.weights = SaturatingSum(SaturatingProduct({linear, weight_bytes}),
                               c.vocab_size * c.hidden_size * 2);
  // KV heads per rank: a share, or one (replicated) when ranks outnumber them.
  const int64_t heads = std::max<int64_t>(1, c.num_kv_heads / tp);
  need.kv_cache = SaturatingProduct(
      {tp, kv_tokens, c.num_layers, 2, heads, c.head_dim, 2});
  return need;
}

absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& model_dir) {
  constexpr size_t kMaxConfigBytes = size_t{16} << 20;  // real ones: ~1 KB
  const std::string path = absl::StrCat(model_dir, "/config.json");
  OCTET_ASSIGN_OR_RETURN(const std::string text,
                         ReadSmallFile(path, kMaxConfigBytes));
  return ParseModelConfig(text, path);
}

absl::StatusOr<std::string> ResolveQuantization(absl::string_view flag,
                                                const ModelConfig& config,
                                                absl::string_view model_dir) {
  const bool fp8_checkpoint = config.fp8.has_value();
  if (flag == "auto") return fp8_checkpoint ? "fp8" : "none";
  if (flag == "fp8") return "fp8";
  if (flag != "none") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--quantization must be auto, fp8 or none, not '", flag, "'"));
  }
  if (fp8_checkpoint) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--quantization none, but ", model_dir,
        " is an FP8 checkpoint (config.json's quantization_config): its "
        "weights are e4m3 codes; serve it with --quantization fp8 or auto"));
  }
  return "none";
}

std::string QuantizationScheme(const ModelConfig& config,
                               absl::string_view method) {
  if (method != "fp8") return "none";
  if (!config.fp8) return "fp8-tensor";  // quantized at load
  const Fp8CheckpointConfig& f = *config.fp8;
  return absl::StrCat("fp8-", f.weight_per_channel ? "channel" : "tensor",
                      f.activation_per_token ? "-token"
                      : f.static_activations ? "-static"
                                             : "");
}

std::string ModelConfigToJson(const ModelConfig& c) {
  nlohmann::ordered_json j;
  j["architectures"] = {c.architecture};
  const Architecture* arch = FindArchitecture(c.architecture);
  j["model_type"] = arch != nullptr ? arch->model_type : "llama";
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_layers;
  j["num_attention_heads"] = c.num_heads;
  j["num_key_value_heads"] = c.num_kv_heads;
  j["head_dim"] = c.head_dim;
  j["vocab_size"] = c.vocab_size;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_theta"] = c.rope_theta;
  if (c.rope_scaling) {
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", c.rope_scaling->factor},
                         {"low_freq_factor", c.rope_scaling->low_freq_factor},
                         {"high_freq_factor", c.rope_scaling->high_freq_factor},
                         {"original_max_position_embeddings",
                          c.rope_scaling->original_max_position_embeddings}};
  } else {
    j["rope_scaling"] = nullptr;
  }
  j["sliding_window"] =
      c.sliding_window ? nlohmann::ordered_json(*c.sliding_window) : nullptr;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["torch_dtype"] = c.torch_dtype == DType::kF32   ? "float32"
                     : c.torch_dtype == DType::kF16 ? "float16"
                                                    : "bfloat16";
  j["hidden_act"] = "silu";
  if (c.architecture == "Qwen2ForCausalLM" ||
      c.architecture == "Qwen3ForCausalLM") {
    j["use_sliding_window"] = false;  // Qwen2's biases are implied
  }
  if (c.architecture != "Qwen2ForCausalLM") j["attention_bias"] = false;
  if (c.architecture != "Qwen2ForCausalLM" &&
      c.architecture != "Qwen3ForCausalLM") {
    j["mlp_bias"] = false;
  }
  if (c.bos_token_id) j["bos_token_id"] = *c.bos_token_id;
  if (c.eos_token_ids.size() == 1) {
    j["eos_token_id"] = c.eos_token_ids[0];
  } else if (!c.eos_token_ids.empty()) {
    j["eos_token_id"] = c.eos_token_ids;
  }
  if (c.fp8 && c.fp8->layout == Fp8CheckpointConfig::Layout::kVllmFp8) {
    j["quantization_config"] = {
        {"quant_method", "fp8"},
        {"activation_scheme", c.fp8->static_activations ? "static" : "dynamic"},
        {"ignored_layers", c.fp8->ignored_layers}};
  } else if (c.fp8) {
    const nlohmann::ordered_json fp8_tensor = {
        {"num_bits", 8},    {"type", "float"},      {"symmetric", true},
        {"dynamic", false}, {"strategy", "tensor"}, {"group_size", nullptr}};
    nlohmann::ordered_json weights = fp8_tensor, input = fp8_tensor;
    if (c.fp8->weight_per_channel) weights["strategy"] = "channel";
    if (c.fp8->activation_per_token) input["strategy"] = "token";
    input["dynamic"] = !c.fp8->static_activations;
    nlohmann::ordered_json group = {{"targets", {"Linear"}},
                                    {"weights", weights},
                                    {"input_activations", input},
                                    {"output_activations", nullptr}};
    j["quantization_config"] = {{"quant_method", "compressed-tensors"},
                                {"format", "float-quantized"},
                                {"quantization_status", "compressed"},
                                {"config_groups", {{"group_0", group}}},
                                {"ignore", c.fp8->ignored_layers},
                                {"kv_cache_scheme", nullptr}};
  }
  return j.dump(2) + "\n";
}

}  // namespace octet
