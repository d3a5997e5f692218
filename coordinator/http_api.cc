#include "coordinator/http_api.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <httplib.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <deque>
#include <optional>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "base/status_macros.h"

namespace octet {
namespace {

using nlohmann::json;
using openai::Endpoint;

// A request body larger than any prompt the API takes, with room for a
// conversation's JSON around it; more is refused (413) unread.
constexpr size_t kMaxBodyBytes = 4 * static_cast<size_t>(kMaxPromptBytes);

void SetJson(httplib::Response& response, int status, const json& body) {
  response.status = status;
  response.set_content(
      body.dump(-1, ' ', false, json::error_handler_t::replace),
      "application/json");
}

// One request's output, from the engine's thread (which must not block)
// to the connection's thread that answers.
class Outbox {
 public:
  void Put(const Delta& delta) {
    absl::MutexLock lock(&mu_);
    deltas_.push_back(delta);
  }
  void End(const Delta& delta, const Outcome& outcome) {
    absl::MutexLock lock(&mu_);
    deltas_.push_back(delta);
    outcome_ = outcome;
  }
  // What came since the last call, waiting up to `timeout` for something.
  struct Batch {
    std::deque<Delta> deltas;
    std::optional<Outcome> outcome;  // once the request has ended
  };
  Batch Take(absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    mu_.AwaitWithTimeout(absl::Condition(this, &Outbox::Ready), timeout);
    Batch batch{std::move(deltas_), outcome_};
    deltas_.clear();
    return batch;
  }

 private:
  bool Ready() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !deltas_.empty() || outcome_.has_value();
  }
  absl::Mutex mu_;
  std::deque<Delta> deltas_ ABSL_GUARDED_BY(mu_);
  std::optional<Outcome> outcome_ ABSL_GUARDED_BY(mu_);
};

// The port and numeric address of a socket address (IPv4 or IPv6).
int PortOf(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET) {
    return ntohs(reinterpret_cast<const sockaddr_in&>(a).sin_port);
  }
  if (a.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6&>(a).sin6_port);
  }
  return -1;
}
std::string AddressOf(const sockaddr_storage& a) {
  char text[INET6_ADDRSTRLEN] = {};
  const void* raw =
      a.ss_family == AF_INET
          ? static_cast<const void*>(
                &reinterpret_cast<const sockaddr_in&>(a).sin_addr)
          : static_cast<const void*>(
                &reinterpret_cast<const sockaddr_in6&>(a).sin6_addr);
  return inet_ntop(a.ss_family, raw, text, sizeof text) ? text : "";
}

// The socket of the connection `request` came on, found by its addresses
// among this process's open files (cpp-httplib 0.11 shows a handler no
// socket); -1 when there is none. The connection stays open while its
// handler runs, so no other socket can have its descriptor meanwhile.
int ConnectionSocket(const httplib::Request& request) {
  if (request.local_port <= 0 || request.remote_port <= 0) return -1;
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int found = -1;
  while (const dirent* entry = readdir(dir)) {
    int fd = -1;
    if (!absl::SimpleAtoi(entry->d_name, &fd)) continue;
    sockaddr_storage local{}, peer{};
    socklen_t local_size = sizeof local, peer_size = sizeof peer;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_size) ||
        getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_size)) {
      continue;  // not a connected socket
    }
    if (PortOf(local) == request.local_port &&
        PortOf(peer) == request.remote_port &&
        AddressOf(peer) == request.remote_addr) {
      found = fd;
      break;
    }
  }
  closedir(dir);
  return found;
}

// Whether the client at the other end of `fd` has closed its side (it
// sends nothing more on a connection it waits on).
bool ClientLeft(int fd) {
  if (fd < 0) return false;
  pollfd p{.fd = fd, .events = POLLRDHUP, .revents = 0};
  return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

std::string Event(const json& chunk) {
  return absl::StrCat(
      "data: ", chunk.dump(-1, ' ', false, json::error_handler_t::replace),
      "\n\n");
}

}  // namespace

struct HttpApi::Prepared {
  openai::Call call;
  ValidRequest request;
  std::string prompt_text;  // for echo
};

HttpApi::HttpApi(Engine& engine, HttpApiOptions options)
    : engine_(engine),
      options_(std::move(options)),
      started_(absl::ToUnixSeconds(absl::Now())),
      server_(std::make_unique<httplib::Server>()) {
  const ChatTemplate* chat = options_.chat_template;
  const Tokenizer* t = options_.tokenizer;
  if (chat == nullptr || t == nullptr) return;
  // A special token's id: what its text encodes to when that is one id
  // (tokenizer.json's added tokens), else the tokenizer's own (a
  // SentencePiece control symbol, which text never encodes to).
  const auto special = [&](const std::string& text,
                           int64_t own) -> std::optional<int64_t> {
    if (text.empty()) return std::nullopt;
    const std::vector<int64_t> ids = t->Encode(text, /*add_bos=*/false);
    const int64_t id = ids.size() == 1 ? ids[0] : own;
    if (id < 0) return std::nullopt;
    chat_specials_.emplace_back(text, id);
    return id;
  };
  special(chat->bos_token(), t->bos_id());
  if (const std::optional<int64_t> eos =
          special(chat->eos_token(), t->eos_id())) {
    chat_eos_ = static_cast<int32_t>(*eos);
  }
}

std::vector<int64_t> HttpApi::EncodeChat(const std::string& text) const {
  // The template writes BOS and EOS as text; they become their ids, as
  // transformers' tokenizers match special tokens in text (SentencePiece
  // would spell them out), the text between them encoded on its own.
  std::vector<int64_t> ids;
  size_t at = 0;
  while (at < text.size()) {
    size_t next = std::string::npos;
    const std::pair<std::string, int64_t>* hit = nullptr;
    for (const auto& special : chat_specials_) {
      const size_t found = text.find(special.first, at);
      if (found < next || (found == next && found != std::string::npos &&
                           special.first.size() > hit->first.size())) {
        next = found;
        hit = &special;
      }
    }
    const size_t end = hit == nullptr ? text.size() : next;
    if (end > at) {
      const std::vector<int64_t> piece =
          options_.tokenizer->Encode(text.substr(at, end - at), false);
      ids.insert(ids.end(), piece.begin(), piece.end());
    }
    if (hit == nullptr) break;
    ids.push_back(hit->second);
    at = next + hit->first.size();
  }
  return ids;
}

HttpApi::~HttpApi() { Stop(); }

absl::StatusOr<std::unique_ptr<HttpApi>> HttpApi::Start(
    Engine& engine, HttpApiOptions options) {
  // A client gone mid-answer must fail the write, not kill the process:
  // cpp-httplib sends without MSG_NOSIGNAL.
  std::signal(SIGPIPE, SIG_IGN);
  std::unique_ptr<HttpApi> api(new HttpApi(engine, std::move(options)));
  api->Route();
  httplib::Server& server = *api->server_;
  const int threads = api->options_.max_connections;
  server.new_task_queue = [threads] {
    return new httplib::ThreadPool(threads);
  };
  server.set_payload_max_length(kMaxBodyBytes);
  server.set_keep_alive_max_count(1000);  // a client's pooled connection
  // SO_REUSEADDR alone: cpp-httplib's default adds SO_REUSEPORT, with which
  // a port another server holds would be shared with it, not refused.
  server.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  const int port = api->options_.port;
  api->port_ = port == 0 ? server.bind_to_any_port("0.0.0.0")
                         : (server.bind_to_port("0.0.0.0", port) ? port : -1);
  if (api->port_ <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot serve HTTP on port ", port));
  }
  api->thread_ = std::thread([&server] { server.listen_after_bind(); });
  // Until it runs, stop() would not stop it.
  for (int i = 0; i < 5000 && !server.is_running(); ++i) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  return api;
}

void HttpApi::Stop() {
  if (stopping_.exchange(true)) return;
  // Open requests see stopping_, cancel theirs and answer what the engine
  // says (a stream: an error event, then [DONE]); those still open after
  // a grace (the engine may be loading a group) are abandoned: answered
  // 503 at once. Then the connections close.
  const absl::Duration grace = 3 * options_.client_check;
  WaitForExchanges(absl::Now() + grace);
  abandon_ = true;
  WaitForExchanges(absl::Now() + grace);
  server_->stop();
  if (thread_.joinable()) thread_.join();
}

void HttpApi::WaitForExchanges(absl::Time deadline) const {
  while (open_exchanges_ > 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(10));
  }
}

void HttpApi::Route() {
  httplib::Server& s = *server_;
  s.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    const bool serving = engine_.serving() && !draining_;
    SetJson(res, serving ? 200 : 503,
            {{"status", serving ? "serving" : "not serving"}});
  });
  s.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    SetJson(
        res, 200,
        {{"object", "list"},
         {"data",
          json::array({{{"id", options_.model},
                        {"object", "model"},
                        {"created", started_},
                        {"owned_by", "octet"},
                        {"max_model_len", options_.limits.max_context}}})}});
  });
  s.Post("/v1/completions",
         [this](const httplib::Request& req, httplib::Response& res) {
           Answer(req, res, Endpoint::kCompletions);
         });
  s.Post("/v1/chat/completions",
         [this](const httplib::Request& req, httplib::Response& res) {
           Answer(req, res, Endpoint::kChat);
         });
  // A body is read only with its length said first: cpp-httplib 0.11
  // bounds a body by its Content-Length alone, not a chunked one.
  s.set_pre_routing_handler(
      [](const httplib::Request& req, httplib::Response& res) {
        if (req.method != "POST" || (req.has_header("Content-Length") &&
                                     !req.has_header("Transfer-Encoding"))) {
          return httplib::Server::HandlerResponse::Unhandled;
        }
        openai::ApiError e;
        e.http_status = 411;
        e.message = "a request body needs a Content-Length (not chunked)";
        res.set_header("Connection", "close");
        SetJson(res, 411, openai::ErrorBody(e));
        return httplib::Server::HandlerResponse::Handled;
      });
  // cpp-httplib's own refusals (no such path, a body too large, a
  // malformed request) in OpenAI's error shape too.
  s.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    openai::ApiError e;
    e.http_status = res.status;
    e.message =
        res.status == 404 || res.status == 405
            ? absl::StrCat(req.method, " ", req.path,
                           " is not an endpoint of this server")
        : res.status == 413
            ? absl::StrCat("the request body is larger than ", kMaxBodyBytes,
                           " bytes")
            : absl::StrCat("the request was refused (HTTP ", res.status, ")");
    SetJson(res, res.status, openai::ErrorBody(e));
  });
  s.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
        openai::ApiError e;
        e.http_status = 500;
        e.type = "server_error";
        e.message = "internal error";
        SetJson(res, 500, openai::ErrorBody(e));
      });
}

void HttpApi::Fail(httplib::Response& response, const absl::Status& status,
                   Endpoint endpoint, bool counted) {
  if (!counted && options_.metrics != nullptr) {
    options_.metrics->RequestEnded(status.code(), "none");
  }
  const openai::ApiError e = openai::FromStatus(status, endpoint);
  SetJson(response, e.http_status, openai::ErrorBody(e));
}

absl::StatusOr<HttpApi::Prepared> HttpApi::Prepare(const std::string& body,
                                                   Endpoint endpoint) {
  Prepared p;
  OCTET_ASSIGN_OR_RETURN(p.call,
                         openai::ParseCall(body, endpoint, options_.model));
  const Tokenizer* tokenizer = options_.tokenizer;
  const bool chat = endpoint == Endpoint::kChat;
  if (chat) {
    if (options_.chat_template == nullptr || tokenizer == nullptr) {
      return openai::InvalidField(
          "messages",
          absl::StrCat("cannot be used: ",
                       tokenizer == nullptr ? "this model has no tokenizer"
                                            : options_.no_chat_reason,
                       "; send a prompt to /v1/completions"));
    }
    absl::StatusOr<std::string> prompt =
        options_.chat_template->Render(p.call.messages, true);
    if (!prompt.ok()) {
      return openai::InvalidField(
          "messages", absl::StrCat("were refused by the chat template: ",
                                   prompt.status().message()));
    }
    p.call.generate.set_text(*std::move(prompt));
    // Run to the context's end unless told: checked with one token here,
    // given the rest below.
    if (!p.call.max_tokens_given) {
      p.call.generate.mutable_stopping()->set_max_new_tokens(1);
    }
  }
  EncodeFn encode;
  if (chat) {
    // A rendered chat holds its special tokens (its template writes
    // bos_token), as transformers' apply_chat_template tokenizes it.
    encode = [this](const std::string& text) { return EncodeChat(text); };
  } else if (tokenizer != nullptr) {
    encode = [tokenizer](const std::string& text) {
      return tokenizer->Encode(text, /*add_bos=*/true);
    };
  }
  OCTET_ASSIGN_OR_RETURN(
      p.request, ValidateRequest(p.call.generate, options_.limits, encode));
  if (chat && !p.call.max_tokens_given) {
    p.request.max_new_tokens = options_.limits.max_context -
                               static_cast<int64_t>(p.request.prompt.size());
  }
  // A chat ends at the template's EOS too (a turn's end, which config.json
  // may not list), unless EOS is ignored.
  std::vector<int32_t>& eos = p.request.eos_ids;
  if (chat && chat_eos_.has_value() &&
      !p.call.generate.stopping().ignore_eos() &&
      std::find(eos.begin(), eos.end(), *chat_eos_) == eos.end()) {
    eos.push_back(*chat_eos_);
  }
  p.request.request_id = absl::StrCat(chat ? "chatcmpl-" : "cmpl-", next_id_++);
  if (p.call.echo) {
    if (p.call.generate.has_text()) {
      p.prompt_text = p.call.generate.text();
    } else if (tokenizer != nullptr) {
      p.prompt_text = tokenizer->Decode(std::vector<int64_t>(
          p.request.prompt.begin(), p.request.prompt.end()));
    }
  }
  return p;
}

// One request's exchange with the engine, shared by the engine's
// callbacks and the connection's thread (a stream's outlives its handler).
struct HttpApi::Exchange {
  Prepared p;
  Outbox outbox;
  std::optional<openai::Answer> answer;
  uint64_t id = 0;
  int socket = -1;     // the connection's (ConnectionSocket), or -1
  bool ended = false;  // a stream's last event is out
};

void HttpApi::Answer(const httplib::Request& request,
                     httplib::Response& response, Endpoint endpoint) {
  absl::StatusOr<Prepared> prepared = Prepare(request.body, endpoint);
  if (!prepared.ok()) return Fail(response, prepared.status(), endpoint);
  auto x = std::make_shared<Exchange>();
  x->p = *std::move(prepared);
  openai::TokenText token_text = [t = options_.tokenizer](int32_t id) {
    return t == nullptr ? std::string() : t->Decode({int64_t{id}});
  };
  x->answer.emplace(x->p.call, x->p.request.request_id, options_.model,
                    absl::ToUnixSeconds(absl::Now()), x->p.request.prompt,
                    x->p.prompt_text, std::move(token_text));
  absl::StatusOr<uint64_t> id = engine_.Submit(
      x->p.request,
      {.on_delta = [x](const Delta& d) { x->outbox.Put(d); },
       .on_done = [x](const Delta& d,
                      const Outcome& o) { x->outbox.End(d, o); }});
  if (!id.ok()) return Fail(response, id.status(), endpoint, /*counted=*/true);
  x->id = *id;
  x->socket = ConnectionSocket(request);
  ++open_exchanges_;
  if (!x->p.call.stream) {
    AnswerWhole(*x, response, endpoint);
    --open_exchanges_;
    return;
  }
  response.set_header("Cache-Control", "no-cache");
  response.set_header("X-Accel-Buffering", "no");  // no proxy buffering
  response.set_chunked_content_provider(
      "text/event-stream",
      [this, x, endpoint](size_t, httplib::DataSink& sink) {
        return NextEvents(*x, sink, endpoint);
      },
      // Released, with its last event out or not (the client went away,
      // or the server stopped): an unfinished request goes too.
      [this, x](bool) {
        if (!x->ended) engine_.Cancel(x->id);
        --open_exchanges_;
      });
}

void HttpApi::AnswerWhole(Exchange& x, httplib::Response& response,
                          Endpoint endpoint) {
  for (;;) {
    Outbox::Batch batch = x.outbox.Take(options_.client_check);
    // A client that closed its connection, or a stopping server, ends it.
    if (stopping_ || ClientLeft(x.socket)) engine_.Cancel(x.id);
    for (const Delta& d : batch.deltas) x.answer->Add(d);
    if (batch.outcome.has_value()) {
      if (!batch.outcome->status.ok()) {
        return Fail(response, batch.outcome->status, endpoint, true);
      }
      return SetJson(response, 200, x.answer->Whole(*batch.outcome));
    }
    if (abandon_) {  // the engine counts the request when it ends
      return Fail(response, absl::UnavailableError("the server is stopping"),
                  endpoint, true);
    }
  }
}

bool HttpApi::NextEvents(Exchange& x, httplib::DataSink& sink,
                         Endpoint endpoint) {
  Outbox::Batch batch = x.outbox.Take(options_.client_check);
  if (stopping_ || ClientLeft(x.socket)) engine_.Cancel(x.id);
  std::string events;
  const size_t n = batch.deltas.size();
  for (size_t i = 0; i < n; ++i) {
    const bool last =
        i + 1 == n && batch.outcome.has_value() && batch.outcome->status.ok();
    for (const json& chunk :
         last ? x.answer->LastChunks(batch.deltas[i], *batch.outcome)
              : x.answer->Chunks(batch.deltas[i])) {
      events += Event(chunk);
    }
  }
  std::optional<absl::Status> end;
  if (batch.outcome.has_value()) {
    end = batch.outcome->status;
  } else if (abandon_) {
    end = absl::UnavailableError("the server is stopping");
  }
  if (end.has_value()) {
    if (!end->ok()) {
      events += Event(openai::ErrorBody(openai::FromStatus(*end, endpoint)));
    }
    events += "data: [DONE]\n\n";
    x.ended = true;
  } else if (events.empty()) {
    return true;  // nothing yet: called again (a write of 0 bytes would end it)
  }
  if (!sink.write(events.data(), events.size())) return false;
  if (x.ended) sink.done();
  return true;
}

}  // namespace octet
