// octet: the user CLI.
//
//   octet make-model --preset tiny|tiny-mistral|llama-1b|mistral-7b --out DIR
//                    [--dtype bf16|fp16|fp32] [--seed N]
//
// (quantize and generate come with the model.) A bad flag value or a missing
// argument prints one line and exits with status 2; a failure while working
// prints the error and exits with status 1.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "worker/synthetic.h"

ABSL_FLAG(std::string, preset, "", "make-model: the model shape (see --help)");
ABSL_FLAG(std::string, out, "",
          "make-model: the checkpoint directory to write");
ABSL_FLAG(std::string, dtype, "bf16",
          "make-model: weight dtype: bf16, fp16 or fp32");
ABSL_FLAG(uint64_t, seed, 0, "make-model: random seed (same seed, same bytes)");

namespace octet {
namespace {

constexpr int kUsageError = 2;

int UsageError(const std::string& message) {
  std::fprintf(stderr, "octet: %s\n", message.c_str());
  return kUsageError;
}

int Failed(const absl::Status& status) {
  std::fprintf(stderr, "octet: %s\n", std::string(status.message()).c_str());
  return 1;
}

int MakeModel() {
  const std::string preset = absl::GetFlag(FLAGS_preset);
  const std::string out = absl::GetFlag(FLAGS_out);
  if (preset.empty()) return UsageError("make-model needs --preset");
  if (out.empty()) return UsageError("make-model needs --out DIR");
  absl::StatusOr<ModelConfig> config = SyntheticPreset(preset);
  if (!config.ok())
    return UsageError(absl::StrCat("--preset: ", config.status().message()));
  SyntheticOptions options;
  const std::string dtype = absl::GetFlag(FLAGS_dtype);
  if (dtype == "bf16") {
    options.dtype = DType::kBf16;
  } else if (dtype == "fp16") {
    options.dtype = DType::kF16;
  } else if (dtype == "fp32") {
    options.dtype = DType::kF32;
  } else {
    return UsageError(
        absl::StrCat("--dtype: '", dtype, "' is not bf16, fp16 or fp32"));
  }
  options.seed = absl::GetFlag(FLAGS_seed);
  const auto start = std::chrono::steady_clock::now();
  absl::Status s = WriteSyntheticCheckpoint(*config, options, out);
  if (!s.ok()) return Failed(s);
  std::printf(
      "wrote %s (%s, %s, seed %llu) in %.1f s\n", out.c_str(), preset.c_str(),
      dtype.c_str(), static_cast<unsigned long long>(options.seed),
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count());
  return 0;
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      absl::StrCat("the octet command line.\n\n"
                   "  octet make-model --preset ",
                   absl::StrJoin(SyntheticPresetNames(), "|"),
                   " --out DIR [--dtype bf16|fp16|fp32] [--seed N]\n"
                   "      writes a random-weight Hugging Face checkpoint with "
                   "a real tokenizer"));
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() != 2) {
    return UsageError(
        "expected one command: make-model (octet --help for usage)");
  }
  const std::string command = args[1];
  if (command == "make-model") return MakeModel();
  return UsageError(
      absl::StrCat("unknown command '", command, "' (octet --help for usage)"));
}

}  // namespace
}  // namespace octet

int main(int argc, char** argv) { return octet::Main(argc, argv); }
