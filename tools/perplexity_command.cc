// `octet perplexity` (see perplexity_command.h).
#include "tools/perplexity_command.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>

#include "absl/strings/str_cat.h"
#include "base/file_util.h"
#include "base/status_macros.h"
#include "nlohmann/json.hpp"
#include "worker/kv_cache.h"

namespace octet {
namespace {

constexpr int64_t kChunk = 512;  // tokens per forward
constexpr int64_t kBlockSize = 16;
constexpr size_t kMaxTextBytes = size_t{64} << 20;

// What scoring the windows adds up.
struct Scores {
  int64_t windows = 0;
  std::vector<double> logprobs;  // each scored token's, in text order
};

// Scores ids[begin, end) as one window: forwards it in chunks, each token's
// logits predicting the next token of the window.
absl::Status ScoreWindow(LlamaModel& model, const std::vector<int32_t>& ids,
                         int64_t begin, int64_t end, int64_t vocab,
                         Scores* out) {
  OCTET_ASSIGN_OR_RETURN(
      std::unique_ptr<KvCache> cache,
      model.NewKvCache({.block_size = kBlockSize,
                        .num_blocks = (end - begin + kBlockSize - 1) /
                                      kBlockSize}));
  std::vector<int32_t> table;
  OCTET_RETURN_IF_ERROR(cache->Reserve(end - begin, &table));
  std::vector<float> logits;
  for (int64_t at = begin; at < end; at += kChunk) {
    const int64_t n = std::min(kChunk, end - at);
    SequenceStep step{std::vector<int32_t>(ids.begin() + at,
                                           ids.begin() + at + n),
                      at - begin, &table, /*all_logits=*/true};
    OCTET_RETURN_IF_ERROR(model.Forward({&step, 1}, *cache, &logits));
    for (int64_t r = 0; r < n && at + r + 1 < end; ++r) {
      out->logprobs.push_back(TokenLogprob(
          absl::MakeConstSpan(logits.data() + r * vocab, vocab),
          ids[at + r + 1]));
    }
  }
  ++out->windows;
  return absl::OkStatus();
}

void PrintResult(const PerplexityCommand& c, const ToolModel& m,
                 int64_t window, int64_t tokens, const Scores& s) {
  double nll = 0;
  for (double lp : s.logprobs) nll -= lp;
  const double mean = nll / static_cast<double>(s.logprobs.size());
  nlohmann::json j = {{"model", c.model.path},
                      {"quantization_scheme", m.scheme},
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
               std::exp(mean), m.scheme.c_str());
}

}  // namespace

double TokenLogprob(absl::Span<const float> logits, int32_t target) {
  const double most = *std::max_element(logits.begin(), logits.end());
  double sum = 0;
  for (float l : logits) sum += std::exp(static_cast<double>(l) - most);
  return static_cast<double>(logits[target]) - most - std::log(sum);
}

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
  OCTET_ASSIGN_OR_RETURN(const std::string text,
                         ReadSmallFile(c.text_file, kMaxTextBytes));
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
  const std::vector<int64_t> encoded = m.tokenizer->Encode(text, true);
  const std::vector<int32_t> ids(encoded.begin(), encoded.end());
  if (ids.size() < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        c.text_file, " makes ", ids.size(), " token(s); at least 2 are needed"));
  }
  std::fprintf(stderr, "octet: %s on %s, linear layers %s: scoring %s\n",
               c.model.path.c_str(), m.backend->Describe().c_str(),
               m.scheme.c_str(), c.text_file.c_str());
  Scores scores;
  const int64_t n = static_cast<int64_t>(ids.size());
  for (int64_t begin = 0; begin < n; begin += window) {
    const int64_t end = std::min(n, begin + window);
    if (end - begin < 2) break;  // a last window of one token scores nothing
    OCTET_RETURN_IF_ERROR(
        ScoreWindow(*m.model, ids, begin, end, m.config.vocab_size, &scores));
    std::fprintf(stderr, "octet: window %lld done (%lld of %lld tokens)\n",
                 static_cast<long long>(scores.windows),
                 static_cast<long long>(end), static_cast<long long>(n));
  }
  PrintResult(c, m, window, n, scores);
  return absl::OkStatus();
}

}  // namespace octet
