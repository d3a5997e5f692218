#include "tools/logits_command.h"

#include <cmath>
#include <cstdio>
#include <memory>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "model/checkpoint.h"
#include "nlohmann/json.hpp"
#include "tools/tool_model.h"
#include "worker/backends.h"
#include "worker/kv_cache.h"
#include "worker/llama_model.h"

namespace octet {
namespace {

using Json = nlohmann::json;

// More prompts than a test needs; bounds the cache a typo could ask for.
constexpr size_t kMaxPrompts = 4096;
constexpr int64_t kBlockSize = 16;

absl::Status PromptError(size_t i, const std::string& what) {
  return absl::InvalidArgumentError(
      absl::StrCat("--prompts_json: prompt ", i, " ", what));
}

absl::StatusOr<std::vector<int32_t>> ParsePrompt(const Json& j, size_t i) {
  if (!j.is_array() || j.empty()) {
    return PromptError(i, "is not a non-empty array of token ids");
  }
  std::vector<int32_t> ids;
  for (const Json& id : j) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
        id.get<int64_t>() > INT32_MAX) {
      return PromptError(
          i, absl::StrCat("has '", id.dump(), "', which is not a token id"));
    }
    ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
  }
  return ids;
}

// Every prompt's ids below the vocabulary and its length within the context.
absl::Status CheckPromptsFit(const std::vector<std::vector<int32_t>>& prompts,
                             const ModelConfig& c) {
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (static_cast<int64_t>(prompts[i].size()) > c.max_position_embeddings) {
      return PromptError(i, absl::StrCat("has ", prompts[i].size(),
                                         " tokens, beyond the context of ",
                                         c.max_position_embeddings));
    }
    for (int32_t id : prompts[i]) {
      if (id >= c.vocab_size) {
        return PromptError(
            i, absl::StrCat("has token ", id, ", beyond the vocabulary of ",
                            c.vocab_size));
      }
    }
  }
  return absl::OkStatus();
}

// A binary32 value as JSON: 9 significant digits, or null if not finite.
std::string FloatJson(float v) {
  if (!std::isfinite(v)) return "null";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.9g", v);
  return buf;
}

void PrintFloats(const float* v, size_t n) {
  std::fputc('[', stdout);
  for (size_t i = 0; i < n; ++i) {
    std::fputs(FloatJson(v[i]).c_str(), stdout);
    if (i + 1 < n) std::fputc(',', stdout);
  }
  std::fputc(']', stdout);
}

void PrintCodes(const std::vector<uint8_t>& codes) {
  std::fputc('[', stdout);
  for (size_t i = 0; i < codes.size(); ++i) {
    std::printf(i + 1 < codes.size() ? "%u," : "%u", codes[i]);
  }
  std::fputc(']', stdout);
}

void PrintJson(const std::string& scheme, const std::vector<float>& logits,
               int64_t vocab, const ForwardTrace* trace) {
  std::printf("{\"quantization_scheme\": \"%s\",\n\"logits\": [",
              scheme.c_str());
  const size_t rows = logits.size() / vocab;
  for (size_t r = 0; r < rows; ++r) {
    PrintFloats(logits.data() + r * vocab, vocab);
    std::printf(r + 1 < rows ? ",\n" : "]");
  }
  if (trace != nullptr) {
    std::printf(",\n\"activations\": [");
    for (size_t c = 0; c < trace->codes.size(); ++c) {
      std::printf("{\"codes\": ");
      PrintCodes(trace->codes[c]);
      std::printf(", \"scales\": ");
      PrintFloats(trace->scales[c].data(), trace->scales[c].size());
      std::printf(c + 1 < trace->codes.size() ? "},\n" : "}");
    }
    std::printf("]");
  }
  std::printf("}\n");
}

// Runs every prompt as its own sequence in one forward.
absl::Status ForwardPrompts(LlamaModel& model,
                            const std::vector<std::vector<int32_t>>& prompts,
                            std::vector<float>* logits, ForwardTrace* trace) {
  int64_t blocks = 0;
  for (const auto& p : prompts) {
    blocks += (static_cast<int64_t>(p.size()) + kBlockSize - 1) / kBlockSize;
  }
  OCTET_ASSIGN_OR_RETURN(
      std::unique_ptr<KvCache> cache,
      model.NewKvCache({.block_size = kBlockSize, .num_blocks = blocks}));
  std::vector<std::vector<int32_t>> tables(prompts.size());
  std::vector<SequenceStep> steps;
  for (size_t i = 0; i < prompts.size(); ++i) {
    OCTET_RETURN_IF_ERROR(
        cache->Reserve(static_cast<int64_t>(prompts[i].size()), &tables[i]));
    steps.push_back({prompts[i], 0, &tables[i]});
  }
  return model.Forward(steps, *cache, logits, trace);
}

}  // namespace

absl::StatusOr<std::vector<std::vector<int32_t>>> ParsePrompts(
    const std::string& json) {
  const Json j = Json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_array() || j.empty()) {
    return absl::InvalidArgumentError(
        "--prompts_json: not a non-empty JSON array of prompts, e.g. "
        "[[1,2,3],[4,5]]");
  }
  if (j.size() > kMaxPrompts) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--prompts_json: ", j.size(), " prompts, more than ", kMaxPrompts));
  }
  std::vector<std::vector<int32_t>> prompts;
  for (size_t i = 0; i < j.size(); ++i) {
    OCTET_ASSIGN_OR_RETURN(std::vector<int32_t> ids, ParsePrompt(j[i], i));
    prompts.push_back(std::move(ids));
  }
  return prompts;
}

namespace {
ToolModelFlags FlagsOf(const LogitsCommand& c) {
  return {.path = c.model_dir,
          .quantization = c.quantization,
          .device = c.device,
          .threads = c.threads,
          .activation_scales = c.activation_scales};
}
}  // namespace

absl::Status CheckLogitsCommand(const LogitsCommand& c) {
  if (c.model_dir.empty()) {
    return absl::InvalidArgumentError("logits needs --model DIR");
  }
  if (c.prompts_json.empty()) {
    return absl::InvalidArgumentError("logits needs --prompts_json");
  }
  OCTET_RETURN_IF_ERROR(CheckToolModelFlags(FlagsOf(c)));
  return ParsePrompts(c.prompts_json).status();
}

absl::Status RunLogits(const LogitsCommand& c) {
  OCTET_ASSIGN_OR_RETURN(const auto prompts, ParsePrompts(c.prompts_json));
  OCTET_ASSIGN_OR_RETURN(
      ToolModel m, LoadToolModel(FlagsOf(c), [&](const ModelConfig& config) {
        return CheckPromptsFit(prompts, config);
      }));
  if (c.activation_codes && m.method != "fp8") {
    return absl::InvalidArgumentError(
        "--activation_codes needs FP8 (--quantization fp8, or auto on an FP8 "
        "checkpoint)");
  }
  std::fprintf(stderr, "octet: %s on %s, linear layers %s, %zu prompts\n",
               c.model_dir.c_str(), m.backend->Describe().c_str(),
               m.scheme.c_str(), prompts.size());
  ForwardTrace trace;
  trace.record_codes = c.activation_codes;
  std::vector<float> logits;
  OCTET_RETURN_IF_ERROR(ForwardPrompts(*m.model, prompts, &logits,
                                       c.activation_codes ? &trace : nullptr));
  PrintJson(m.scheme, logits, m.config.vocab_size,
            c.activation_codes ? &trace : nullptr);
  return absl::OkStatus();
}

}  // namespace octet
