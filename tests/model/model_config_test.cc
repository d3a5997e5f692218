// config.json parsing: the Llama, Mistral, Qwen2 and Qwen3 fields octet
// uses, and a clear error for every field it cannot honour.
#include "model/model_config.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "model/synthetic.h"
#include "nlohmann/json.hpp"

namespace octet {
namespace {

using Json = nlohmann::json;

// Llama-3.2-1B's config.json, abridged.
Json Llama32() {
  return Json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "model_type": "llama",
    "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16,
    "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64,
    "vocab_size": 128256, "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
    "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0,
                     "low_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192,
                     "rope_type": "llama3"},
    "tie_word_embeddings": true, "torch_dtype": "bfloat16",
    "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009],
    "hidden_act": "silu", "attention_bias": false, "mlp_bias": false,
    "transformers_version": "4.45.0.dev0", "use_cache": true})");
}

absl::StatusOr<ModelConfig> Parse(const Json& j) {
  return ParseModelConfig(j.dump(), "m/config.json");
}

void ExpectError(const Json& j, const std::string& fragment) {
  absl::StatusOr<ModelConfig> c = Parse(j);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string msg(c.status().message());
  EXPECT_NE(msg.find("m/config.json"), std::string::npos) << msg;
  EXPECT_NE(msg.find(fragment), std::string::npos)
      << "'" << msg << "' lacks '" << fragment << "'";
}

// Sizes far beyond any model are refused by name before anything is sized
// from them (2^31 - 1 layers once made the loader list and allocate
// billions of tensors before it checked one).
TEST(ModelConfig, SizesBeyondAnyModelAreRefusedByName) {
  for (const auto& [field, value] :
       std::vector<std::pair<std::string, int64_t>>{
           {"num_hidden_layers", 2147483647},
           {"hidden_size", 1 << 20},
           {"num_attention_heads", 4096},
           {"head_dim", 4096},
           {"intermediate_size", 1 << 24},
           {"vocab_size", 1 << 28},
           {"max_position_embeddings", 1 << 30}}) {
    Json j = Llama32();
    j[field] = value;
    if (field == "num_attention_heads") j["num_key_value_heads"] = value;
    ExpectError(j, "'" + field + "' is " + std::to_string(value));
  }
}

TEST(ModelConfig, ParsesLlama3) {
  absl::StatusOr<ModelConfig> c = Parse(Llama32());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, "LlamaForCausalLM");
  EXPECT_EQ(c->hidden_size, 2048);
  EXPECT_EQ(c->num_layers, 16);
  EXPECT_EQ(c->num_heads, 32);
  EXPECT_EQ(c->num_kv_heads, 8);
  EXPECT_EQ(c->head_dim, 64);
  EXPECT_EQ(c->vocab_size, 128256);
  EXPECT_DOUBLE_EQ(c->rms_norm_eps, 1e-5);
  EXPECT_DOUBLE_EQ(c->rope_theta, 500000.0);
  ASSERT_TRUE(c->rope_scaling.has_value());
  EXPECT_DOUBLE_EQ(c->rope_scaling->factor, 32.0);
  EXPECT_EQ(c->rope_scaling->original_max_position_embeddings, 8192);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_EQ(c->torch_dtype, DType::kBf16);
  EXPECT_EQ(c->bos_token_id, 128000);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int64_t>{128001, 128008, 128009}));
  EXPECT_FALSE(c->fp8.has_value());
  EXPECT_FALSE(c->sliding_window.has_value());
}

// transformers >= 5 writes RoPE as one rope_parameters object and dtype
// for torch_dtype (as its save_pretrained does for Llama 3.2 1B); read as
// the older fields were, never silently as plain RoPE.
TEST(ModelConfig, ParsesTransformers5RopeParametersAndDtype) {
  Json j = Llama32();
  Json params = j["rope_scaling"];
  params["rope_theta"] = j["rope_theta"];
  for (const char* old : {"rope_scaling", "rope_theta", "torch_dtype"}) {
    j.erase(old);
  }
  j["rope_parameters"] = params;
  j["dtype"] = "float32";
  absl::StatusOr<ModelConfig> c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_DOUBLE_EQ(c->rope_theta, 500000.0);
  ASSERT_TRUE(c->rope_scaling.has_value());
  EXPECT_DOUBLE_EQ(c->rope_scaling->factor, 32.0);
  EXPECT_EQ(c->rope_scaling->original_max_position_embeddings, 8192);
  EXPECT_EQ(c->torch_dtype, DType::kF32);
  // Plain RoPE: rope_type "default", or none given.
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1e6}};
  EXPECT_FALSE(Parse(j)->rope_scaling.has_value());
  EXPECT_DOUBLE_EQ(Parse(j)->rope_theta, 1e6);
  j["rope_parameters"] = {{"rope_theta", 1e6}};
  EXPECT_FALSE(Parse(j)->rope_scaling.has_value());
  j["rope_parameters"]["rope_type"] = "yarn";
  ExpectError(j, "'rope_parameters' type 'yarn' is not supported");
  j["rope_parameters"] = {{"full_attention", params}};  // Gemma 3's form
  ExpectError(j, "'full_attention': RoPE per layer type is not supported");
  j["rope_parameters"] = params;
  j["rope_parameters"]["factor"] = -1;
  ExpectError(j, "rope_parameters: field 'factor'");
  // Both forms, as a config converted by hand may have: they must agree.
  j = Llama32();
  j["rope_parameters"] = params;
  EXPECT_TRUE(Parse(j).ok());
  j["rope_parameters"]["rope_theta"] = 10000.0;
  ExpectError(j, "'rope_theta' differs from rope_parameters");
  j["rope_parameters"] = params;
  j["rope_parameters"]["factor"] = 8.0;
  ExpectError(j, "'rope_scaling' differs from rope_parameters");
  j = Llama32();
  j.erase("torch_dtype");
  j["dtype"] = "int8";
  ExpectError(j, "'dtype' must be");
}

TEST(ModelConfig, ParsesMistralAndDefaults) {
  Json j = {{"architectures", {"MistralForCausalLM"}},
            {"hidden_size", 4096},
            {"intermediate_size", 14336},
            {"num_hidden_layers", 32},
            {"num_attention_heads", 32},
            {"num_key_value_heads", 8},
            {"vocab_size", 32000},
            {"max_position_embeddings", 32768},
            {"sliding_window", 4096},
            {"eos_token_id", 2},
            {"rope_scaling", nullptr}};
  absl::StatusOr<ModelConfig> c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->head_dim, 128);
  EXPECT_EQ(c->sliding_window, 4096);
  EXPECT_EQ(c->torch_dtype, DType::kBf16);
  EXPECT_DOUBLE_EQ(c->rope_theta, 10000.0);
  EXPECT_FALSE(c->rope_scaling.has_value());
  EXPECT_EQ(c->eos_token_ids, std::vector<int64_t>{2});
  j["sliding_window"] = 32768;  // a window as long as the context is none
  EXPECT_FALSE(Parse(j)->sliding_window.has_value());
  j["sliding_window"] = nullptr;  // Mistral v0.2+: no window
  EXPECT_FALSE(Parse(j)->sliding_window.has_value());
  j.erase("sliding_window");  // transformers' MistralConfig default
  EXPECT_EQ(Parse(j)->sliding_window, 4096);
  // LlamaConfig has no window; the key is ignored, as transformers does.
  j["architectures"] = {"LlamaForCausalLM"};
  j["sliding_window"] = 1024;
  EXPECT_FALSE(Parse(j)->sliding_window.has_value());
}

// Qwen2.5-0.5B-Instruct's config.json and Qwen3-0.6B's, as published.
Json Qwen25() {
  return Json::parse(R"({
    "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0,
    "bos_token_id": 151643, "eos_token_id": 151645, "hidden_act": "silu",
    "hidden_size": 896, "initializer_range": 0.02, "intermediate_size": 4864,
    "max_position_embeddings": 32768, "max_window_layers": 21,
    "model_type": "qwen2", "num_attention_heads": 14,
    "num_hidden_layers": 24, "num_key_value_heads": 2, "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0, "sliding_window": 32768,
    "tie_word_embeddings": true, "torch_dtype": "bfloat16",
    "transformers_version": "4.43.1", "use_cache": true,
    "use_sliding_window": false, "vocab_size": 151936})");
}
Json Qwen3() {
  return Json::parse(R"({
    "architectures": ["Qwen3ForCausalLM"], "attention_bias": false,
    "attention_dropout": 0.0, "bos_token_id": 151643, "eos_token_id": 151645,
    "head_dim": 128, "hidden_act": "silu", "hidden_size": 1024,
    "initializer_range": 0.02, "intermediate_size": 3072,
    "max_position_embeddings": 40960, "max_window_layers": 28,
    "model_type": "qwen3", "num_attention_heads": 16, "num_hidden_layers": 28,
    "num_key_value_heads": 8, "rms_norm_eps": 1e-06, "rope_scaling": null,
    "rope_theta": 1000000, "sliding_window": null, "tie_word_embeddings": true,
    "torch_dtype": "bfloat16", "transformers_version": "4.51.0",
    "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})");
}

TEST(ModelConfig, ParsesQwen2WithItsBiases) {
  absl::StatusOr<ModelConfig> c = Parse(Qwen25());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, "Qwen2ForCausalLM");
  EXPECT_TRUE(c->qkv_bias);
  EXPECT_FALSE(c->qk_norm);
  EXPECT_EQ(c->head_dim, 64);  // 896 / 14
  EXPECT_EQ(c->num_kv_heads, 2);
  EXPECT_DOUBLE_EQ(c->rope_theta, 1e6);
  // sliding_window is only read with use_sliding_window, which octet refuses.
  EXPECT_FALSE(c->sliding_window.has_value());
  EXPECT_EQ(c->eos_token_ids, std::vector<int64_t>{151645});
  Json j = Qwen25();
  j["use_sliding_window"] = true;
  ExpectError(j, "'use_sliding_window' is true");
}

TEST(ModelConfig, ParsesQwen3WithItsHeadNorms) {
  absl::StatusOr<ModelConfig> c = Parse(Qwen3());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, "Qwen3ForCausalLM");
  EXPECT_TRUE(c->qk_norm);
  EXPECT_FALSE(c->qkv_bias);
  EXPECT_EQ(c->head_dim, 128);  // not 1024 / 16
  EXPECT_FALSE(c->rope_scaling.has_value());
  Json j = Qwen3();
  j.erase("head_dim");  // transformers' Qwen3Config default
  EXPECT_EQ(Parse(j)->head_dim, 128);
  j = Qwen3();
  j["attention_bias"] = true;  // q/k/v and o biases: not built
  ExpectError(j, "'attention_bias' is true");
  j = Qwen3();
  j["use_sliding_window"] = true;
  ExpectError(j, "'use_sliding_window' is true");
}

// What make-model writes for the Qwen presets reads back as it was.
TEST(ModelConfig, QwenPresetsRoundTrip) {
  for (const char* preset : {"tiny-qwen2", "tiny-qwen3"}) {
    const ModelConfig want = *SyntheticPreset(preset);
    absl::StatusOr<ModelConfig> got =
        ParseModelConfig(ModelConfigToJson(want), "m/config.json");
    ASSERT_TRUE(got.ok()) << preset << ": " << got.status();
    EXPECT_EQ(got->architecture, want.architecture);
    EXPECT_EQ(got->qkv_bias, want.qkv_bias) << preset;
    EXPECT_EQ(got->qk_norm, want.qk_norm) << preset;
    EXPECT_EQ(got->head_dim, want.head_dim) << preset;
    const Json j = Json::parse(ModelConfigToJson(want));
    EXPECT_EQ(j["model_type"],
              preset == std::string("tiny-qwen2") ? "qwen2" : "qwen3");
  }
}

// The layers a writer left unquantized: by name, or by a "re:" pattern
// matched from the start of the name (Python's re.match); a pattern that
// does not compile is refused at parse, naming it.
TEST(ModelConfig, IgnoredLayersMatchByNameOrPatternFromTheStart) {
  Fp8CheckpointConfig fp8;
  fp8.ignored_layers = {"lm_head", "model.layers.1.mlp.down_proj",
                        "re:.*layers\\.0\\.self_attn\\.[qkv]_proj$", "re:mlp"};
  EXPECT_TRUE(IsIgnoredLayer(fp8, "lm_head"));
  EXPECT_TRUE(IsIgnoredLayer(fp8, "model.layers.1.mlp.down_proj"));
  EXPECT_FALSE(IsIgnoredLayer(fp8, "model.layers.11.mlp.down_proj"));
  EXPECT_TRUE(IsIgnoredLayer(fp8, "model.layers.0.self_attn.k_proj"));
  EXPECT_FALSE(IsIgnoredLayer(fp8, "model.layers.0.self_attn.o_proj"));
  EXPECT_FALSE(IsIgnoredLayer(fp8, "model.layers.10.self_attn.q_proj"));
  // "re:mlp" is anchored at the start: no layer name begins with it.
  EXPECT_FALSE(IsIgnoredLayer(fp8, "model.layers.2.mlp.up_proj"));
  Json j = Llama32();
  j["quantization_config"] = {{"quant_method", "fp8"},
                              {"activation_scheme", "dynamic"},
                              {"ignored_layers", {"lm_head", "re:(unclosed"}}};
  ExpectError(j, "ignored_layers: 're:(unclosed' does not compile");
}

TEST(ModelConfig, ParsesFp8QuantizationConfig) {
  Json j = Llama32();
  j["quantization_config"] = {{"quant_method", "fp8"},
                              {"activation_scheme", "static"},
                              {"ignored_layers", {"lm_head"}}};
  absl::StatusOr<ModelConfig> c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(c->fp8.has_value());
  EXPECT_TRUE(c->fp8->static_activations);
  EXPECT_EQ(c->fp8->ignored_layers, std::vector<std::string>{"lm_head"});
}

// llm-compressor's "FP8" scheme as neuralmagic's Llama 3 FP8 checkpoints
// carry it (abridged): per-tensor weights, static per-tensor activations.
Json CompressedTensorsFp8() {
  return Json::parse(R"({
    "quant_method": "compressed-tensors", "format": "float-quantized",
    "quantization_status": "compressed", "kv_cache_scheme": null,
    "global_compression_ratio": 1.24, "ignore": ["lm_head"],
    "config_groups": {"group_0": {
      "targets": ["Linear"], "output_activations": null,
      "weights": {"num_bits": 8, "type": "float", "symmetric": true,
                  "dynamic": false, "strategy": "tensor", "group_size": null,
                  "block_structure": null, "actorder": null,
                  "observer": "minmax", "observer_kwargs": {}},
      "input_activations": {"num_bits": 8, "type": "float",
                            "symmetric": true, "dynamic": false,
                            "strategy": "tensor", "group_size": null,
                            "block_structure": null, "actorder": null,
                            "observer": "minmax", "observer_kwargs": {}}}}})");
}

TEST(ModelConfig, ParsesCompressedTensorsFp8PerTensor) {
  Json j = Llama32();
  j["quantization_config"] = CompressedTensorsFp8();
  absl::StatusOr<ModelConfig> c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_TRUE(c->fp8.has_value());
  EXPECT_EQ(c->fp8->layout, Fp8CheckpointConfig::Layout::kCompressedTensors);
  EXPECT_TRUE(c->fp8->static_activations);
  EXPECT_EQ(c->fp8->ignored_layers, std::vector<std::string>{"lm_head"});
  EXPECT_EQ(QuantizationScheme(*c, "fp8"), "fp8-tensor-static");
  j["quantization_config"]["config_groups"]["group_0"]["input_activations"]
   ["dynamic"] = true;
  c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->fp8->static_activations);
  EXPECT_EQ(ResolveQuantization("auto", *c, "m").value_or("?"), "fp8");
  // Written back in the same layout.
  absl::StatusOr<ModelConfig> back =
      ParseModelConfig(ModelConfigToJson(*c), "rt/config.json");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(ModelConfigToJson(*back), ModelConfigToJson(*c));
  EXPECT_EQ(back->fp8->layout, Fp8CheckpointConfig::Layout::kCompressedTensors);
}

TEST(ModelConfig, CompressedTensorsSchemesOctetCannotRunAreNamed) {
  const std::string group = "/quantization_config/config_groups/group_0";
  const std::vector<std::pair<std::string, Json>> changes = {
      {group + "/weights/strategy", "group"},
      {group + "/input_activations/strategy", "channel"},
      {group + "/weights/num_bits", 4},
      {group + "/weights/type", "int"},
      {group + "/weights/group_size", 128},
      {group + "/weights/symmetric", false},
      {group + "/input_activations", nullptr},
      {group + "/targets", Json::array({"re:.*q_proj"})},
      {"/quantization_config/format", "pack-quantized"},
      {"/quantization_config/quantization_status", "frozen"},
      {"/quantization_config/kv_cache_scheme",
       {{"num_bits", 8}, {"type", "float"}}},
      {"/quantization_config/quant_method", "gptq"},
  };
  const std::vector<std::string> fragments = {
      "strategy 'group' is not supported (\"tensor\" or \"channel\")",
      "strategy 'channel' is not supported (\"tensor\" or \"token\")",
      "must be 8-bit float",
      "must be 8-bit float",
      "group_size",
      "must be symmetric",
      "weight-only FP8",
      "targets must be",
      "format 'pack-quantized'",
      "quantization_status 'frozen'",
      "kv_cache_scheme",
      "quant_method 'gptq'",
  };
  for (size_t i = 0; i < changes.size(); ++i) {
    Json j = Llama32();
    j["quantization_config"] = CompressedTensorsFp8();
    j[Json::json_pointer(changes[i].first)] = changes[i].second;
    ExpectError(j, fragments[i]);
  }
  Json j = Llama32();
  j["quantization_config"] = CompressedTensorsFp8();
  j["quantization_config"]["config_groups"]["group_1"] =
      j["quantization_config"]["config_groups"]["group_0"];
  ExpectError(j, "exactly one group");
  j["quantization_config"]["config_groups"] = "group_0";
  ExpectError(j, "exactly one group");
  j["quantization_config"]["config_groups"] = {{"g", {{"weights", 3}}}};
  ExpectError(j, "targets must be");
  j["quantization_config"] = CompressedTensorsFp8();
  j["quantization_config"]["config_groups"]["group_0"]["input_activations"]
   ["strategy"] = "token";  // static
  ExpectError(j, "per-token scales must be dynamic");
}

// llm-compressor's FP8_DYNAMIC: per-channel weights, dynamic per-token
// activations; and the other combinations, each named by its scheme.
TEST(ModelConfig, ParsesCompressedTensorsChannelAndTokenStrategies) {
  Json j = Llama32();
  j["quantization_config"] = CompressedTensorsFp8();
  Json& group = j["quantization_config"]["config_groups"]["group_0"];
  group["weights"]["strategy"] = "channel";
  group["input_activations"]["strategy"] = "token";
  group["input_activations"]["dynamic"] = true;
  absl::StatusOr<ModelConfig> c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->fp8->weight_per_channel);
  EXPECT_TRUE(c->fp8->activation_per_token);
  EXPECT_FALSE(c->fp8->static_activations);
  EXPECT_EQ(QuantizationScheme(*c, "fp8"), "fp8-channel-token");
  absl::StatusOr<ModelConfig> back =
      ParseModelConfig(ModelConfigToJson(*c), "rt/config.json");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(QuantizationScheme(*back, "fp8"), "fp8-channel-token");
  group["input_activations"]["strategy"] = "tensor";
  EXPECT_EQ(QuantizationScheme(*Parse(j), "fp8"), "fp8-channel");
  group["input_activations"]["dynamic"] = false;
  EXPECT_EQ(QuantizationScheme(*Parse(j), "fp8"), "fp8-channel-static");
  group["weights"]["strategy"] = "tensor";
  group["input_activations"]["strategy"] = "token";
  group["input_activations"]["dynamic"] = true;
  EXPECT_EQ(QuantizationScheme(*Parse(j), "fp8"), "fp8-tensor-token");
}

TEST(ModelConfig, TheQuantizationMethodComesFromTheCheckpoint) {
  const ModelConfig bf16 = *Parse(Llama32());
  Json j = Llama32();
  j["quantization_config"] = {{"quant_method", "fp8"},
                              {"activation_scheme", "dynamic"}};
  const ModelConfig fp8 = *Parse(j);
  EXPECT_EQ(ResolveQuantization("auto", bf16, "m").value_or("?"), "none");
  EXPECT_EQ(ResolveQuantization("auto", fp8, "m").value_or("?"), "fp8");
  EXPECT_EQ(ResolveQuantization("fp8", bf16, "m").value_or("?"), "fp8");
  EXPECT_EQ(ResolveQuantization("fp8", fp8, "m").value_or("?"), "fp8");
  EXPECT_EQ(ResolveQuantization("none", bf16, "m").value_or("?"), "none");
  // Unquantized serving of e4m3 weights cannot work: both named.
  absl::StatusOr<std::string> none = ResolveQuantization("none", fp8, "m/dir");
  ASSERT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(none.status().message().find("--quantization none"),
            std::string::npos);
  EXPECT_NE(none.status().message().find("m/dir is an FP8 checkpoint"),
            std::string::npos)
      << none.status();
  EXPECT_EQ(ResolveQuantization("int4", bf16, "m").status().code(),
            absl::StatusCode::kInvalidArgument);

  EXPECT_EQ(QuantizationScheme(bf16, "none"), "none");
  EXPECT_EQ(QuantizationScheme(bf16, "fp8"), "fp8-tensor");
  EXPECT_EQ(QuantizationScheme(fp8, "fp8"), "fp8-tensor");
  j["quantization_config"]["activation_scheme"] = "static";
  EXPECT_EQ(QuantizationScheme(*Parse(j), "fp8"), "fp8-tensor-static");
}

TEST(ModelConfig, RoundTripsThroughJson) {
  ModelConfig c = *Parse(Llama32());
  c.fp8 = Fp8CheckpointConfig{.ignored_layers = {"lm_head"}};
  absl::StatusOr<ModelConfig> back =
      ParseModelConfig(ModelConfigToJson(c), "rt/config.json");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(ModelConfigToJson(*back), ModelConfigToJson(c));
}

TEST(ModelConfig, RejectsWhatOctetCannotServe) {
  Json j = Llama32();
  j["architectures"] = {"GPT2LMHeadModel"};
  ExpectError(j, "names GPT2LMHeadModel");
  j = Llama32();
  j.erase("hidden_size");
  ExpectError(j, "field 'hidden_size' is missing");
  j = Llama32();
  j["num_hidden_layers"] = -3;
  ExpectError(j, "'num_hidden_layers' must be a positive integer");
  j = Llama32();
  j["num_key_value_heads"] = 5;
  ExpectError(j, "must divide num_attention_heads");
  j = Llama32();
  j["rope_scaling"]["rope_type"] = "yarn";
  ExpectError(j, "type 'yarn' is not supported");
  j = Llama32();
  j["attention_bias"] = true;
  ExpectError(j, "'attention_bias' is true");
  j = Llama32();
  j["hidden_act"] = "gelu";
  ExpectError(j, "'hidden_act' must be silu");
  j = Llama32();
  j["torch_dtype"] = "int8";
  ExpectError(j, "'torch_dtype' must be");
  j = Llama32();
  j["rms_norm_eps"] = 0;
  ExpectError(j, "'rms_norm_eps' must be a positive finite number");
  j = Llama32();
  j["eos_token_id"] = 999999;
  ExpectError(j, "'eos_token_id' must be token ids below vocab_size");
  j = Llama32();
  j["quantization_config"] = {{"quant_method", "gptq"}};
  ExpectError(j, "quant_method 'gptq' is not supported");
  j = Llama32();
  j["quantization_config"] = {{"quant_method", "fp8"},
                              {"activation_scheme", "dynamic"},
                              {"weight_block_size", {128, 128}}};
  ExpectError(j, "block-wise FP8 is not supported");
  j = Llama32();
  j.erase("head_dim");
  j["hidden_size"] = 2050;
  ExpectError(j, "must be a multiple of num_attention_heads");
  EXPECT_FALSE(ParseModelConfig("{not json", "m/config.json").ok());
}

// The tiny preset at TP = 2 with FP8 and 1024 KV slots, by hand: linear
// weights 2 layers x (64 x (2x64 + 2x32) + 3 x 64 x 160) at 1 byte, the
// tied embedding 512 x 64 at 2; KV: 2 ranks x 1024 slots x 2 layers x K,V
// x 1 head x 16 dims x 2 bytes.
TEST(ModelConfig, LeastMemoryNeedCountsWeightsAndEveryRanksKvCache) {
  absl::StatusOr<ModelConfig> tiny = SyntheticPreset("tiny");
  ASSERT_TRUE(tiny.ok());
  const MemoryNeed need = LeastMemoryNeed(*tiny, 2, 1, 1024);
  EXPECT_EQ(need.weights, 2 * (64 * (2 * 64 + 2 * 32) + 3 * 64 * 160) +
                              512 * 64 * 2);
  EXPECT_EQ(need.kv_cache, 2 * 1024 * 2 * 2 * 1 * 16 * 2);
  EXPECT_EQ(need.total(), need.weights + need.kv_cache);
  // Untied, unquantized: lm_head counts, at 2 bytes.
  tiny->tie_word_embeddings = false;
  EXPECT_EQ(LeastMemoryNeed(*tiny, 1, 2, 0).weights,
            2 * (2 * (64 * (2 * 64 + 2 * 32) + 3 * 64 * 160) + 512 * 64) +
                512 * 64 * 2);
  // Sizes past int64 saturate instead of wrapping.
  EXPECT_EQ(LeastMemoryNeed(*tiny, 2, 1, int64_t{1} << 62).total(),
            std::numeric_limits<int64_t>::max());
}

TEST(ModelConfig, MissingFileIsNotFound) {
  EXPECT_EQ(LoadModelConfig("/nonexistent/model").status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace octet
