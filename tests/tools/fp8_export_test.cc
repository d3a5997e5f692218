// FP8 checkpoints: `octet quantize` output (layout, scales, size), loading it
// (fused parts requantized to the largest scale, static input scales used),
// and the errors around it.
#include "tools/fp8_export.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "kernels/cpu/backend.h"
#include "kernels/cpu/quantize.h"
#include "kernels/fp8.h"
#include "model/checkpoint_writer.h"
#include "model/synthetic.h"
#include "tests/process_util.h"
#include "tests/worker/model_test_util.h"
#include "tests/worker/reference_llama.h"
#include "worker/linear_loader.h"
#include "worker/llama_model.h"

namespace octet {
namespace {

namespace fs = std::filesystem;

class Fp8ExportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = fs::temp_directory_path() / absl::StrCat("octet_fp8_", ::getpid());
    fs::remove_all(base_);
    ASSERT_TRUE(WriteSyntheticCheckpoint(*SyntheticPreset("tiny"), {.seed = 31},
                                         (base_ / "bf16").string())
                    .ok());
    ASSERT_TRUE(
        ExportFp8Checkpoint((base_ / "bf16").string(), (base_ / "fp8").string())
            .ok());
  }
  void TearDown() override { fs::remove_all(base_); }

  uint64_t DirBytes(const fs::path& dir) {
    uint64_t total = 0;
    for (const auto& f : fs::directory_iterator(dir)) {
      if (f.path().extension() == ".safetensors")
        total += fs::file_size(f.path());
    }
    return total;
  }

  fs::path base_;
};

// `octet generate` on the written checkpoint: no flag needed (auto reads
// config.json), and --quantization none is refused naming both.
TEST_F(Fp8ExportTest, GenerateReadsTheMethodFromTheCheckpoint) {
  auto generate = [&](const std::string& extra) {
    const std::string log = (base_ / "generate.log").string();
    const std::vector<int> codes = testing::RunTogether(
        {{"/bin/sh", "-c",
          absl::StrCat(testing::SiblingProgram("octet"),
                       " generate --device=cpu --threads=1 --model=",
                       (base_ / "fp8").string(),
                       " --prompt_ids=1,17,33 --max_tokens=2 ", extra,
                       " >/dev/null 2>", log)}},
        absl::Seconds(60));
    std::ifstream in(log);
    return std::make_pair(codes.at(0),
                          std::string(std::istreambuf_iterator<char>(in), {}));
  };
  const auto [code, text] = generate("");
  EXPECT_EQ(code, 0) << text;
  EXPECT_NE(text.find("linear layers fp8-tensor"), std::string::npos) << text;
  const auto [none_code, none_text] = generate("--quantization=none");
  EXPECT_NE(none_code, 0);
  EXPECT_NE(none_text.find("--quantization none, but "), std::string::npos)
      << none_text;
}

// The chat template and tokenizer_config.json come along, as they were.
TEST_F(Fp8ExportTest, TheChatTemplateComesAlong) {
  const std::string config = R"({"add_bos_token": true, "bos_token": "<s>"})";
  const std::string jinja = "{{ bos_token }}{{ messages[0].content }}";
  ASSERT_TRUE(
      WriteTextFile((base_ / "bf16" / "tokenizer_config.json").string(), config)
          .ok());
  ASSERT_TRUE(
      WriteTextFile((base_ / "bf16" / "chat_template.jinja").string(), jinja)
          .ok());
  ASSERT_TRUE(ExportFp8Checkpoint((base_ / "bf16").string(),
                                  (base_ / "fp8-chat").string())
                  .ok());
  auto read = [&](const char* name) {
    std::ifstream in(base_ / "fp8-chat" / name);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  EXPECT_EQ(read("tokenizer_config.json"), config);
  EXPECT_EQ(read("chat_template.jinja"), jinja);
  // A refused scheme leaves the folder as it was; a second export into it
  // leaves none of the first one's files.
  Fp8ExportOptions fp9;
  fp9.scheme = "fp9";
  EXPECT_FALSE(ExportFp8Checkpoint((base_ / "bf16").string(),
                                   (base_ / "fp8-chat").string(), fp9)
                   .ok());
  EXPECT_TRUE(fs::exists(base_ / "fp8-chat" / "config.json"));
  fs::remove(base_ / "bf16" / "chat_template.jinja");
  fs::remove(base_ / "bf16" / "tokenizer_config.json");
  ASSERT_TRUE(ExportFp8Checkpoint((base_ / "bf16").string(),
                                  (base_ / "fp8-chat").string())
                  .ok());
  EXPECT_FALSE(fs::exists(base_ / "fp8-chat" / "chat_template.jinja"));
  EXPECT_FALSE(fs::exists(base_ / "fp8-chat" / "tokenizer_config.json"));
  EXPECT_TRUE(fs::exists(base_ / "fp8-chat" / "tokenizer.model"));
}

TEST_F(Fp8ExportTest, WritesTheVllmLayoutAtAboutHalfTheSize) {
  auto src = Checkpoint::Open((base_ / "bf16").string());
  auto fp8 = Checkpoint::Open((base_ / "fp8").string());
  ASSERT_TRUE(src.ok() && fp8.ok()) << fp8.status();
  ASSERT_TRUE((*fp8)->config().fp8.has_value());
  EXPECT_FALSE((*fp8)->config().fp8->static_activations);
  EXPECT_EQ((*fp8)->config().fp8->ignored_layers,
            std::vector<std::string>{"lm_head"});
  EXPECT_TRUE(fs::exists(base_ / "fp8" / "tokenizer.model"));
  const std::string w = "model.layers.1.mlp.gate_proj.weight";
  const TensorView codes = *(*fp8)->Get(w);
  EXPECT_EQ(codes.dtype, DType::kE4m3);
  const TensorView scale_t = *(*fp8)->Get(w + "_scale");
  EXPECT_TRUE(scale_t.shape.empty());
  // The contract's scale and codes, from the bf16 weights.
  const TensorView orig = *(*src)->Get(w);
  const Bf16* x = reinterpret_cast<const Bf16*>(orig.bytes.data());
  const float absmax = *AbsMax(x, orig.num_elements());
  const E4m3Scale s = E4m3ScaleFromAbsmax(absmax);
  EXPECT_EQ(*(*fp8)->GetScalar(w + "_scale"), s.scale);
  std::vector<uint8_t> want(orig.num_elements());
  ASSERT_TRUE(QuantizeE4m3(x, orig.num_elements(), s.inv, want.data()).ok());
  EXPECT_EQ(std::memcmp(want.data(), codes.bytes.data(), want.size()), 0);
  // Norms and embeddings stay bf16.
  EXPECT_EQ((*fp8)->Get("model.norm.weight")->dtype, DType::kBf16);
  EXPECT_EQ((*fp8)->Get("model.embed_tokens.weight")->dtype, DType::kBf16);
  const double ratio =
      double(DirBytes(base_ / "fp8")) / DirBytes(base_ / "bf16");
  std::printf(
      "[ measured ] tiny fp8 checkpoint / bf16 checkpoint on disk: %.3f\n",
      ratio);
  EXPECT_LT(ratio, 0.75);  // the tiny model's bf16 embedding is a third of it
}

TEST_F(Fp8ExportTest, FusedPartsAreRequantizedToTheLargestScale) {
  auto fp8 = Checkpoint::Open((base_ / "fp8").string());
  ASSERT_TRUE(fp8.ok());
  auto backend = NewCpuBackend();
  const std::string p = "model.layers.0.self_attn.";
  const std::vector<std::string> parts = {
      p + "q_proj.weight", p + "k_proj.weight", p + "v_proj.weight"};
  WeightPolicy policy;
  policy.method = LinearMethod::kFp8;
  auto w = LoadLinear(**fp8, parts, policy, *backend);
  ASSERT_TRUE(w.ok()) << w.status();
  std::vector<float> scales;
  for (const auto& n : parts)
    scales.push_back(*(*fp8)->GetScalar(n + "_scale"));
  const float big = *std::max_element(scales.begin(), scales.end());
  ASSERT_NE(*std::min_element(scales.begin(), scales.end()), big)
      << "the test needs parts with different scales";
  EXPECT_EQ(*w->scale.as<float>(), big);
  const uint8_t* fused = w->data.as<uint8_t>();
  int64_t row = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const TensorView t = *(*fp8)->Get(parts[i]);
    for (int64_t j = 0; j < t.num_elements(); ++j) {
      const uint8_t want =
          scales[i] == big
              ? t.bytes[j]
              : EncodeE4m3(DecodeE4m3(t.bytes[j]) * scales[i] * (1.0f / big));
      ASSERT_EQ(fused[row * t.shape[1] + j], want)
          << parts[i] << " element " << j;
    }
    row += t.shape[0];
  }
}

TEST_F(Fp8ExportTest, LoadsAndGeneratesLikeLoadTimeQuantization) {
  auto src = Checkpoint::Open((base_ / "bf16").string());
  auto fp8 = Checkpoint::Open((base_ / "fp8").string());
  ASSERT_TRUE(src.ok() && fp8.ok());
  auto backend = NewCpuBackend();
  ModelOptions o;
  o.method = LinearMethod::kFp8;
  auto a = LlamaModel::Load(**src, *backend, o);
  auto b = LlamaModel::Load(**fp8, *backend, o);
  ASSERT_TRUE(a.ok() && b.ok()) << b.status();
  EXPECT_EQ((*a)->WeightBytes(), (*b)->WeightBytes());
  auto cache = (*a)->NewKvCache({.block_size = 16, .num_blocks = 8});
  ASSERT_TRUE(cache.ok());
  std::vector<int32_t> table;
  ASSERT_TRUE((*cache)->Reserve(20, &table).ok());
  std::vector<int32_t> prompt(20);
  for (int i = 0; i < 20; ++i) prompt[i] = (i * 7 + 3) % 512;
  SequenceStep step{prompt, 0, &table};
  std::vector<float> la, lb;
  ASSERT_TRUE((*a)->Forward({&step, 1}, **cache, &la).ok());
  ASSERT_TRUE((*b)->Forward({&step, 1}, **cache, &lb).ok());

  // The exported parts were quantized with their own scales and, at load,
  // requantized to the largest: a second rounding that load-time
  // quantization of the bf16 weights does not have.
  const double cosine = testing::Cosine(la.data(), lb.data(), la.size());
  EXPECT_GT(cosine, 0.99);
  std::printf(
      "[ measured ] tiny logits, fp8 checkpoint vs bf16 quantized at load: "
      "cosine %.5f\n",
      cosine);

  ModelOptions none;
  EXPECT_EQ(LlamaModel::Load(**fp8, *backend, none).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(
      ExportFp8Checkpoint((base_ / "fp8").string(), (base_ / "again").string())
          .code(),
      absl::StatusCode::kFailedPrecondition);
}

// llm-compressor's compressed-tensors layout holds the same tensors under a
// different quantization_config (scales shaped [1], often in BF16): the
// same checkpoint relabelled so must load and run as the vLLM one does,
// bit for bit with F32 scales.
TEST_F(Fp8ExportTest, CompressedTensorsLayoutLoadsAsTheVllmOne) {
  auto fp8 = Checkpoint::Open((base_ / "fp8").string());
  ASSERT_TRUE(fp8.ok());
  auto relabel = [&](const fs::path& dir, bool bf16_scales) {
    std::vector<TensorSource> sources;
    for (const std::string& name : (*fp8)->TensorNames()) {
      const TensorView t = *(*fp8)->Get(name);
      if (!absl::EndsWith(name, "_scale")) {
        sources.push_back({{name, t.dtype, t.shape}, [t](SafetensorsWriter& w) {
                             return w.Write(t.bytes);
                           }});
        continue;
      }
      const float scale = *(*fp8)->GetScalar(name);
      const uint16_t bits = FloatToBf16(scale).bits;
      sources.push_back(
          {{name, bf16_scales ? DType::kBf16 : DType::kF32, {1}},
           [scale, bits, bf16_scales](SafetensorsWriter& w) {
             return bf16_scales
                        ? w.Write({reinterpret_cast<const uint8_t*>(&bits), 2})
                        : w.Write(
                              {reinterpret_cast<const uint8_t*>(&scale), 4});
           }});
    }
    ASSERT_TRUE(
        WriteCheckpointTensors(dir.string(), sources, uint64_t{1} << 30).ok());
    ModelConfig c = (*fp8)->config();
    c.fp8->layout = Fp8CheckpointConfig::Layout::kCompressedTensors;
    ASSERT_TRUE(
        WriteTextFile((dir / "config.json").string(), ModelConfigToJson(c))
            .ok());
  };
  relabel(base_ / "ct_f32", false);
  relabel(base_ / "ct_bf16", true);
  auto backend = NewCpuBackend();
  ModelOptions o;
  o.method = LinearMethod::kFp8;
  std::vector<std::vector<float>> logits;
  for (const char* dir : {"fp8", "ct_f32", "ct_bf16"}) {
    auto ckpt = Checkpoint::Open((base_ / dir).string());
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    EXPECT_EQ(QuantizationScheme((*ckpt)->config(), "fp8"), "fp8-tensor");
    auto model = LlamaModel::Load(**ckpt, *backend, o);
    ASSERT_TRUE(model.ok()) << dir << ": " << model.status();
    auto cache = (*model)->NewKvCache({.block_size = 16, .num_blocks = 4});
    ASSERT_TRUE(cache.ok());
    std::vector<int32_t> table;
    ASSERT_TRUE((*cache)->Reserve(8, &table).ok());
    SequenceStep step{{5, 6, 7, 8, 9, 10, 11, 12}, 0, &table};
    logits.emplace_back();
    ASSERT_TRUE((*model)->Forward({&step, 1}, **cache, &logits.back()).ok());
  }
  EXPECT_EQ(logits[1], logits[0]);
  const double cosine =
      testing::Cosine(logits[2].data(), logits[0].data(), logits[0].size());
  EXPECT_GT(cosine, 0.999);
  std::printf(
      "[ measured ] tiny logits, compressed-tensors with BF16 scales vs F32: "
      "cosine %.6f\n",
      cosine);
}

// llm-compressor's FP8_DYNAMIC as `octet quantize --scheme
// fp8-channel-token` writes it: a scale per weight row, a dynamic scale per
// token. Its logits follow the fake-quantized reference of that scheme, and
// every activation code is the contract's of the reference's own
// activations (or a neighbour, where binary32 and fp64 round apart).
TEST_F(Fp8ExportTest, ChannelTokenSchemeMatchesItsReference) {
  const fs::path dir = base_ / "channel_token";
  Fp8ExportOptions options;
  options.scheme = "fp8-channel-token";
  ASSERT_TRUE(
      ExportFp8Checkpoint((base_ / "bf16").string(), dir.string(), options)
          .ok());
  auto ckpt = Checkpoint::Open(dir.string());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  EXPECT_EQ(QuantizationScheme((*ckpt)->config(), "fp8"), "fp8-channel-token");
  const TensorView scale =
      *(*ckpt)->Get("model.layers.0.mlp.up_proj.weight_scale");
  EXPECT_EQ(scale.shape, (std::vector<int64_t>{160, 1}));
  auto backend = NewCpuBackend();
  ModelOptions o;
  o.method = LinearMethod::kFp8;
  auto model = LlamaModel::Load(**ckpt, *backend, o);
  ASSERT_TRUE(model.ok()) << model.status();
  const std::vector<int32_t> prompt = {5, 71, 200, 13, 99, 480, 7, 300};
  auto cache = (*model)->NewKvCache({.block_size = 16, .num_blocks = 4});
  ASSERT_TRUE(cache.ok());
  std::vector<int32_t> table;
  ASSERT_TRUE((*cache)->Reserve(prompt.size(), &table).ok());
  SequenceStep step{prompt, 0, &table};
  ForwardTrace trace;
  trace.record_codes = true;
  std::vector<float> logits;
  ASSERT_TRUE((*model)->Forward({&step, 1}, **cache, &logits, &trace).ok());
  auto bf16 = Checkpoint::Open((base_ / "bf16").string());
  ASSERT_TRUE(bf16.ok());
  const testing::ReferenceResult ref = testing::ReferenceForward(
      **bf16, prompt, {.fp8 = true, .per_channel = true, .per_token = true});
  const int64_t vocab = (*ckpt)->config().vocab_size;
  double worst = 0, largest = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    const double want = ref.logits.back()[i];
    worst = std::max(worst, std::fabs(logits[i] - want));
    largest = std::max(largest, std::fabs(want));
  }
  EXPECT_LT(worst, 1e-2 * largest);
  // One scale per token for every projection input.
  ASSERT_EQ(trace.scales.size(), ref.codes.size());
  for (const std::vector<float>& call : trace.scales) {
    EXPECT_EQ(call.size(), prompt.size());
  }
  int64_t total = 0, differ = 0;
  for (size_t i = 0; i < ref.codes.size(); ++i) {
    ASSERT_EQ(trace.codes[i].size(), ref.codes[i].size());
    for (size_t j = 0; j < ref.codes[i].size(); ++j) {
      ++total;
      differ += trace.codes[i][j] != ref.codes[i][j];
    }
  }
  EXPECT_LT(differ, total / 100);
  std::printf(
      "[ measured ] tiny fp8-channel-token vs its fake-quantized reference: "
      "max logit error %.2e of the largest %.2f; %lld of %lld activation "
      "codes differ\n",
      worst, largest, static_cast<long long>(differ),
      static_cast<long long>(total));
}

// Each scheme `octet quantize` writes against the unquantized model, on the
// same prompt: how far FP8 moves the logits (reported; bounded loosely).
TEST_F(Fp8ExportTest, EachSchemesDriftFromTheUnquantizedModel) {
  auto backend = NewCpuBackend();
  const std::vector<int32_t> prompt = {5, 71, 200, 13, 99, 480, 7, 300};
  auto last_logits = [&](const std::string& dir, LinearMethod method) {
    auto ckpt = Checkpoint::Open(dir);
    EXPECT_TRUE(ckpt.ok()) << ckpt.status();
    ModelOptions o;
    o.method = method;
    auto model = LlamaModel::Load(**ckpt, *backend, o);
    EXPECT_TRUE(model.ok()) << model.status();
    auto cache = (*model)->NewKvCache({.block_size = 16, .num_blocks = 4});
    std::vector<int32_t> table;
    EXPECT_TRUE((*cache)->Reserve(prompt.size(), &table).ok());
    SequenceStep step{prompt, 0, &table};
    std::vector<float> logits;
    EXPECT_TRUE((*model)->Forward({&step, 1}, **cache, &logits).ok());
    return logits;
  };
  const std::vector<float> none =
      last_logits((base_ / "bf16").string(), LinearMethod::kNone);
  for (const std::string scheme : {"", "fp8-tensor", "fp8-channel-token"}) {
    const fs::path dir = base_ / ("drift" + scheme);
    Fp8ExportOptions options;
    options.scheme = scheme;
    ASSERT_TRUE(
        ExportFp8Checkpoint((base_ / "bf16").string(), dir.string(), options)
            .ok());
    const std::vector<float> fp8 =
        last_logits(dir.string(), LinearMethod::kFp8);
    double worst = 0, largest = 0;
    for (size_t i = 0; i < none.size(); ++i) {
      worst = std::max(worst, std::fabs(double{fp8[i]} - none[i]));
      largest = std::max(largest, std::fabs(double{none[i]}));
    }
    const double cosine = testing::Cosine(fp8.data(), none.data(), none.size());
    EXPECT_GT(cosine, 0.98) << scheme;  // (tiny: 64 wide, random weights)
    std::printf(
        "[ measured ] tiny %s checkpoint vs the unquantized model: logits "
        "cosine %.5f, max error %.3f of the largest %.2f\n",
        scheme.empty() ? "vLLM fp8" : scheme.c_str(), cosine, worst, largest);
  }
}

TEST_F(Fp8ExportTest, StaticInputScalesAreUsed) {
  // Rewrite the FP8 checkpoint with activation_scheme static and an
  // input_scale for every projection.
  auto fp8 = Checkpoint::Open((base_ / "fp8").string());
  ASSERT_TRUE(fp8.ok());
  auto write_static = [&](const fs::path& dir, float input_scale) {
    std::vector<TensorSource> sources;
    static std::vector<float> value;
    value = {input_scale};
    for (const std::string& name : (*fp8)->TensorNames()) {
      const TensorView t = *(*fp8)->Get(name);
      sources.push_back({{name, t.dtype, t.shape}, [t](SafetensorsWriter& w) {
                           return w.Write(t.bytes);
                         }});
      if (t.dtype == DType::kE4m3) {
        sources.push_back(
            {{name.substr(0, name.size() - 7) + ".input_scale",
              DType::kF32,
              {}},
             [](SafetensorsWriter& w) {
               return w.Write(
                   {reinterpret_cast<const uint8_t*>(value.data()), 4});
             }});
      }
    }
    ASSERT_TRUE(
        WriteCheckpointTensors(dir.string(), sources, uint64_t{1} << 30).ok());
    ModelConfig c = (*fp8)->config();
    c.fp8->static_activations = true;
    ASSERT_TRUE(
        WriteTextFile((dir / "config.json").string(), ModelConfigToJson(c))
            .ok());
  };
  write_static(base_ / "static_a", 0.05f);
  write_static(base_ / "static_b", 0.5f);
  auto a = Checkpoint::Open((base_ / "static_a").string());
  auto b = Checkpoint::Open((base_ / "static_b").string());
  ASSERT_TRUE(a.ok() && b.ok()) << a.status();
  auto backend = NewCpuBackend();
  ModelOptions o;
  o.method = LinearMethod::kFp8;
  auto ma = LlamaModel::Load(**a, *backend, o);
  auto mb = LlamaModel::Load(**b, *backend, o);
  ASSERT_TRUE(ma.ok() && mb.ok()) << ma.status();
  auto cache = (*ma)->NewKvCache({.block_size = 16, .num_blocks = 4});
  std::vector<int32_t> table;
  ASSERT_TRUE((*cache)->Reserve(8, &table).ok());
  SequenceStep step{{5, 6, 7, 8, 9, 10, 11, 12}, 0, &table};
  ForwardTrace ta, tb;
  ta.record_codes = tb.record_codes = true;
  std::vector<float> la, lb;
  ASSERT_TRUE((*ma)->Forward({&step, 1}, **cache, &la, &ta).ok());
  ASSERT_TRUE((*mb)->Forward({&step, 1}, **cache, &lb, &tb).ok());
  ASSERT_FALSE(ta.scales.empty());
  for (const std::vector<float>& call : ta.scales) {
    EXPECT_EQ(call, std::vector<float>{0.05f});
  }
  for (const std::vector<float>& call : tb.scales) {
    EXPECT_EQ(call, std::vector<float>{0.5f});
  }
  EXPECT_NE(la, lb);
}

}  // namespace
}  // namespace octet
