#include "coordinator/request.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace octet {
namespace {

absl::Status Invalid(const std::string& field, const std::string& problem) {
  return absl::InvalidArgumentError(absl::StrCat(field, " ", problem));
}

// A token id the model has: in [0, vocab_size).
absl::Status CheckId(int64_t id, const ModelLimits& limits,
                     const std::string& field) {
  if (id < 0 || id >= limits.vocab_size) {
    return Invalid(field,
                   absl::StrCat("= ", id, " is outside the vocabulary [0, ",
                                limits.vocab_size, ")"));
  }
  return absl::OkStatus();
}

absl::Status CheckPrompt(const v1::GenerateRequest& r,
                         const ModelLimits& limits, const EncodeFn& encode,
                         std::vector<int32_t>* prompt) {
  switch (r.input_case()) {
    case v1::GenerateRequest::kText: {
      if (r.text().empty()) return Invalid("input.text", "is empty");
      if (static_cast<int64_t>(r.text().size()) > kMaxPromptBytes) {
        return Invalid("input.text",
                       absl::StrCat("is ", r.text().size(),
                                    " bytes, more than ", kMaxPromptBytes));
      }
      if (!encode) {
        return Invalid("input.text",
                       "cannot be used: this model has no tokenizer (send "
                       "input.token_ids)");
      }
      // Before tokenizing it: a text too long to fit, whatever its tokens.
      if (const int64_t fit = limits.max_context * limits.max_token_bytes;
          limits.max_token_bytes > 0 &&
          static_cast<int64_t>(r.text().size()) > fit) {
        return Invalid(
            "input.text",
            absl::StrCat("is ", r.text().size(), " bytes: the context holds ",
                         limits.max_context, " tokens of at most ",
                         limits.max_token_bytes, " bytes, ", fit,
                         " bytes of text"));
      }
      for (int64_t id : encode(r.text())) {
        prompt->push_back(static_cast<int32_t>(id));
      }
      return absl::OkStatus();
    }
    case v1::GenerateRequest::kTokenIds: {
      const auto& ids = r.token_ids().ids();
      if (ids.empty()) return Invalid("input.token_ids", "is empty");
      for (int i = 0; i < ids.size(); ++i) {
        OCTET_RETURN_IF_ERROR(
            CheckId(ids[i], limits, absl::StrCat("input.token_ids[", i, "]")));
      }
      prompt->assign(ids.begin(), ids.end());
      return absl::OkStatus();
    }
    case v1::GenerateRequest::INPUT_NOT_SET:
      break;
  }
  return Invalid("input", "is missing: set text or token_ids");
}

absl::Status CheckSampling(const v1::SamplingParams& s, ValidRequest* out) {
  if (s.has_temperature()) {
    if (!std::isfinite(s.temperature()) || s.temperature() < 0) {
      return Invalid(
          "sampling.temperature",
          absl::StrCat("must be a number >= 0, got ", s.temperature()));
    }
    out->temperature = s.temperature();
  }
  if (s.has_top_p()) {
    if (!(s.top_p() > 0 && s.top_p() <= 1)) {
      return Invalid("sampling.top_p",
                     absl::StrCat("must be in (0, 1], got ", s.top_p()));
    }
    out->top_p = s.top_p();
  }
  if (s.has_top_k()) {
    if (s.top_k() < 0) {
      return Invalid("sampling.top_k",
                     absl::StrCat("must be >= 0 (0: all), got ", s.top_k()));
    }
    out->top_k = s.top_k();
  }
  if (s.has_seed()) out->seed = s.seed();
  if (s.has_repetition_penalty()) {
    if (!std::isfinite(s.repetition_penalty()) || s.repetition_penalty() <= 0) {
      return Invalid("sampling.repetition_penalty",
                     absl::StrCat("must be a number > 0 (1: none), got ",
                                  s.repetition_penalty()));
    }
    out->repetition_penalty = s.repetition_penalty();
  }
  return absl::OkStatus();
}

absl::Status CheckStopping(const v1::StoppingCriteria& s,
                           const ModelLimits& limits, ValidRequest* out) {
  const int64_t prompt = static_cast<int64_t>(out->prompt.size());
  if (s.has_max_new_tokens()) {
    if (s.max_new_tokens() == 0) {
      return Invalid("stopping.max_new_tokens", "must be at least 1, got 0");
    }
    out->max_new_tokens = s.max_new_tokens();
  }
  if (prompt + out->max_new_tokens > limits.max_context) {
    return Invalid(
        "stopping.max_new_tokens",
        absl::StrCat("= ", out->max_new_tokens, " does not fit: the ", prompt,
                     "-token prompt plus it exceed the ", limits.max_context,
                     "-token context"));
  }
  if (s.stop_size() > kMaxStopStrings) {
    return Invalid("stopping.stop",
                   absl::StrCat("has ", s.stop_size(), " strings, more than ",
                                kMaxStopStrings));
  }
  for (int i = 0; i < s.stop_size(); ++i) {
    const int64_t n = static_cast<int64_t>(s.stop(i).size());
    if (n == 0 || n > kMaxStopStringBytes) {
      return Invalid(absl::StrCat("stopping.stop[", i, "]"),
                     absl::StrCat("must be 1 to ", kMaxStopStringBytes,
                                  " bytes, got ", n));
    }
    out->stop.push_back(s.stop(i));
  }
  if (s.stop_token_ids_size() > kMaxStopTokenIds) {
    return Invalid("stopping.stop_token_ids",
                   absl::StrCat("has ", s.stop_token_ids_size(),
                                " ids, more than ", kMaxStopTokenIds));
  }
  for (int i = 0; i < s.stop_token_ids_size(); ++i) {
    OCTET_RETURN_IF_ERROR(
        CheckId(s.stop_token_ids(i), limits,
                absl::StrCat("stopping.stop_token_ids[", i, "]")));
    out->stop_token_ids.push_back(s.stop_token_ids(i));
  }
  if (!s.ignore_eos()) out->eos_ids = limits.eos_ids;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ValidRequest> ValidateRequest(const v1::GenerateRequest& request,
                                             const ModelLimits& limits,
                                             const EncodeFn& encode) {
  ValidRequest out;
  if (static_cast<int64_t>(request.request_id().size()) > kMaxRequestIdBytes) {
    return Invalid("request_id",
                   absl::StrCat("is ", request.request_id().size(),
                                " bytes, more than ", kMaxRequestIdBytes));
  }
  for (unsigned char c : request.request_id()) {
    if (c < 0x20 || c == 0x7F) {
      return Invalid("request_id", "contains a control character");
    }
  }
  out.request_id = request.request_id();
  OCTET_RETURN_IF_ERROR(CheckPrompt(request, limits, encode, &out.prompt));
  if (static_cast<int64_t>(out.prompt.size()) >= limits.max_context) {
    return Invalid(
        "input", absl::StrCat("is ", out.prompt.size(),
                              " tokens: the context holds ", limits.max_context,
                              ", prompt and at least one new token"));
  }
  OCTET_RETURN_IF_ERROR(CheckSampling(request.sampling(), &out));
  OCTET_RETURN_IF_ERROR(CheckStopping(request.stopping(), limits, &out));
  out.logprobs = request.logprobs();
  out.prompt_logprobs = request.prompt_logprobs();
  return out;
}

}  // namespace octet
