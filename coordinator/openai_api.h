// OpenAI's HTTP API (its published request and response shapes for
// /v1/completions and /v1/chat/completions) in octet's terms, with no
// sockets and no engine: http_api.h serves it.
//
// A request body is checked field by field -- each field OpenAI defines is
// honoured, or taken only at its neutral value (n = 1, penalties 0) and
// refused by name otherwise; an unknown field is refused by name, as
// OpenAI's own server does -- and becomes the gRPC API's GenerateRequest,
// so that both APIs go through one validation (request.h). Its errors are
// OpenAI's error object: FromStatus renames the gRPC API's field names
// (stopping.max_new_tokens) to the request's (max_tokens).
//
// The engine's output (Delta, Outcome: engine.h) becomes OpenAI's
// response objects through an Answer: one whole response, or the
// server-sent-event chunks of a stream.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/engine.h"
#include "nlohmann/json.hpp"
#include "octet/v1/generation.pb.h"

namespace octet::openai {

enum class Endpoint { kCompletions, kChat };

// An error as OpenAI's API answers it: an HTTP status and
// {"error": {"message", "type", "param", "code"}}.
struct ApiError {
  int http_status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the request field at fault; "" for none
  std::string code;   // e.g. "model_not_found"; "" for none
};
nlohmann::json ErrorBody(const ApiError& error);

// InvalidArgument "FIELD PROBLEM", carrying FIELD as the error's param.
absl::Status InvalidField(const std::string& field, const std::string& problem);

// A status of the checks, the chat template or the engine as an API error:
// InvalidArgument 400 (param: InvalidField's, or the gRPC field a shared
// check names first, renamed to the endpoint's, in the message too),
// NotFound 404, ResourceExhausted 429, Unavailable and Cancelled 503,
// anything else 500.
ApiError FromStatus(const absl::Status& status, Endpoint endpoint);

// A checked request body: what to generate and how to answer.
struct Call {
  Endpoint endpoint = Endpoint::kCompletions;
  // Sampling, stopping, logprobs, and the prompt (completions: its text
  // or token ids; chat: unset until the messages are rendered).
  v1::GenerateRequest generate;
  // Chat: the conversation as the template reads it (role, content).
  nlohmann::json messages;
  bool max_tokens_given = false;  // else chat runs to the context's end
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  bool echo = false;           // completions: the prompt, then the completion
  bool logprobs = false;       // each token's log-probability in the answer
  // Completions with echo and max_tokens = 0: the prompt scored, nothing
  // generated (evaluation harnesses' log-likelihood). The engine still
  // makes one token, which the answer leaves out.
  bool prompt_only = false;
};

// Parses and checks the body of POST /v1/completions or
// /v1/chat/completions; `model` is the one model served (a request naming
// another is NotFound). InvalidArgument names the field.
absl::StatusOr<Call> ParseCall(std::string_view body, Endpoint endpoint,
                               const std::string& model);

// The text of one token, for logprobs' "tokens" (the tokenizer's).
using TokenText = std::function<std::string(int32_t id)>;

// The answer to one call, built as the engine's output arrives. Not
// thread-safe: one thread feeds it.
class Answer {
 public:
  // `id` names the completion ("cmpl-..." / "chatcmpl-..."), `prompt_ids`
  // and `prompt_text` are the prompt as the engine got it (for echo),
  // `token_text` names tokens in logprobs (null when not asked for).
  Answer(const Call& call, std::string id, std::string model, int64_t created,
         std::vector<int32_t> prompt_ids, std::string prompt_text,
         TokenText token_text);

  // Not streaming: keeps new output; Whole() answers once it has ended.
  void Add(const Delta& delta);
  nlohmann::json Whole(const Outcome& outcome);

  // Streaming: the chunks to send for new output (none while there is
  // nothing to say), and the last ones: the rest of the output, the chunk
  // with finish_reason, and usage when asked for.
  std::vector<nlohmann::json> Chunks(const Delta& delta);
  std::vector<nlohmann::json> LastChunks(const Delta& delta,
                                         const Outcome& outcome);

 private:
  // The part of `delta` the answer shows (prompt_only drops generated
  // tokens), with the echoed prompt first the first time.
  struct Piece {
    std::string text;
    std::vector<int32_t> ids;
    std::vector<std::optional<float>> logprobs;  // one per id
  };
  Piece Take(const Delta& delta);
  nlohmann::json Logprobs(const Piece& piece);
  nlohmann::json Choice(const Piece& piece, const char* finish_reason);
  nlohmann::json Envelope(const char* object) const;
  // A stream chunk with these choices (usage null when it is asked for).
  nlohmann::json Chunk(nlohmann::json choices) const;
  nlohmann::json Usage(const Outcome& outcome) const;

  const Call& call_;
  const std::string id_, model_;
  const int64_t created_;
  const std::vector<int32_t> prompt_ids_;
  const std::string prompt_text_;
  const TokenText token_text_;
  bool started_ = false;     // the echo and the role chunk are out
  int64_t text_offset_ = 0;  // completions' logprobs.text_offset so far
  Piece whole_;              // not streaming: everything so far
};

}  // namespace octet::openai
