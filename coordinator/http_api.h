// The OpenAI-compatible HTTP API, beside the gRPC one and on the same
// engine (engine.h), limits and validation (request.h), metrics and
// cancellation. cpp-httplib serves it, one thread per open connection:
//
//   GET  /health                200 while a loaded worker group serves and
//                               the server is not draining, else 503
//   GET  /v1/models             the one model served
//   POST /v1/completions        a prompt (text or token ids)
//   POST /v1/chat/completions   messages, rendered with the model's chat
//                               template (model/chat_template.h)
//
// Request and response shapes are openai_api.h's. A request is parsed,
// rendered and tokenized on its connection's thread, then submitted; the
// engine's callbacks hand its output to that thread through an outbox,
// never blocking the engine. With "stream": true the answer is
// server-sent events, `data: {chunk}` ... `data: [DONE]` and nothing else:
// no comment lines, which clients that split events on blank lines after
// stripping each network read (vLLM's benchmark client) glue onto the next
// event. A client that goes away cancels its request, as a cancelled gRPC
// call does, streaming or not: its socket is polled for a hang-up whenever
// output comes and every `client_check` (ClientLeft), so an idle stream
// needs no write to find it gone; a failed write ends it too.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "coordinator/engine.h"
#include "coordinator/metrics.h"
#include "coordinator/openai_api.h"
#include "coordinator/request.h"
#include "model/chat_template.h"
#include "model/tokenizer.h"

namespace httplib {
class DataSink;
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace octet {

struct HttpApiOptions {
  int port = 0;  // 0: any free one (port() says which)
  // Connections served at once; more wait for one to close.
  int max_connections = 256;
  std::string model;  // its name, as /v1/models lists it
  ModelLimits limits;
  const Tokenizer* tokenizer = nullptr;         // null: token-id prompts only
  const ChatTemplate* chat_template = nullptr;  // null: no chat endpoint
  std::string no_chat_reason;  // then why, for the error chat requests get
  Metrics* metrics = nullptr;  // refusals before the engine (optional)
  // How often a connection with no output yet is looked at for a client
  // that left; Stop's grace is three of these.
  absl::Duration client_check = absl::Seconds(1);
};

class HttpApi {
 public:
  // Listens on options.port (an error when it cannot be had) and serves
  // on threads of its own. The engine, tokenizer, template and metrics
  // must outlive it.
  static absl::StatusOr<std::unique_ptr<HttpApi>> Start(Engine& engine,
                                                        HttpApiOptions options);
  ~HttpApi();  // Stop()

  int port() const { return port_; }
  // Shutting down: /health answers 503 (the engine refuses new requests
  // once it drains).
  void Drain() { draining_ = true; }
  // Cancels the requests still open, lets them answer what the engine
  // says (a stream: an error event, then [DONE]) for up to three
  // client checks, answers those left 503 at once, and closes every
  // connection. The engine must still run.
  void Stop();

 private:
  HttpApi(Engine& engine, HttpApiOptions options);
  void Route();
  // POST /v1/completions and /v1/chat/completions.
  void Answer(const httplib::Request& request, httplib::Response& response,
              openai::Endpoint endpoint);
  // The request a body asks for, checked as the gRPC API checks its own
  // (chat: its messages rendered first).
  struct Prepared;
  absl::StatusOr<Prepared> Prepare(const std::string& body,
                                   openai::Endpoint endpoint);
  // An error answer; `counted`: the engine counted it already.
  void Fail(httplib::Response& response, const absl::Status& status,
            openai::Endpoint endpoint, bool counted = false);
  // A submitted request answered whole once it ends, or streamed: each
  // call the next events (false: the client is gone).
  struct Exchange;
  void AnswerWhole(Exchange& x, httplib::Response& response,
                   openai::Endpoint endpoint);
  bool NextEvents(Exchange& x, httplib::DataSink& sink,
                  openai::Endpoint endpoint);
  // Until no request is open on the HTTP side, or `deadline`.
  void WaitForExchanges(absl::Time deadline) const;
  // A rendered chat's ids (EncodeChat), and its EOS (the template's).
  std::vector<int64_t> EncodeChat(const std::string& text) const;

  Engine& engine_;
  const HttpApiOptions options_;
  const int64_t started_;  // Unix seconds, /v1/models' "created"
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
  std::atomic<bool> draining_{false};
  std::atomic<bool> stopping_{false};
  std::atomic<bool> abandon_{false};  // stopping, past the grace
  std::atomic<int> open_exchanges_{0};
  // The chat template's special tokens' text and id (BOS, EOS), and its
  // EOS id, which ends a chat as the model's own EOS does.
  std::vector<std::pair<std::string, int64_t>> chat_specials_;
  std::optional<int32_t> chat_eos_;
  std::atomic<uint64_t> next_id_{1};
};

}  // namespace octet
