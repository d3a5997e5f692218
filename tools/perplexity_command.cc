// `octet perplexity` (see perplexity_command.h).
#include "tools/perplexity_command.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>

#include "absl/strings/str_cat.h"
#include "base/file_util.h"
#include "base/status_macros.h"
#include "model/checkpoint.h"
#include "nlohmann/json.hpp"
#include "worker/kv_cache.h"

namespace octet {
namespace {

constexpr int64_t kBlockSize = 16;
constexpr size_t kMaxTextBytes = size_t{64} << 20;

// What scoring the windows adds up.
struct Scores {
  int64_t windows = 0;
  std::vector<double> logprobs;  // each scored token's, in text order
};

// Scores ids[begin, end) as one window, in one forward as a coordinator
// runs a prompt (never split: FP8's activation scales are per forward),
// each token's logits predicting the next token of the window.
absl::Status ScoreWindow(LlamaModel& model, const std::vector<int32_t>& ids,
                         int64_t begin, int64_t end, Scores* out) {
  OCTET_ASSIGN_OR_RETURN(
      std::unique_ptr<KvCache> cache,
      model.NewKvCache({.block_size = kBlockSize,
                        .num_blocks = (end - begin + kBlockSize - 1) /
                                      kBlockSize}));
  std::vector<int32_t> table;
  OCTET_RETURN_IF_ERROR(cache->Reserve(end - begin, &table));
  SequenceStep step{std::vector<int32_t>(ids.begin() + begin, ids.begin() + end),
                    0, &table, /*all_logits=*/true};
  std::vector<SampledToken> none;
  OCTET_RETURN_IF_ERROR(model.ForwardSample({&step, 1}, *cache, {}, &none));
  const std::vector<int32_t> targets(ids.begin() + begin + 1,
                                     ids.begin() + end);
  std::vector<float> logprobs;
  OCTET_RETURN_IF_ERROR(model.ScoreRows(0, targets, &logprobs));
  out->logprobs.insert(out->logprobs.end(), logprobs.begin(), logprobs.end());
  ++out->windows;
  return absl::OkStatus();
}

void PrintResult(const PerplexityCommand& c, const std::string& scheme,
                 int64_t window, int64_t tokens, const Scores& s) {
  double nll = 0;
  for (double lp : s.logprobs) nll -= lp;
  const double mean = nll / static_cast<double>(s.logprobs.size());
  nlohmann::json j = {{"model", c.model.path},
                      {"quantization_scheme", scheme},
                      {"window", window},
                      {"tokens", tokens},
                      {"windows", s.windows},
                      {"scored", s.logprobs.size()},
                      {"mean_nll", mean},
                      {"perplexity", std::exp(mean)}};
  if (c.print_logprobs) j["logprobs"] = s.logprobs;
  std::printf("%s\n", j.dump().c_str());
  std::fprintf(stderr,
               "octet: %s: %lld tokens in %lld windows of %lld, %zu scored: "
               "mean NLL %.6f nats, perplexity %.4f (%s)\n",
               c.text_file.c_str(), static_cast<long long>(tokens),
               static_cast<long long>(s.windows),
               static_cast<long long>(window), s.logprobs.size(), mean,
               std::exp(mean), scheme.c_str());
}

// The windows of `ids`: [begin, end) pairs of `window` tokens, the last
// shorter; a last window of one token scores nothing and is left out.
std::vector<std::pair<int64_t, int64_t>> Windows(int64_t n, int64_t window) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (int64_t begin = 0; begin + 1 < n; begin += window) {
    out.emplace_back(begin, std::min(n, begin + window));
  }
  return out;
}

// The text's ids by `tokenizer`; InvalidArgument under two tokens.
absl::StatusOr<std::vector<int32_t>> TextIds(const PerplexityCommand& c,
                                             const Tokenizer& tokenizer) {
  OCTET_ASSIGN_OR_RETURN(const std::string text,
                         ReadSmallFile(c.text_file, kMaxTextBytes));
  const std::vector<int64_t> encoded = tokenizer.Encode(text, true);
  if (encoded.size() < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        c.text_file, " makes ", encoded.size(),
        " token(s); at least 2 are needed"));
  }
  return std::vector<int32_t>(encoded.begin(), encoded.end());
}

// --server: the windows scored by the coordinator.
absl::Status RunRemote(const PerplexityCommand& c) {
  OCTET_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer,
                         ReadTokenizerAlone(c.model.path));
  OCTET_ASSIGN_OR_RETURN(const std::vector<int32_t> ids, TextIds(c, *tokenizer));
  if (c.window == 0) {
    return absl::InvalidArgumentError(
        "perplexity --server needs --window N (the server's context is its "
        "own)");
  }
  Scores scores;
  const int64_t n = static_cast<int64_t>(ids.size());
  for (const auto& [begin, end] : Windows(n, c.window)) {
    OCTET_ASSIGN_OR_RETURN(
        const std::vector<float> logprobs,
        c.remote(std::vector<int32_t>(ids.begin() + begin, ids.begin() + end)));
    if (static_cast<int64_t>(logprobs.size()) != end - begin - 1) {
      return absl::InternalError(absl::StrCat(
          c.server, " returned ", logprobs.size(), " prompt logprobs for ",
          end - begin, " tokens"));
    }
    scores.logprobs.insert(scores.logprobs.end(), logprobs.begin(),
                           logprobs.end());
    ++scores.windows;
  }
  PrintResult(c, absl::StrCat("server ", c.server), c.window, n, scores);
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckPerplexityCommand(const PerplexityCommand& c) {
  OCTET_RETURN_IF_ERROR(CheckToolModelFlags(c.model));
  if (c.text_file.empty()) {
    return absl::InvalidArgumentError("perplexity needs --text FILE");
  }
  if (c.window != 0 && c.window < 2) {
    return absl::InvalidArgumentError(
        "--window: at least 2 tokens (one to predict from, one to score)");
  }
  return absl::OkStatus();
}

absl::Status RunPerplexity(const PerplexityCommand& c) {
  if (c.remote) return RunRemote(c);
  ToolModelFlags flags = c.model;
  flags.tokenizer = true;
  OCTET_ASSIGN_OR_RETURN(ToolModel m, LoadToolModel(flags));
  if (m.tokenizer == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        c.model.path, " has no tokenizer: perplexity scores text"));
  }
  const int64_t context = m.config.max_position_embeddings;
  const int64_t window = c.window == 0 ? context : c.window;
  if (window > context) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--window ", window, " is longer than the model's context of ",
        context));
  }
  OCTET_ASSIGN_OR_RETURN(const std::vector<int32_t> ids,
                         TextIds(c, *m.tokenizer));
  std::fprintf(stderr, "octet: %s on %s, linear layers %s: scoring %s\n",
               c.model.path.c_str(), m.backend->Describe().c_str(),
               m.scheme.c_str(), c.text_file.c_str());
  Scores scores;
  const int64_t n = static_cast<int64_t>(ids.size());
  for (const auto& [begin, end] : Windows(n, window)) {
    OCTET_RETURN_IF_ERROR(ScoreWindow(*m.model, ids, begin, end, &scores));
    std::fprintf(stderr, "octet: window %lld done (%lld of %lld tokens)\n",
                 static_cast<long long>(scores.windows),
                 static_cast<long long>(end), static_cast<long long>(n));
  }
  PrintResult(c, m.scheme, window, n, scores);
  return absl::OkStatus();
}

}  // namespace octet
