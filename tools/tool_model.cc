#include "tools/tool_model.h"

#include <cstdio>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/device_choice.h"
#include "base/status_macros.h"
#include "model/checkpoint.h"
#include "worker/backends.h"

namespace octet {

absl::StatusOr<ActivationScales> ParseActivationScales(
    const std::string& value) {
  if (value == "token") return ActivationScales::kToken;
  if (value == "sequence") return ActivationScales::kSequence;
  return absl::InvalidArgumentError(absl::StrCat(
      "--activation_scales: '", value, "' is not token or sequence"));
}

const char* ActivationScalesName(ActivationScales scales) {
  return scales == ActivationScales::kToken ? "token" : "sequence";
}

absl::Status CheckToolModelFlags(const ToolModelFlags& f) {
  if (f.path.empty()) {
    return absl::InvalidArgumentError(
        "--model: a checkpoint directory or GGUF file is needed");
  }
  if (f.quantization != "auto" && f.quantization != "none" &&
      f.quantization != "fp8") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--quantization: '", f.quantization, "' is not auto, none or fp8"));
  }
  if (absl::Status s = ParseDeviceChoice(f.device).status(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--device: ", s.message()));
  }
  if (f.threads < 0 || f.threads > 1024) {
    return absl::InvalidArgumentError("--threads: must be in [0, 1024]");
  }
  return absl::OkStatus();
}

absl::StatusOr<ToolModel> LoadToolModel(
    const ToolModelFlags& f,
    const std::function<absl::Status(const ModelConfig&)>& check) {
  OCTET_ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> ckpt,
                         Checkpoint::Open(f.path));
  ToolModel m;
  m.config = ckpt->config();
  if (check) OCTET_RETURN_IF_ERROR(check(m.config));
  OCTET_ASSIGN_OR_RETURN(m.method,
                         ResolveQuantization(f.quantization, m.config, f.path));
  m.scheme = QuantizationScheme(m.config, m.method);
  if (f.quantize_lm_head) {
    if (m.method != "fp8") {
      return absl::InvalidArgumentError(
          "--quantize_lm_head needs FP8 (--quantization fp8, or auto on an "
          "FP8 checkpoint)");
    }
    m.scheme += "+lm_head";
  }
  if (f.tokenizer) {
    OCTET_ASSIGN_OR_RETURN(m.tokenizer,
                           ReadCheckpointTokenizer(f.path, m.config));
  }
  ModelOptions options;
  options.method =
      m.method == "fp8" ? LinearMethod::kFp8 : LinearMethod::kNone;
  options.cpu = {.isa = CpuIsa::kAuto, .num_threads = f.threads};
  options.quantize_lm_head = f.quantize_lm_head;
  options.activation_scales = f.activation_scales;
  // A GPU's GEMM ways as a server on this model takes them (the same file),
  // so that a tool's numbers are the server's.
  options.gemm_choices.file = DefaultGemmChoicePath(f.path);
  options.gemm_choices.log = [](const std::string& line) {
    std::fprintf(stderr, "octet: %s\n", line.c_str());
  };
  OCTET_ASSIGN_OR_RETURN(m.backend, NewBackend(f.device, options.cpu));
  OCTET_ASSIGN_OR_RETURN(m.model,
                         LlamaModel::Load(*ckpt, *m.backend, options));
  return m;
}

}  // namespace octet
