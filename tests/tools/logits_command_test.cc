// `octet logits` as a process: its JSON holds, bit for bit, the logits (and
// with --activation_codes the FP8 codes and scales) of the same forward run
// in this process, on a float checkpoint and on a compressed-tensors one;
// bad flags exit with status 2 and a line naming the flag, inputs the model
// cannot take with status 1 and a line naming the prompt.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "model/checkpoint.h"
#include "model/synthetic.h"
#include "nlohmann/json.hpp"
#include "tests/process_util.h"
#include "tools/fp8_export.h"
#include "worker/backends.h"
#include "worker/llama_model.h"

namespace octet {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

const std::vector<std::vector<int32_t>> kPrompts = {
    {1, 2, 3},
    {40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57,
     58},
    {9}};

struct Outcome {
  int code = -1;
  std::string out, err;
};

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class LogitsCommandTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ =
        fs::temp_directory_path() / absl::StrCat("octet_logits_", ::getpid());
    fs::remove_all(base_);
    ASSERT_TRUE(WriteSyntheticCheckpoint(
                    *SyntheticPreset("tiny"),
                    {.dtype = DType::kF32,
                     .seed = 5,
                     .tokenizer = SyntheticOptions::Tokenizer::kNone},
                    (base_ / "f32").string())
                    .ok());
    Fp8ExportOptions ct;
    ct.scheme = "fp8-channel-token";
    ASSERT_TRUE(ExportFp8Checkpoint((base_ / "f32").string(),
                                    (base_ / "ct").string(), ct)
                    .ok());
  }
  void TearDown() override { fs::remove_all(base_); }

  // Runs `octet logits ARGS` (one thread), collecting its output.
  Outcome Logits(const std::string& args) {
    const fs::path out = base_ / "out", err = base_ / "err";
    const std::vector<int> codes = testing::RunTogether(
        {{"/bin/sh", "-c",
          absl::StrCat(testing::SiblingProgram("octet"),
                       " logits --threads=1 --device=cpu ", args, " >",
                       out.string(), " 2>", err.string())}},
        absl::Seconds(60));
    return {codes.at(0), ReadFile(out), ReadFile(err)};
  }

  // The same forward in this process: every prompt a sequence of one call.
  std::vector<float> Forward(const std::string& dir, LinearMethod method,
                             ForwardTrace* trace) {
    auto ckpt = Checkpoint::Open(dir);
    EXPECT_TRUE(ckpt.ok()) << ckpt.status();
    backend_ = *NewBackend(DeviceChoice::kCpu, {.num_threads = 1});
    ModelOptions options;
    options.method = method;
    model_ = *LlamaModel::Load(**ckpt, *backend_, options);
    auto cache = model_->NewKvCache({.block_size = 16, .num_blocks = 8});
    EXPECT_TRUE(cache.ok()) << cache.status();
    std::vector<std::vector<int32_t>> tables(kPrompts.size());
    std::vector<SequenceStep> steps;
    for (size_t i = 0; i < kPrompts.size(); ++i) {
      EXPECT_TRUE((*cache)->Reserve(kPrompts[i].size(), &tables[i]).ok());
      steps.push_back({kPrompts[i], 0, &tables[i]});
    }
    std::vector<float> logits;
    EXPECT_TRUE(model_->Forward(steps, **cache, &logits, trace).ok());
    return logits;
  }

  std::string PromptsFlag() const {
    return absl::StrCat("--prompts_json='", Json(kPrompts).dump(), "'");
  }

  fs::path base_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<LlamaModel> model_;
};

// Every printed logit reads back as the binary32 value of the forward.
void ExpectSameLogits(const Json& printed, const std::vector<float>& want,
                      size_t vocab) {
  ASSERT_EQ(printed.size(), kPrompts.size());
  for (size_t r = 0; r < printed.size(); ++r) {
    ASSERT_EQ(printed[r].size(), vocab);
    for (size_t v = 0; v < vocab; ++v) {
      ASSERT_EQ(printed[r][v].get<float>(), want[r * vocab + v])
          << "prompt " << r << ", logit " << v;
    }
  }
}

TEST_F(LogitsCommandTest, PrintsTheForwardsLogitsBitForBit) {
  const Outcome o =
      Logits(absl::StrCat("--model=", (base_ / "f32").string(), " ",
                          PromptsFlag(), " --quantization=none"));
  ASSERT_EQ(o.code, 0) << o.err;
  const Json j = Json::parse(o.out);
  EXPECT_EQ(j["quantization_scheme"], "none");
  EXPECT_FALSE(j.contains("activations"));
  const std::vector<float> want =
      Forward((base_ / "f32").string(), LinearMethod::kNone, nullptr);
  ExpectSameLogits(j["logits"], want, model_->config().vocab_size);
}

TEST_F(LogitsCommandTest, ReadsTheSchemeAndPrintsItsActivationCodes) {
  const Outcome o = Logits(
      absl::StrCat("--model=", (base_ / "ct").string(), " ", PromptsFlag(),
                   " --activation_codes"));  // no --quantization: auto
  ASSERT_EQ(o.code, 0) << o.err;
  const Json j = Json::parse(o.out);
  EXPECT_EQ(j["quantization_scheme"], "fp8-channel-token");
  ForwardTrace trace;
  trace.record_codes = true;
  const std::vector<float> want =
      Forward((base_ / "ct").string(), LinearMethod::kFp8, &trace);
  ExpectSameLogits(j["logits"], want, model_->config().vocab_size);
  ASSERT_EQ(j["activations"].size(), trace.codes.size());
  ASSERT_EQ(trace.codes.size(), 4 * model_->config().num_layers);
  for (size_t c = 0; c < trace.codes.size(); ++c) {
    EXPECT_EQ(j["activations"][c]["codes"].get<std::vector<uint8_t>>(),
              trace.codes[c])
        << "call " << c;
    // Per-token scales: one per token of all prompts (23).
    EXPECT_EQ(j["activations"][c]["scales"].get<std::vector<float>>(),
              trace.scales[c])
        << "call " << c;
    EXPECT_EQ(trace.scales[c].size(), 23u);
  }
}

TEST_F(LogitsCommandTest, BadFlagsAndPromptsAreNamed) {
  const std::string model = absl::StrCat("--model=", (base_ / "f32").string());
  for (const auto& [args, code, message] :
       std::vector<std::tuple<std::string, int, std::string>>{
           {"--prompts_json='[[1,2]]'", 2, "logits needs --model DIR"},
           {model, 2, "logits needs --prompts_json"},
           {model + " --prompts_json='[[1,2]'", 2, "not a non-empty JSON"},
           {model + " --prompts_json='[]'", 2, "not a non-empty JSON"},
           {model + " --prompts_json='[[1],[]]'", 2,
            "prompt 1 is not a non-empty array"},
           {model + " --prompts_json='[[1,-4]]'", 2,
            "prompt 0 has '-4', which is not a token id"},
           {model + " --prompts_json='[[1.5]]'", 2, "which is not a token id"},
           {model + " --prompts_json='[[1]]' --quantization=int8", 2,
            "--quantization: 'int8' is not auto, none or fp8"},
           {model + " --prompts_json='[[1]]' --device=tpu", 2, "tpu"},
           {model + " --prompts_json='[[1],[512]]'", 1,
            "prompt 1 has token 512, beyond the vocabulary of 512"},
           {model + " --prompts_json='[[1]]' --activation_codes", 1,
            "--activation_codes needs FP8"},
           {absl::StrCat("--model=", (base_ / "ct").string(),
                         " --prompts_json='[[1]]' --quantization=none"),
            1, "is an FP8 checkpoint"},
       }) {
    const Outcome o = Logits(args);
    EXPECT_EQ(o.code, code) << args << "\n" << o.err;
    EXPECT_NE(o.err.find(message), std::string::npos)
        << args << ": '" << o.err << "' lacks '" << message << "'";
    EXPECT_TRUE(o.out.empty()) << args;
  }
}

}  // namespace
}  // namespace octet
