// OpenAI's request and response shapes (coordinator/openai_api.h): bodies
// become GenerateRequests or errors naming the field, the shared checks'
// errors name the request's fields, and the engine's output becomes
// OpenAI's objects and stream chunks. The real client drives a running
// server in openai_client_test.py.
#include "coordinator/openai_api.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace octet::openai {
namespace {

using nlohmann::json;

absl::StatusOr<Call> Completion(const json& body) {
  return ParseCall(body.dump(), Endpoint::kCompletions, "m");
}
absl::StatusOr<Call> Chat(const json& body) {
  return ParseCall(body.dump(), Endpoint::kChat, "m");
}

// The field a refused body's error names, as the client sees it.
std::string ParamOf(const absl::StatusOr<Call>& call, Endpoint endpoint) {
  EXPECT_FALSE(call.ok());
  return FromStatus(call.status(), endpoint).param;
}

TEST(OpenAiApiTest, ACompletionBecomesAGenerateRequest) {
  absl::StatusOr<Call> c =
      Completion({{"model", "m"},
                  {"prompt", "Hello"},
                  {"max_tokens", 7},
                  {"temperature", 0.5},
                  {"top_p", 0.9},
                  {"seed", -3},
                  {"stop", {"\n", "."}},
                  {"stream", true},
                  {"stream_options", {{"include_usage", true}}},
                  {"n", 1},
                  {"presence_penalty", 0},
                  {"user", "u"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->generate.text(), "Hello");
  EXPECT_EQ(c->generate.stopping().max_new_tokens(), 7u);
  EXPECT_FLOAT_EQ(c->generate.sampling().temperature(), 0.5f);
  EXPECT_FLOAT_EQ(c->generate.sampling().top_p(), 0.9f);
  EXPECT_EQ(c->generate.sampling().seed(), static_cast<uint64_t>(-3));
  EXPECT_EQ(c->generate.stopping().stop_size(), 2);
  EXPECT_TRUE(c->stream);
  EXPECT_TRUE(c->include_usage);
  EXPECT_FALSE(c->generate.logprobs());
}

TEST(OpenAiApiTest, DefaultsAreLeftToTheSharedChecks) {
  absl::StatusOr<Call> c = Completion({{"prompt", "Hi"}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->generate.stopping().has_max_new_tokens());
  EXPECT_FALSE(c->generate.sampling().has_temperature());
  EXPECT_FALSE(c->max_tokens_given);
}

TEST(OpenAiApiTest, PromptsAreTextOrTokenIdsOneAtATime) {
  absl::StatusOr<Call> ids = Completion({{"prompt", {1, 2, 3}}});
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(ids->generate.token_ids().ids_size(), 3);
  absl::StatusOr<Call> one = Completion({{"prompt", {"Hi"}}});
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->generate.text(), "Hi");
  EXPECT_EQ(
      ParamOf(Completion({{"prompt", {"a", "b"}}}), Endpoint::kCompletions),
      "prompt");
  EXPECT_EQ(ParamOf(Completion({{"prompt", {1, -2}}}), Endpoint::kCompletions),
            "prompt[1]");
  EXPECT_EQ(ParamOf(Completion(json::object()), Endpoint::kCompletions),
            "prompt");
}

TEST(OpenAiApiTest, EchoWithLogprobsScoresThePrompt) {
  absl::StatusOr<Call> c = Completion(
      {{"prompt", "Hi"}, {"echo", true}, {"logprobs", 0}, {"max_tokens", 0}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->prompt_only);
  EXPECT_TRUE(c->generate.prompt_logprobs());
  EXPECT_TRUE(c->generate.logprobs());
  EXPECT_EQ(c->generate.stopping().max_new_tokens(), 1u);
  // Without echo, nothing would be answered.
  EXPECT_EQ(ParamOf(Completion({{"prompt", "Hi"}, {"max_tokens", 0}}),
                    Endpoint::kCompletions),
            "max_tokens");
}

TEST(OpenAiApiTest, EveryRefusalNamesItsField) {
  const struct {
    json body;
    std::string param;
  } cases[] = {
      {{{"prompt", "x"}, {"max_tokens", "ten"}}, "max_tokens"},
      {{{"prompt", "x"}, {"max_tokens", -1}}, "max_tokens"},
      {{{"prompt", "x"}, {"temperature", "hot"}}, "temperature"},
      {{{"prompt", "x"}, {"n", 2}}, "n"},
      {{{"prompt", "x"}, {"best_of", 3}}, "best_of"},
      {{{"prompt", "x"}, {"logprobs", 5}}, "logprobs"},
      {{{"prompt", "x"}, {"logit_bias", {{"1", 5}}}}, "logit_bias"},
      {{{"prompt", "x"}, {"stop", 3}}, "stop"},
      {{{"prompt", "x"}, {"stream", "yes"}}, "stream"},
      {{{"prompt", "x"}, {"stream_options", {{"include_usage", true}}}},
       "stream_options"},
      {{{"prompt", "x"}, {"surprise", 1}}, "surprise"},
      {{{"prompt", "x"}, {"model", 3}}, "model"},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(ParamOf(Completion(c.body), Endpoint::kCompletions), c.param)
        << c.body.dump();
  }
}

TEST(OpenAiApiTest, BodiesThatAreNotObjectsAreRefused) {
  for (const char* body : {"", "{", "[1]", "\"text\"", "null"}) {
    absl::StatusOr<Call> c = ParseCall(body, Endpoint::kCompletions, "m");
    ASSERT_FALSE(c.ok()) << body;
    EXPECT_EQ(FromStatus(c.status(), Endpoint::kCompletions).http_status, 400);
  }
}

TEST(OpenAiApiTest, AnotherModelIsNotFound) {
  absl::StatusOr<Call> c = Completion({{"model", "gpt-4"}, {"prompt", "x"}});
  ASSERT_FALSE(c.ok());
  const ApiError e = FromStatus(c.status(), Endpoint::kCompletions);
  EXPECT_EQ(e.http_status, 404);
  EXPECT_EQ(e.code, "model_not_found");
  EXPECT_NE(e.message.find("gpt-4"), std::string::npos);
}

TEST(OpenAiApiTest, ChatMessagesAreChecked) {
  absl::StatusOr<Call> c =
      Chat({{"messages",
             {{{"role", "system"}, {"content", "Be brief."}},
              {{"role", "user"},
               {"content",
                {{{"type", "text"}, {"text", "a"}},
                 {{"type", "text"}, {"text", "b"}}}}}}},
            {"max_completion_tokens", 5},
            {"logprobs", true}});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->messages[1]["content"], "a\nb");
  EXPECT_EQ(c->generate.stopping().max_new_tokens(), 5u);
  EXPECT_TRUE(c->generate.logprobs());
  EXPECT_FALSE(c->generate.prompt_logprobs());
  const struct {
    json messages;
    std::string param;
  } cases[] = {
      {json::array(), "messages"},
      {{{{"role", "robot"}, {"content", "x"}}}, "messages[0].role"},
      {{{{"role", "user"}}}, "messages[0].content"},
      {{{{"content", "x"}}}, "messages[0].role"},
      {{{{"role", "user"}, {"content", 3}}}, "messages[0].content"},
      {{{{"role", "user"},
         {"content", {{{"type", "image_url"}, {"image_url", "x"}}}}}},
       "messages[0].content[0]"},
      {{{{"role", "user"}, {"content", "x"}, {"tool_calls", {1}}}},
       "messages[0].tool_calls"},
      {{"just text"}, "messages[0]"},
  };
  for (const auto& k : cases) {
    EXPECT_EQ(ParamOf(Chat({{"messages", k.messages}}), Endpoint::kChat),
              k.param)
        << k.messages.dump();
  }
  EXPECT_EQ(ParamOf(Chat({{"messages", {{{"role", "user"}, {"content", "x"}}}},
                          {"tools", {{{"type", "function"}}}}}),
                    Endpoint::kChat),
            "tools");
}

TEST(OpenAiApiTest, SharedChecksNameTheRequestsFields) {
  ApiError e = FromStatus(
      absl::InvalidArgumentError("stopping.max_new_tokens = 9 does not fit"),
      Endpoint::kChat);
  EXPECT_EQ(e.message, "max_tokens = 9 does not fit");
  EXPECT_EQ(e.param, "max_tokens");
  e = FromStatus(absl::InvalidArgumentError(
                     "input.token_ids[3] = 9 is outside the vocabulary"),
                 Endpoint::kCompletions);
  EXPECT_EQ(e.param, "prompt[3]");
  e = FromStatus(absl::InvalidArgumentError("input.text is 9 bytes"),
                 Endpoint::kChat);
  EXPECT_EQ(e.message, "messages is 9 bytes");
  e = FromStatus(absl::InvalidArgumentError(
                     "stopping.max_new_tokens: 40 tokens need 3 blocks"),
                 Endpoint::kCompletions);
  EXPECT_EQ(e.param, "max_tokens");
  e = FromStatus(absl::InvalidArgumentError("the request body is not JSON"),
                 Endpoint::kCompletions);
  EXPECT_EQ(e.param, "");
  EXPECT_EQ(FromStatus(absl::ResourceExhaustedError("full"), Endpoint::kChat)
                .http_status,
            429);
  EXPECT_EQ(FromStatus(absl::UnavailableError("draining"), Endpoint::kChat)
                .http_status,
            503);
  EXPECT_EQ(FromStatus(absl::InternalError("?"), Endpoint::kChat).http_status,
            500);
  const json body = ErrorBody(e);
  EXPECT_EQ(body["error"]["param"], nullptr);
  EXPECT_EQ(body["error"]["type"], "invalid_request_error");
}

TokenText Names() {
  return [](int32_t id) { return absl::StrCat("t", id); };
}

Delta Out(std::string text, std::vector<int32_t> ids = {},
          std::vector<float> logprobs = {},
          std::vector<float> prompt_logprobs = {}) {
  Delta d;
  d.text = std::move(text);
  d.token_ids = std::move(ids);
  d.logprobs = std::move(logprobs);
  d.prompt_logprobs = std::move(prompt_logprobs);
  return d;
}

Outcome Ended(Finish finish, int64_t prompt, int64_t completion) {
  Outcome o;
  o.finish = finish;
  o.prompt_tokens = prompt;
  o.completion_tokens = completion;
  return o;
}

TEST(OpenAiApiTest, EchoedLogprobsPutThePromptsFirst) {
  absl::StatusOr<Call> call =
      Completion({{"prompt", "Hello"}, {"echo", true}, {"logprobs", 0}});
  ASSERT_TRUE(call.ok());
  Answer answer(*call, "cmpl-1", "m", 100, {1, 2, 3}, "Hello", Names());
  answer.Add(Out(" wor", {4}, {-0.5f}, {-1.0f, -2.0f}));
  answer.Add(Out("ld", {5}, {-0.25f}));
  const json whole = answer.Whole(Ended(Finish::kEos, 3, 2));
  EXPECT_EQ(whole["object"], "text_completion");
  const json& choice = whole["choices"][0];
  EXPECT_EQ(choice["text"], "Hello world");
  EXPECT_EQ(choice["finish_reason"], "stop");
  EXPECT_EQ(choice["logprobs"]["tokens"], json({"t1", "t2", "t3", "t4", "t5"}));
  EXPECT_EQ(choice["logprobs"]["token_logprobs"],
            json({nullptr, -1.0, -2.0, -0.5, -0.25}));
  EXPECT_EQ(choice["logprobs"]["text_offset"], json({0, 2, 4, 6, 8}));
  // No alternatives: each token's own, as logprobs = 0 asks.
  EXPECT_EQ(choice["logprobs"]["top_logprobs"],
            json({nullptr, {{"t2", -1.0}}, {{"t3", -2.0}}, {{"t4", -0.5}},
                  {{"t5", -0.25}}}));
  EXPECT_EQ(whole["usage"]["total_tokens"], 5);
}

TEST(OpenAiApiTest, AScoredPromptLeavesTheGeneratedTokenOut) {
  absl::StatusOr<Call> call = Completion(
      {{"prompt", "Hi"}, {"echo", true}, {"logprobs", 0}, {"max_tokens", 0}});
  ASSERT_TRUE(call.ok());
  Answer answer(*call, "cmpl-1", "m", 100, {1, 2}, "Hi", Names());
  answer.Add(Out("!", {9}, {-3.0f}, {-1.5f}));
  const json whole = answer.Whole(Ended(Finish::kLength, 2, 1));
  EXPECT_EQ(whole["choices"][0]["text"], "Hi");
  EXPECT_EQ(whole["choices"][0]["logprobs"]["token_logprobs"],
            json({nullptr, -1.5}));
  EXPECT_EQ(whole["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(whole["usage"]["completion_tokens"], 0);
}

TEST(OpenAiApiTest, AChatStreamOpensWithTheRoleAndEndsWithUsage) {
  absl::StatusOr<Call> call =
      Chat({{"messages", {{{"role", "user"}, {"content", "x"}}}},
            {"stream", true},
            {"stream_options", {{"include_usage", true}}}});
  ASSERT_TRUE(call.ok()) << call.status();
  Answer answer(*call, "chatcmpl-1", "m", 100, {1}, "", Names());
  const std::vector<json> first = answer.Chunks(Out("Hi"));
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0]["object"], "chat.completion.chunk");
  EXPECT_EQ(first[0]["choices"][0]["delta"],
            json({{"role", "assistant"}, {"content", "Hi"}}));
  EXPECT_EQ(first[0]["usage"], nullptr);
  EXPECT_TRUE(answer.Chunks(Out("")).empty());  // nothing new: nothing sent
  const std::vector<json> last =
      answer.LastChunks(Out("!"), Ended(Finish::kLength, 1, 2));
  ASSERT_EQ(last.size(), 3u);
  EXPECT_EQ(last[0]["choices"][0]["delta"], json({{"content", "!"}}));
  EXPECT_EQ(last[1]["choices"][0]["delta"], json::object());
  EXPECT_EQ(last[1]["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(last[2]["choices"], json::array());
  EXPECT_EQ(last[2]["usage"]["completion_tokens"], 2);
}

TEST(OpenAiApiTest, ChatLogprobsListEachToken) {
  absl::StatusOr<Call> call =
      Chat({{"messages", {{{"role", "user"}, {"content", "x"}}}},
            {"logprobs", true}});
  ASSERT_TRUE(call.ok());
  Answer answer(*call, "chatcmpl-1", "m", 100, {1}, "", Names());
  answer.Add(Out("ab", {7}, {-0.125f}));
  const json whole = answer.Whole(Ended(Finish::kEos, 1, 1));
  EXPECT_EQ(whole["choices"][0]["message"]["content"], "ab");
  const json& token = whole["choices"][0]["logprobs"]["content"][0];
  EXPECT_EQ(token["token"], "t7");
  EXPECT_EQ(token["logprob"], -0.125);
  EXPECT_EQ(token["bytes"], json({116, 55}));
}

}  // namespace
}  // namespace octet::openai
