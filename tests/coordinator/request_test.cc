// The public API's request checks (coordinator/request.h): the table of
// invalid requests, each INVALID_ARGUMENT naming its field, and what a valid
// request becomes (defaults, tokenized text, EOS handling).
#include "coordinator/request.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>

namespace octet {
namespace {

const ModelLimits kLimits{.vocab_size = 100, .max_context = 64, .eos_ids = {2}};

// A stand-in tokenizer: BOS (1), then one id per byte (mod 90, + 10).
std::vector<int64_t> Encode(const std::string& text) {
  std::vector<int64_t> ids = {1};
  for (unsigned char c : text) ids.push_back(10 + c % 90);
  return ids;
}

v1::GenerateRequest Valid() {
  v1::GenerateRequest r;
  r.mutable_token_ids()->add_ids(1);
  r.mutable_token_ids()->add_ids(42);
  return r;
}

TEST(RequestTest, DefaultsAreFilledIn) {
  absl::StatusOr<ValidRequest> v = ValidateRequest(Valid(), kLimits, Encode);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->prompt, (std::vector<int32_t>{1, 42}));
  EXPECT_EQ(v->temperature, 1.0f);
  EXPECT_EQ(v->top_p, 1.0f);
  EXPECT_EQ(v->top_k, 0);
  EXPECT_FALSE(v->seed.has_value());
  EXPECT_EQ(v->repetition_penalty, 1.0f);
  EXPECT_EQ(v->max_new_tokens, kDefaultMaxNewTokens);
  EXPECT_EQ(v->eos_ids, (std::vector<int32_t>{2}));
  EXPECT_TRUE(v->stop.empty() && v->stop_token_ids.empty());
  EXPECT_FALSE(v->logprobs);
  EXPECT_FALSE(v->prompt_logprobs);
}

TEST(RequestTest, SetFieldsAreKept) {
  v1::GenerateRequest r;
  r.set_text("hi");
  r.set_request_id("req-7");
  r.set_logprobs(true);
  r.set_prompt_logprobs(true);
  auto* s = r.mutable_sampling();
  s->set_temperature(0.0f);
  s->set_top_p(0.5f);
  s->set_top_k(40);
  s->set_seed(123);
  s->set_repetition_penalty(1.2f);
  auto* st = r.mutable_stopping();
  st->set_max_new_tokens(61);  // 3-token prompt + 61 = 64: fits exactly
  st->add_stop("\n\n");
  st->add_stop_token_ids(7);
  st->set_ignore_eos(true);
  absl::StatusOr<ValidRequest> v = ValidateRequest(r, kLimits, Encode);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->prompt, (std::vector<int32_t>{1, 10 + 'h' % 90, 10 + 'i' % 90}));
  EXPECT_EQ(v->request_id, "req-7");
  EXPECT_TRUE(v->logprobs);
  EXPECT_TRUE(v->prompt_logprobs);
  EXPECT_EQ(v->temperature, 0.0f);
  EXPECT_EQ(v->top_p, 0.5f);
  EXPECT_EQ(v->top_k, 40);
  EXPECT_EQ(v->seed, std::optional<uint64_t>(123));
  EXPECT_EQ(v->repetition_penalty, 1.2f);
  EXPECT_EQ(v->max_new_tokens, 61);
  EXPECT_EQ(v->stop, (std::vector<std::string>{"\n\n"}));
  EXPECT_EQ(v->stop_token_ids, (std::vector<int32_t>{7}));
  EXPECT_TRUE(v->eos_ids.empty());  // ignore_eos
}

// Adds `count` stop strings of `bytes` bytes each. (Through a named string:
// GCC 12 warns, wrongly, about add_stop("x") inlined into a lambda.)
void AddStops(v1::GenerateRequest& r, int64_t count, int64_t bytes) {
  const std::string stop(bytes, 'x');
  for (int64_t i = 0; i < count; ++i) r.mutable_stopping()->add_stop(stop);
}

struct BadCase {
  const char* name;
  std::function<void(v1::GenerateRequest&)> mutate;
  const char* field;  // must appear in the message
};

TEST(RequestTest, EveryInvalidRequestNamesItsField) {
  const std::vector<BadCase> cases = {
      {"no input", [](auto& r) { r.clear_input(); }, "input"},
      {"empty text", [](auto& r) { r.set_text(""); }, "input.text"},
      {"huge text",
       [](auto& r) { r.set_text(std::string(kMaxPromptBytes + 1, 'a')); },
       "input.text"},
      {"empty ids", [](auto& r) { r.mutable_token_ids()->clear_ids(); },
       "input.token_ids"},
      {"negative id", [](auto& r) { r.mutable_token_ids()->add_ids(-1); },
       "input.token_ids[2]"},
      {"id beyond vocab",
       [](auto& r) { r.mutable_token_ids()->set_ids(0, 100); },
       "input.token_ids[0]"},
      {"prompt fills the context",
       [](auto& r) {
         for (int i = 0; i < 62; ++i) r.mutable_token_ids()->add_ids(5);
       },
       "input"},
      {"negative temperature",
       [](auto& r) { r.mutable_sampling()->set_temperature(-0.1f); },
       "sampling.temperature"},
      {"NaN temperature",
       [](auto& r) { r.mutable_sampling()->set_temperature(NAN); },
       "sampling.temperature"},
      {"top_p 0", [](auto& r) { r.mutable_sampling()->set_top_p(0.0f); },
       "sampling.top_p"},
      {"top_p above 1", [](auto& r) { r.mutable_sampling()->set_top_p(1.5f); },
       "sampling.top_p"},
      {"NaN top_p", [](auto& r) { r.mutable_sampling()->set_top_p(NAN); },
       "sampling.top_p"},
      {"negative top_k", [](auto& r) { r.mutable_sampling()->set_top_k(-1); },
       "sampling.top_k"},
      {"zero repetition penalty",
       [](auto& r) { r.mutable_sampling()->set_repetition_penalty(0.0f); },
       "sampling.repetition_penalty"},
      {"infinite repetition penalty",
       [](auto& r) { r.mutable_sampling()->set_repetition_penalty(INFINITY); },
       "sampling.repetition_penalty"},
      {"max_new_tokens 0",
       [](auto& r) { r.mutable_stopping()->set_max_new_tokens(0); },
       "stopping.max_new_tokens"},
      {"max_new_tokens beyond the context",
       [](auto& r) { r.mutable_stopping()->set_max_new_tokens(63); },
       "stopping.max_new_tokens"},
      {"empty stop string", [](auto& r) { r.mutable_stopping()->add_stop(""); },
       "stopping.stop[0]"},
      {"long stop string",
       [](auto& r) {
         AddStops(r, 1, 1);
         AddStops(r, 1, kMaxStopStringBytes + 1);
       },
       "stopping.stop[1]"},
      {"too many stop strings",
       [](auto& r) { AddStops(r, kMaxStopStrings + 1, 1); }, "stopping.stop"},
      {"bad stop token",
       [](auto& r) { r.mutable_stopping()->add_stop_token_ids(1000); },
       "stopping.stop_token_ids[0]"},
      {"too many stop tokens",
       [](auto& r) {
         for (int i = 0; i <= kMaxStopTokenIds; ++i) {
           r.mutable_stopping()->add_stop_token_ids(3);
         }
       },
       "stopping.stop_token_ids"},
      {"long request id",
       [](auto& r) {
         r.set_request_id(std::string(kMaxRequestIdBytes + 1, 'r'));
       },
       "request_id"},
      {"control character in request id",
       [](auto& r) { r.set_request_id("a\nb"); }, "request_id"},
  };
  for (const BadCase& c : cases) {
    v1::GenerateRequest r = Valid();
    c.mutate(r);
    absl::StatusOr<ValidRequest> v = ValidateRequest(r, kLimits, Encode);
    ASSERT_FALSE(v.ok()) << c.name;
    EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_EQ(v.status().message().rfind(c.field, 0), 0u)
        << c.name << ": " << v.status().message();
  }
}

TEST(RequestTest, TextNeedsATokenizer) {
  v1::GenerateRequest r;
  r.set_text("hello");
  absl::StatusOr<ValidRequest> v = ValidateRequest(r, kLimits, nullptr);
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(v.status().message().find("input.text"), std::string::npos);
}

// A text longer than the context can hold in the tokenizer's longest
// tokens is refused by its length, before it is tokenized; one that may fit
// is tokenized and then checked by its tokens.
TEST(RequestTest, ATextTooLongForTheContextIsRefusedBeforeTokenizing) {
  ModelLimits limits = kLimits;  // 64 tokens
  limits.max_token_bytes = 4;    // so at most 256 bytes
  int encoded = 0;
  const EncodeFn counting = [&encoded](const std::string& text) {
    ++encoded;
    return Encode(text);
  };
  v1::GenerateRequest r;
  r.set_text(std::string(257, 'a'));
  absl::StatusOr<ValidRequest> v = ValidateRequest(r, limits, counting);
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(v.status().message(),
            "input.text is 257 bytes: the context holds 64 tokens of at most "
            "4 bytes, 256 bytes of text");
  EXPECT_EQ(encoded, 0);
  r.set_text(std::string(256, 'a'));  // may fit: tokenized (it does not)
  v = ValidateRequest(r, limits, counting);
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(v.status().message().find("tokens: the context holds 64"),
            std::string::npos)
      << v.status();
  EXPECT_EQ(encoded, 1);
}

}  // namespace
}  // namespace octet
