#include "coordinator/openai_api.h"

#include <array>
#include <limits>
#include <optional>
#include <set>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"

namespace octet::openai {
namespace {

using nlohmann::json;

// More messages than any conversation a context holds.
constexpr size_t kMaxMessages = 4096;

// Where an error's `param` travels from the check that found it.
constexpr char kParamPayload[] = "octet.openai.param";

absl::Status Invalid(const std::string& field, const std::string& problem) {
  return InvalidField(field, problem);
}

const char* TypeName(const json& v) {
  if (v.is_number_integer()) return "an integer";
  return v.type_name();  // "string", "array", "object", "boolean", "number"
}

// A body's fields, each taken once by name; what is left over at the end
// is a field this endpoint does not have.
class Fields {
 public:
  explicit Fields(const json& body) : body_(body) {}

  // The field's value, or nullptr when it is absent or null (OpenAI's
  // clients send null for "not set").
  const json* Take(const char* name) {
    taken_.insert(name);
    const auto it = body_.find(name);
    return it == body_.end() || it->is_null() ? nullptr : &*it;
  }
  absl::Status CheckNoneLeft() const {
    for (const auto& [name, value] : body_.items()) {
      if (!taken_.contains(name)) {
        return Invalid(name, "is not a field of this endpoint");
      }
    }
    return absl::OkStatus();
  }

 private:
  const json& body_;
  std::set<std::string> taken_;
};

absl::Status GetBool(Fields& f, const char* name, bool* out) {
  const json* v = f.Take(name);
  if (v == nullptr) return absl::OkStatus();
  if (!v->is_boolean()) {
    return Invalid(name, absl::StrCat("must be a boolean, got ", TypeName(*v)));
  }
  *out = v->get<bool>();
  return absl::OkStatus();
}

// An integer in [lo, hi]; nullopt when absent.
absl::StatusOr<std::optional<int64_t>> GetInt(Fields& f, const char* name,
                                              int64_t lo, int64_t hi) {
  const json* v = f.Take(name);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number_integer()) {
    return Invalid(name,
                   absl::StrCat("must be an integer, got ", TypeName(*v)));
  }
  // Beyond int64: nlohmann keeps it unsigned.
  if (v->is_number_unsigned() &&
      v->get<uint64_t>() > static_cast<uint64_t>(hi)) {
    return Invalid(name, absl::StrCat("must be at most ", hi));
  }
  const int64_t n = v->get<int64_t>();
  if (n < lo || n > hi) {
    return Invalid(name,
                   absl::StrCat("must be in [", lo, ", ", hi, "], got ", n));
  }
  return n;
}

absl::StatusOr<std::optional<double>> GetNumber(Fields& f, const char* name) {
  const json* v = f.Take(name);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number()) {
    return Invalid(name, absl::StrCat("must be a number, got ", TypeName(*v)));
  }
  return v->get<double>();
}

// A field octet takes only at OpenAI's neutral value: absent, null, or
// equal to `neutral` (n = 1, a penalty of 0, an empty logit_bias).
absl::Status NeutralOnly(Fields& f, const char* name, const json& neutral,
                         const char* why) {
  const json* v = f.Take(name);
  if (v == nullptr || *v == neutral) return absl::OkStatus();
  // (The value is not echoed: it may be anything, megabytes deep.)
  return Invalid(name, absl::StrCat("is supported only as ", neutral.dump(),
                                    " (", why, "); leave it out"));
}

// What both endpoints share: sampling, stopping, stream, and the fields
// taken at their neutral value.
absl::Status ParseCommon(Fields& f, Call& call) {
  v1::SamplingParams& s = *call.generate.mutable_sampling();
  OCTET_ASSIGN_OR_RETURN(const std::optional<double> temperature,
                         GetNumber(f, "temperature"));
  if (temperature) s.set_temperature(static_cast<float>(*temperature));
  OCTET_ASSIGN_OR_RETURN(const std::optional<double> top_p,
                         GetNumber(f, "top_p"));
  if (top_p) s.set_top_p(static_cast<float>(*top_p));
  // vLLM's extensions, which octet's sampler has too.
  OCTET_ASSIGN_OR_RETURN(
      const std::optional<int64_t> top_k,
      GetInt(f, "top_k", -1, std::numeric_limits<int32_t>::max()));
  if (top_k) s.set_top_k(std::max<int64_t>(0, *top_k));  // -1: all, as 0
  OCTET_ASSIGN_OR_RETURN(const std::optional<double> repetition,
                         GetNumber(f, "repetition_penalty"));
  if (repetition) s.set_repetition_penalty(static_cast<float>(*repetition));
  OCTET_ASSIGN_OR_RETURN(const std::optional<int64_t> seed,
                         GetInt(f, "seed", std::numeric_limits<int64_t>::min(),
                                std::numeric_limits<int64_t>::max()));
  if (seed) s.set_seed(static_cast<uint64_t>(*seed));

  v1::StoppingCriteria& stop = *call.generate.mutable_stopping();
  if (const json* v = f.Take("stop"); v != nullptr) {
    if (v->is_string()) {
      stop.add_stop(v->get<std::string>());
    } else if (v->is_array()) {
      for (size_t i = 0; i < v->size(); ++i) {
        if (!(*v)[i].is_string()) {
          return Invalid(absl::StrCat("stop[", i, "]"), "must be a string");
        }
        stop.add_stop((*v)[i].get<std::string>());
      }
    } else {
      return Invalid("stop", "must be a string or a list of strings");
    }
  }
  bool ignore_eos = false;
  OCTET_RETURN_IF_ERROR(GetBool(f, "ignore_eos", &ignore_eos));
  stop.set_ignore_eos(ignore_eos);

  OCTET_RETURN_IF_ERROR(GetBool(f, "stream", &call.stream));
  if (const json* v = f.Take("stream_options"); v != nullptr) {
    if (!call.stream) return Invalid("stream_options", "needs stream: true");
    if (!v->is_object()) return Invalid("stream_options", "must be an object");
    for (const auto& [key, value] : v->items()) {
      if (key != "include_usage" || !value.is_boolean()) {
        return Invalid(absl::StrCat("stream_options.", key),
                       "is not supported (include_usage: a boolean is)");
      }
      call.include_usage = value.get<bool>();
    }
  }
  OCTET_RETURN_IF_ERROR(
      NeutralOnly(f, "n", 1, "one choice per request; send more requests"));
  OCTET_RETURN_IF_ERROR(
      NeutralOnly(f, "presence_penalty", 0, "use repetition_penalty"));
  OCTET_RETURN_IF_ERROR(
      NeutralOnly(f, "frequency_penalty", 0, "use repetition_penalty"));
  OCTET_RETURN_IF_ERROR(
      NeutralOnly(f, "logit_bias", json::object(), "no logit bias"));
  if (const json* v = f.Take("user"); v != nullptr && !v->is_string()) {
    return Invalid("user", "must be a string");
  }
  return absl::OkStatus();
}

// max_tokens (and chat's max_completion_tokens): 0 only for a scored
// prompt (completions with echo).
absl::Status ParseMaxTokens(Fields& f, Call& call) {
  constexpr int64_t kMax = std::numeric_limits<uint32_t>::max();
  OCTET_ASSIGN_OR_RETURN(std::optional<int64_t> max_tokens,
                         GetInt(f, "max_tokens", 0, kMax));
  const char* name = "max_tokens";
  if (call.endpoint == Endpoint::kChat) {
    OCTET_ASSIGN_OR_RETURN(const std::optional<int64_t> completion,
                           GetInt(f, "max_completion_tokens", 0, kMax));
    if (completion) {
      if (max_tokens) {
        return Invalid("max_completion_tokens", "and max_tokens are both set");
      }
      max_tokens = completion;
      name = "max_completion_tokens";
    }
  }
  if (!max_tokens) return absl::OkStatus();
  call.max_tokens_given = true;
  if (*max_tokens == 0) {
    if (call.endpoint == Endpoint::kChat || !call.echo) {
      return Invalid(name, "must be at least 1 (0 only with echo)");
    }
    call.prompt_only = true;
    call.generate.mutable_stopping()->set_max_new_tokens(1);
    return absl::OkStatus();
  }
  call.generate.mutable_stopping()->set_max_new_tokens(
      static_cast<uint32_t>(*max_tokens));
  return absl::OkStatus();
}

// /v1/completions' prompt: a string or token ids, alone or as a list of one
// (nothing nested deeper).
absl::Status ParsePrompt(const json* v, v1::GenerateRequest& generate) {
  if (v == nullptr) return Invalid("prompt", "is required");
  const json* prompt = v;
  if (v->is_array() && !v->empty() &&
      ((*v)[0].is_string() || (*v)[0].is_array())) {
    if (v->size() != 1) {
      return Invalid("prompt",
                     absl::StrCat("lists ", v->size(),
                                  " prompts: octet answers one prompt per "
                                  "request; send one request each"));
    }
    prompt = &(*v)[0];
  }
  if (prompt->is_string()) {
    generate.set_text(prompt->get<std::string>());
    return absl::OkStatus();
  }
  if (!prompt->is_array() || prompt->empty()) {
    return Invalid("prompt", "must be a string or a list of token ids");
  }
  auto* ids = generate.mutable_token_ids()->mutable_ids();
  for (size_t i = 0; i < prompt->size(); ++i) {
    const json& id = (*prompt)[i];
    if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
        id.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
      return Invalid(absl::StrCat("prompt[", i, "]"),
                     "must be a token id (an integer >= 0)");
    }
    ids->Add(id.get<int64_t>());
  }
  return absl::OkStatus();
}

absl::Status ParseCompletion(Fields& f, Call& call) {
  OCTET_RETURN_IF_ERROR(ParsePrompt(f.Take("prompt"), call.generate));
  OCTET_RETURN_IF_ERROR(GetBool(f, "echo", &call.echo));
  OCTET_ASSIGN_OR_RETURN(const std::optional<int64_t> logprobs,
                         GetInt(f, "logprobs", 0, 20));
  if (logprobs.has_value() && *logprobs > 0) {
    return Invalid("logprobs",
                   absl::StrCat("= ", *logprobs,
                                " asks for the top alternatives of each "
                                "token, which octet does not compute; "
                                "logprobs: 0 gives each token's own"));
  }
  call.logprobs = logprobs.has_value();
  OCTET_RETURN_IF_ERROR(NeutralOnly(f, "best_of", 1, "one choice per request"));
  OCTET_RETURN_IF_ERROR(NeutralOnly(f, "suffix", json(""), "no insertion"));
  return ParseMaxTokens(f, call);
}

// One message's content: a string, or a list of text parts (joined with
// newlines, as vLLM does).
absl::StatusOr<std::string> MessageContent(const json& content,
                                           const std::string& field) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) {
    return Invalid(field, "must be a string or a list of text parts");
  }
  std::vector<std::string> parts;
  for (size_t i = 0; i < content.size(); ++i) {
    const json& part = content[i];
    const std::string where = absl::StrCat(field, "[", i, "]");
    if (!part.is_object() || part.value("type", json()) != "text" ||
        !part.contains("text") || !part["text"].is_string()) {
      return Invalid(where,
                     "must be {\"type\": \"text\", \"text\": ...} (octet "
                     "takes text only)");
    }
    parts.push_back(part["text"].get<std::string>());
  }
  return absl::StrJoin(parts, "\n");
}

// The conversation, as the template reads it: role, content, and name
// when given.
absl::StatusOr<json> ParseMessages(const json* v) {
  if (v == nullptr) return Invalid("messages", "is required");
  if (!v->is_array() || v->empty() || v->size() > kMaxMessages) {
    return Invalid("messages", absl::StrCat("must be a list of 1 to ",
                                            kMaxMessages, " messages"));
  }
  static constexpr std::array<const char*, 5> kRoles = {
      "system", "developer", "user", "assistant", "tool"};
  json out = json::array();
  for (size_t i = 0; i < v->size(); ++i) {
    const json& m = (*v)[i];
    const std::string field = absl::StrCat("messages[", i, "]");
    if (!m.is_object()) return Invalid(field, "must be an object");
    json message = json::object();
    for (const auto& [key, value] : m.items()) {
      const std::string where = absl::StrCat(field, ".", key);
      if (key == "role") {
        const bool known = value.is_string() &&
                           std::find(kRoles.begin(), kRoles.end(),
                                     value.get<std::string>()) != kRoles.end();
        if (!known) {
          return Invalid(where,
                         "must be system, developer, user, assistant or tool");
        }
        message["role"] = value;
      } else if (key == "content") {
        OCTET_ASSIGN_OR_RETURN(message["content"],
                               MessageContent(value, where));
      } else if (key == "name") {
        if (!value.is_string()) return Invalid(where, "must be a string");
        message["name"] = value;
      } else if (!value.is_null() && !(value.is_array() && value.empty())) {
        return Invalid(where, "is not supported (role, content and name are)");
      }
    }
    if (!message.contains("role"))
      return Invalid(field + ".role", "is required");
    if (!message.contains("content")) {
      return Invalid(field + ".content", "is required");
    }
    out.push_back(std::move(message));
  }
  return out;
}

absl::Status ParseChat(Fields& f, Call& call) {
  OCTET_ASSIGN_OR_RETURN(call.messages, ParseMessages(f.Take("messages")));
  OCTET_RETURN_IF_ERROR(GetBool(f, "logprobs", &call.logprobs));
  OCTET_ASSIGN_OR_RETURN(const std::optional<int64_t> top,
                         GetInt(f, "top_logprobs", 0, 20));
  if (top.has_value() && *top > 0) {
    return Invalid("top_logprobs",
                   "asks for the top alternatives of each token, which octet "
                   "does not compute; leave it out or 0");
  }
  OCTET_RETURN_IF_ERROR(
      NeutralOnly(f, "response_format", {{"type", "text"}}, "free text only"));
  OCTET_RETURN_IF_ERROR(
      NeutralOnly(f, "tools", json::array(), "no tool calls"));
  OCTET_RETURN_IF_ERROR(NeutralOnly(f, "tool_choice", "none", "no tool calls"));
  if (const json* v = f.Take("parallel_tool_calls");
      v != nullptr && !v->is_boolean()) {
    return Invalid("parallel_tool_calls", "must be a boolean");
  }
  return ParseMaxTokens(f, call);
}

// The gRPC API's field names in the shared checks' messages, and what each
// endpoint calls them; the longest first.
struct Rename {
  const char* grpc;
  const char* completions;
  const char* chat;
};
constexpr std::array<Rename, 10> kRenames = {{
    {"stopping.max_new_tokens", "max_tokens", "max_tokens"},
    {"stopping.stop_token_ids", "stop_token_ids", "stop_token_ids"},
    {"stopping.stop", "stop", "stop"},
    {"sampling.temperature", "temperature", "temperature"},
    {"sampling.top_p", "top_p", "top_p"},
    {"sampling.top_k", "top_k", "top_k"},
    {"sampling.repetition_penalty", "repetition_penalty", "repetition_penalty"},
    {"input.token_ids", "prompt", "messages"},
    {"input.text", "prompt", "messages"},
    {"input", "prompt", "messages"},
}};

// A shared check's message names a gRPC field first ("stopping.stop[2]
// must ..."): renamed for `endpoint`, in the message too, it is the
// param; "" for any other message.
std::string RenamedField(std::string& message, Endpoint endpoint) {
  for (const Rename& r : kRenames) {
    const absl::string_view grpc = r.grpc;
    if (absl::StartsWith(message, grpc) &&
        (message.size() == grpc.size() ||
         absl::string_view(" [:=").find(message[grpc.size()]) !=
             absl::string_view::npos)) {
      const char* name = endpoint == Endpoint::kChat ? r.chat : r.completions;
      message = absl::StrCat(name, message.substr(grpc.size()));
      return message.substr(0, message.find_first_of(" :"));
    }
  }
  return std::string();
}

}  // namespace

absl::Status InvalidField(const std::string& field,
                          const std::string& problem) {
  absl::Status s =
      absl::InvalidArgumentError(absl::StrCat(field, " ", problem));
  s.SetPayload(kParamPayload, absl::Cord(field));
  return s;
}

nlohmann::json ErrorBody(const ApiError& e) {
  return {{"error",
           {{"message", e.message},
            {"type", e.type},
            {"param", e.param.empty() ? json() : json(e.param)},
            {"code", e.code.empty() ? json() : json(e.code)}}}};
}

ApiError FromStatus(const absl::Status& status, Endpoint endpoint) {
  ApiError e;
  e.message = std::string(status.message());
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
      if (const auto param = status.GetPayload(kParamPayload)) {
        e.param = std::string(*param);
      } else {
        e.param = RenamedField(e.message, endpoint);
      }
      break;
    case absl::StatusCode::kNotFound:
      e.http_status = 404;
      e.code = "model_not_found";
      break;
    case absl::StatusCode::kResourceExhausted:
      e.http_status = 429;
      e.type = "rate_limit_error";
      break;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kCancelled:
      e.http_status = 503;
      e.type = "service_unavailable";
      break;
    default:
      e.http_status = 500;
      e.type = "server_error";
  }
  return e;
}

absl::StatusOr<Call> ParseCall(std::string_view body, Endpoint endpoint,
                               const std::string& model) {
  const json parsed = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) {
    return absl::InvalidArgumentError("the request body is not valid JSON");
  }
  if (!parsed.is_object()) {
    return absl::InvalidArgumentError("the request body must be a JSON object");
  }
  Fields f(parsed);
  Call call;
  call.endpoint = endpoint;
  if (const json* m = f.Take("model"); m != nullptr) {
    if (!m->is_string()) return Invalid("model", "must be a string");
    if (m->get<std::string>() != model) {
      return absl::NotFoundError(absl::StrCat("The model '",
                                              m->get<std::string>(),
                                              "' does not exist; this server "
                                              "serves '",
                                              model, "'"));
    }
  }
  OCTET_RETURN_IF_ERROR(ParseCommon(f, call));
  OCTET_RETURN_IF_ERROR(endpoint == Endpoint::kChat ? ParseChat(f, call)
                                                    : ParseCompletion(f, call));
  OCTET_RETURN_IF_ERROR(f.CheckNoneLeft());
  call.generate.set_logprobs(call.logprobs);
  call.generate.set_prompt_logprobs(call.echo && call.logprobs);
  return call;
}

// ---- Answers ----

Answer::Answer(const Call& call, std::string id, std::string model,
               int64_t created, std::vector<int32_t> prompt_ids,
               std::string prompt_text, TokenText token_text)
    : call_(call),
      id_(std::move(id)),
      model_(std::move(model)),
      created_(created),
      prompt_ids_(std::move(prompt_ids)),
      prompt_text_(std::move(prompt_text)),
      token_text_(std::move(token_text)) {}

Answer::Piece Answer::Take(const Delta& delta) {
  Piece p;
  if (!started_ && call_.echo) {
    p.text = prompt_text_;
    if (call_.logprobs) {
      // The first token has no logprob; prompt token i + 1's is at i.
      p.ids = prompt_ids_;
      p.logprobs.push_back(std::nullopt);
      for (size_t i = 1; i < prompt_ids_.size(); ++i) {
        p.logprobs.push_back(i - 1 < delta.prompt_logprobs.size()
                                 ? std::optional(delta.prompt_logprobs[i - 1])
                                 : std::nullopt);
      }
    }
  }
  if (!call_.prompt_only) {
    p.text += delta.text;
    if (call_.logprobs) {
      p.ids.insert(p.ids.end(), delta.token_ids.begin(), delta.token_ids.end());
      for (size_t i = 0; i < delta.token_ids.size(); ++i) {
        p.logprobs.push_back(i < delta.logprobs.size()
                                 ? std::optional(delta.logprobs[i])
                                 : std::nullopt);
      }
    }
  }
  return p;
}

json Answer::Logprobs(const Piece& piece) {
  if (!call_.logprobs) return json();
  const auto logprob = [&](size_t i) {
    return piece.logprobs[i].has_value() ? json(*piece.logprobs[i]) : json();
  };
  if (call_.endpoint == Endpoint::kChat) {
    json content = json::array();
    for (size_t i = 0; i < piece.ids.size(); ++i) {
      const std::string text = token_text_(piece.ids[i]);
      content.push_back(
          {{"token", text},
           {"logprob", logprob(i)},
           {"bytes", std::vector<uint8_t>(text.begin(), text.end())},
           {"top_logprobs", json::array()}});
    }
    return {{"content", std::move(content)}};
  }
  // top_logprobs: with logprobs = 0, each token's own, as vLLM answers
  // (octet computes no alternatives); null where the logprob is.
  json tokens = json::array(), logprobs = json::array(), tops = json::array(),
       offsets = json::array();
  for (size_t i = 0; i < piece.ids.size(); ++i) {
    const std::string text = token_text_(piece.ids[i]);
    tokens.push_back(text);
    logprobs.push_back(logprob(i));
    tops.push_back(logprob(i).is_null() ? json() : json({{text, logprob(i)}}));
    offsets.push_back(text_offset_);
    text_offset_ += static_cast<int64_t>(text.size());
  }
  return {{"tokens", std::move(tokens)},
          {"token_logprobs", std::move(logprobs)},
          {"top_logprobs", std::move(tops)},
          {"text_offset", std::move(offsets)}};
}

json Answer::Choice(const Piece& piece, const char* finish_reason) {
  json choice = {{"index", 0}};
  if (call_.endpoint == Endpoint::kCompletions) {
    choice["text"] = piece.text;
  } else if (call_.stream) {
    json delta = json::object();
    if (!started_) delta["role"] = "assistant";
    if (!piece.text.empty() || !started_) delta["content"] = piece.text;
    choice["delta"] = std::move(delta);
  } else {
    choice["message"] = {{"role", "assistant"}, {"content", piece.text}};
  }
  choice["logprobs"] = Logprobs(piece);
  choice["finish_reason"] =
      finish_reason == nullptr ? json() : json(finish_reason);
  return choice;
}

json Answer::Envelope(const char* object) const {
  json e = {{"id", id_},
            {"object", object},
            {"created", created_},
            {"model", model_}};
  return e;
}

json Answer::Usage(const Outcome& o) const {
  const int64_t completion = call_.prompt_only ? 0 : o.completion_tokens;
  return {{"prompt_tokens", o.prompt_tokens},
          {"completion_tokens", completion},
          {"total_tokens", o.prompt_tokens + completion}};
}

namespace {
const char* FinishReason(const Call& call, const Outcome& o) {
  return call.prompt_only || o.finish == Finish::kLength ? "length" : "stop";
}
}  // namespace

void Answer::Add(const Delta& delta) {
  Piece p = Take(delta);
  started_ = true;
  whole_.text += p.text;
  whole_.ids.insert(whole_.ids.end(), p.ids.begin(), p.ids.end());
  whole_.logprobs.insert(whole_.logprobs.end(), p.logprobs.begin(),
                         p.logprobs.end());
}

json Answer::Whole(const Outcome& outcome) {
  json answer = Envelope(call_.endpoint == Endpoint::kChat ? "chat.completion"
                                                           : "text_completion");
  answer["choices"] =
      json::array({Choice(whole_, FinishReason(call_, outcome))});
  answer["usage"] = Usage(outcome);
  return answer;
}

json Answer::Chunk(json choices) const {
  json chunk =
      Envelope(call_.endpoint == Endpoint::kChat ? "chat.completion.chunk"
                                                 : "text_completion");
  chunk["choices"] = std::move(choices);
  if (call_.include_usage) chunk["usage"] = json();  // all but the last
  return chunk;
}

std::vector<json> Answer::Chunks(const Delta& delta) {
  const bool first = !started_;
  Piece p = Take(delta);
  if (p.text.empty() && p.ids.empty() &&
      !(first && call_.endpoint == Endpoint::kChat)) {
    started_ = true;
    return {};
  }
  json chunk = Chunk(json::array({Choice(p, nullptr)}));
  started_ = true;
  return {std::move(chunk)};
}

std::vector<json> Answer::LastChunks(const Delta& delta,
                                     const Outcome& outcome) {
  std::vector<json> out = Chunks(delta);
  out.push_back(
      Chunk(json::array({Choice(Piece{}, FinishReason(call_, outcome))})));
  if (call_.include_usage) {
    json usage = Chunk(json::array());
    usage["usage"] = Usage(outcome);
    out.push_back(std::move(usage));
  }
  return out;
}

}  // namespace octet::openai
