// The Checkpoint interface is the model's only way to its weights, and the
// names in model/tensor_names.h are the only names it asks for: a second
// implementation (here one that forwards to the safetensors one and records
// each name asked) loads the same model, with the same logits bit for bit,
// and is asked for exactly the tensors ExpectedTensors lists, plus the FP8
// scales named by WeightScaleName. This is what a second format (GGUF) will
// rely on.
#include <gtest/gtest.h>

#include <filesystem>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/backend.h"
#include "model/checkpoint.h"
#include "model/synthetic.h"
#include "model/tensor_names.h"
#include "tests/status_util.h"
#include "tests/worker/model_test_util.h"
#include "tools/fp8_export.h"
#include "worker/llama_model.h"

namespace octet {
namespace {

namespace fs = std::filesystem;

class RecordingCheckpoint : public Checkpoint {
 public:
  explicit RecordingCheckpoint(std::unique_ptr<Checkpoint> inner)
      : Checkpoint(inner->dir(), inner->config()), inner_(std::move(inner)) {}

  absl::StatusOr<TensorView> Get(absl::string_view name) const override {
    std::lock_guard<std::mutex> lock(mu_);
    asked_.insert(std::string(name));
    return inner_->Get(name);
  }
  bool Has(absl::string_view name) const override { return inner_->Has(name); }
  std::vector<std::string> TensorNames() const override {
    return inner_->TensorNames();
  }
  void ReleasePages(absl::string_view name) const override {
    inner_->ReleasePages(name);
  }

  std::set<std::string> asked() const {
    std::lock_guard<std::mutex> lock(mu_);
    return asked_;
  }

 private:
  std::unique_ptr<Checkpoint> inner_;
  mutable std::mutex mu_;
  mutable std::set<std::string> asked_;
};

class CheckpointInterfaceTest : public ::testing::TestWithParam<const char*> {
 public:
  static void SetUpTestSuite() {
    base_ = new fs::path(fs::temp_directory_path() /
                         absl::StrCat("octet_ckpt_iface_", ::getpid()));
    for (const char* preset : {"tiny", "tiny-qwen2", "tiny-qwen3"}) {
      ASSERT_TRUE(WriteSyntheticCheckpoint(*SyntheticPreset(preset),
                                           {.seed = 9},
                                           (*base_ / preset).string())
                      .ok());
    }
    Fp8ExportOptions channel;
    channel.scheme = "fp8-channel-token";
    ASSERT_TRUE(ExportFp8Checkpoint((*base_ / "tiny").string(),
                                    (*base_ / "tiny-fp8").string())
                    .ok());
    ASSERT_TRUE(ExportFp8Checkpoint((*base_ / "tiny-qwen3").string(),
                                    (*base_ / "tiny-qwen3-fp8-ct").string(),
                                    channel)
                    .ok());
  }
  static void TearDownTestSuite() {
    fs::remove_all(*base_);
    delete base_;
  }
  static std::string Dir(const char* name) { return (*base_ / name).string(); }

 private:
  static fs::path* base_;
};
fs::path* CheckpointInterfaceTest::base_ = nullptr;

TEST_P(CheckpointInterfaceTest, AnotherImplementationLoadsTheSameModel) {
  auto opened = Checkpoint::Open(Dir(GetParam()));
  OCTET_ASSERT_OK(opened.status());
  const Checkpoint& direct = **opened;
  auto second = Checkpoint::Open(Dir(GetParam()));
  OCTET_ASSERT_OK(second.status());
  RecordingCheckpoint recording(*std::move(second));

  ModelOptions options;
  options.method = LinearMethod::kFp8;
  auto backend = NewCpuBackend();
  auto a = LlamaModel::Load(direct, *backend, options);
  OCTET_ASSERT_OK(a.status());
  auto b = LlamaModel::Load(recording, *backend, options);
  OCTET_ASSERT_OK(b.status());
  const std::vector<int32_t> prompt = {1, 5, 9, 2, 7, 3, 11, 4};
  const std::vector<float> la = testing::LastLogits(**a, prompt);
  ASSERT_FALSE(la.empty());
  EXPECT_EQ(la, testing::LastLogits(**b, prompt));

  // Asked for: every tensor the table lists, its scales, nothing else.
  std::set<std::string> allowed;
  for (const ExpectedTensor& t : ExpectedTensors(direct.config())) {
    allowed.insert(t.name);
    if (t.linear && direct.config().fp8) {
      allowed.insert(WeightScaleName(t.name));
      allowed.insert(InputScaleName(t.name));
    }
  }
  const std::set<std::string> asked = recording.asked();
  for (const std::string& name : asked) {
    EXPECT_TRUE(allowed.contains(name)) << "asked for '" << name << "'";
  }
  for (const ExpectedTensor& t : ExpectedTensors(direct.config())) {
    EXPECT_TRUE(asked.contains(t.name)) << "never asked for '" << t.name << "'";
  }
  std::printf("[ measured ] %s: %zu names asked, %zu in the table\n",
              GetParam(), asked.size(), allowed.size());
}

INSTANTIATE_TEST_SUITE_P(Checkpoints, CheckpointInterfaceTest,
                         ::testing::Values("tiny", "tiny-qwen2", "tiny-qwen3",
                                           "tiny-fp8", "tiny-qwen3-fp8-ct"),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& c : s) {
                             if (c == '-') c = '_';
                           }
                           return s;
                         });

}  // namespace
}  // namespace octet
