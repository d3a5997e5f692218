#include "coordinator/http_api.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <httplib.h>
#include <poll.h>
#include <sys/socket.h>

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
      server_(std::make_unique<httplib::Server>()) {}

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
  const int port = api->options_.port;
  api->port_ = port == 0 ? server.bind_to_any_port("0.0.0.0")
                         : (server.bind_to_port("0.0.0.0", port) ? port : -1);
  if (api->port_ <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot serve HTTP on port ", port));
  }
  api->thread_ = std::thread([&server] { server.listen_after_bind(); });
  return api;
}

void HttpApi::Stop() {
  if (stopping_.exchange(true)) return;
  server_->stop();
  if (thread_.joinable()) thread_.join();
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
  // cpp-httplib's own refusals (no such path, a body too large) in
  // OpenAI's error shape too.
  s.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    openai::ApiError e;
    e.http_status = res.status;
    e.message = res.status == 413
                    ? absl::StrCat("the request body is larger than ",
                                   kMaxBodyBytes, " bytes")
                    : absl::StrCat(req.method, " ", req.path,
                                   " is not an endpoint of this server");
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
  if (tokenizer != nullptr) {
    // A rendered chat holds its special tokens (its template writes
    // bos_token), as transformers' apply_chat_template tokenizes it.
    encode = [tokenizer, chat](const std::string& text) {
      return tokenizer->Encode(text, /*add_bos=*/!chat);
    };
  }
  OCTET_ASSIGN_OR_RETURN(
      p.request, ValidateRequest(p.call.generate, options_.limits, encode));
  if (chat && !p.call.max_tokens_given) {
    p.request.max_new_tokens = options_.limits.max_context -
                               static_cast<int64_t>(p.request.prompt.size());
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

void HttpApi::Answer(const httplib::Request& request,
                     httplib::Response& response, Endpoint endpoint) {
  absl::StatusOr<Prepared> prepared = Prepare(request.body, endpoint);
  if (!prepared.ok()) return Fail(response, prepared.status(), endpoint);
  // What the answer is built from outlives this handler when it streams.
  struct Exchange {
    Prepared p;
    Outbox outbox;
    std::optional<openai::Answer> answer;
    uint64_t id = 0;
    bool ended = false;  // the last event is out
  };
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

  // A client that closes its connection ends its request.
  const int socket = ConnectionSocket(request);
  if (!x->p.call.stream) {
    for (;;) {
      Outbox::Batch batch = x->outbox.Take(options_.heartbeat);
      if (stopping_ || ClientLeft(socket)) engine_.Cancel(x->id);
      for (const Delta& d : batch.deltas) x->answer->Add(d);
      if (!batch.outcome.has_value()) continue;
      if (!batch.outcome->status.ok()) {
        return Fail(response, batch.outcome->status, endpoint, true);
      }
      return SetJson(response, 200, x->answer->Whole(*batch.outcome));
    }
  }

  response.set_header("Cache-Control", "no-cache");
  response.set_header("X-Accel-Buffering", "no");  // no proxy buffering
  response.set_chunked_content_provider(
      "text/event-stream",
      [this, x, endpoint, socket](size_t, httplib::DataSink& sink) {
        Outbox::Batch batch = x->outbox.Take(options_.heartbeat);
        if (stopping_ || ClientLeft(socket)) engine_.Cancel(x->id);
        std::string events;
        const size_t n = batch.deltas.size();
        for (size_t i = 0; i < n; ++i) {
          const bool last = i + 1 == n && batch.outcome.has_value() &&
                            batch.outcome->status.ok();
          for (const json& chunk :
               last ? x->answer->LastChunks(batch.deltas[i], *batch.outcome)
                    : x->answer->Chunks(batch.deltas[i])) {
            events += Event(chunk);
          }
        }
        if (batch.outcome.has_value()) {
          if (!batch.outcome->status.ok()) {
            events += Event(openai::ErrorBody(
                openai::FromStatus(batch.outcome->status, endpoint)));
          }
          events += "data: [DONE]\n\n";
          x->ended = true;
        } else if (events.empty()) {
          events = ": waiting\n\n";  // a comment: is the client still there?
        }
        if (!sink.write(events.data(), events.size())) return false;
        if (x->ended) sink.done();
        return true;
      },
      // Ended before its last event (the client went away, or the server
      // stopped): the request goes too.
      [this, x](bool) {
        if (!x->ended) engine_.Cancel(x->id);
      });
}

}  // namespace octet
