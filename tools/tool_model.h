// A model loaded in this process for one command (`octet logits`, `octet
// perplexity`): the checkpoint opened, the quantization resolved, the
// weights on the chosen device. The flags these commands share are checked
// here too.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/backend.h"
#include "model/model_config.h"
#include "model/tokenizer.h"
#include "worker/llama_model.h"

namespace octet {

struct ToolModelFlags {
  std::string path;                   // a checkpoint directory or GGUF file
  std::string quantization = "auto";  // auto, none or fp8
  std::string device = "auto";        // auto, cpu or cuda
  int32_t threads = 0;                // CPU threads; 0 = one per core
  bool tokenizer = false;             // load the checkpoint's tokenizer too
  // The lm_head in FP8 too (ModelOptions::quantize_lm_head): FP8 only.
  bool quantize_lm_head = false;
  // --activation_scales (ModelOptions::activation_scales).
  ActivationScales activation_scales = ActivationScales::kToken;
};

// --activation_scales' value: "token" or "sequence"; InvalidArgument naming
// the flag otherwise. ActivationScalesName is the way back.
absl::StatusOr<ActivationScales> ParseActivationScales(
    const std::string& value);
const char* ActivationScalesName(ActivationScales scales);

// InvalidArgument naming the flag when one is not a value the commands take.
absl::Status CheckToolModelFlags(const ToolModelFlags& flags);

// Members are destroyed in reverse order: the model before its backend.
struct ToolModel {
  ModelConfig config;
  std::string method;  // "none" or "fp8"
  // QuantizationScheme: "none", "fp8-tensor" ..., with "+lm_head" when the
  // lm_head is FP8 too.
  std::string scheme;
  // With ToolModelFlags::tokenizer; null when the checkpoint has none.
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<LlamaModel> model;
};

// Opens the checkpoint, resolves --quantization against it and loads the
// model (and its tokenizer) onto the device. `check` runs on the config
// before the weights load (e.g. that prompts fit), so that a bad input fails
// fast.
absl::StatusOr<ToolModel> LoadToolModel(
    const ToolModelFlags& flags,
    const std::function<absl::Status(const ModelConfig&)>& check = nullptr);

}  // namespace octet
