#include "coordinator/generation_service.h"

#include <deque>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "parallel/grpc_status.h"

namespace octet {
namespace {

v1::FinishReason ToProto(Finish f) {
  switch (f) {
    case Finish::kEos:
      return v1::FINISH_REASON_EOS;
    case Finish::kStop:
      return v1::FINISH_REASON_STOP;
    case Finish::kLength:
      break;
  }
  return v1::FINISH_REASON_LENGTH;
}

// Usage and timings of a finished request into a response message.
template <typename M>
void SetOutcome(const Outcome& o, M* m) {
  m->set_finish_reason(ToProto(o.finish));
  m->mutable_usage()->set_prompt_tokens(static_cast<uint32_t>(o.prompt_tokens));
  m->mutable_usage()->set_completion_tokens(
      static_cast<uint32_t>(o.completion_tokens));
  m->mutable_timings()->set_time_to_first_token_seconds(
      o.time_to_first_token_seconds);
  m->mutable_timings()->set_total_seconds(o.total_seconds);
}

template <typename M>
void AddDelta(const Delta& d, M* m) {
  m->mutable_text()->append(d.text);
  m->mutable_token_ids()->Add(d.token_ids.begin(), d.token_ids.end());
  m->mutable_logprobs()->Add(d.logprobs.begin(), d.logprobs.end());
}

// A reactor's request in the engine: its id, the client's cancellation
// (passed on once the id is known), and the reactor's construction, which
// the engine's callbacks wait for, since their Finish may delete the
// reactor.
class Submission {
 public:
  // Hands the checked request to the engine; the status to Finish with if
  // that fails (then no callback runs).
  absl::Status Start(Engine& engine, absl::StatusOr<ValidRequest> request,
                     RequestCallbacks callbacks) {
    if (!request.ok()) return request.status();
    absl::StatusOr<uint64_t> id =
        engine.Submit(*std::move(request), std::move(callbacks));
    if (!id.ok()) return id.status();
    absl::MutexLock lock(&mu_);
    id_ = *id;
    if (cancelled_) engine.Cancel(*id);
    return absl::OkStatus();
  }
  void Cancel(Engine& engine) {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
    if (id_.has_value()) engine.Cancel(*id_);
  }
  // The reactor is built (end of its constructor) / callbacks wait for it.
  void Constructed() { constructed_.Notify(); }
  void WaitConstructed() { constructed_.WaitForNotification(); }

 private:
  absl::Mutex mu_;
  std::optional<uint64_t> id_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  absl::Notification constructed_;
};

class UnaryReactor : public grpc::ServerUnaryReactor {
 public:
  UnaryReactor(Engine& engine, absl::StatusOr<ValidRequest> request,
               v1::GenerateResponse* response)
      : engine_(engine), response_(response) {
    if (request.ok()) response_->set_request_id(request->request_id);
    const absl::Status s = submission_.Start(
        engine, std::move(request),
        {.on_delta = [this](const Delta& d) { AddDelta(d, response_); },
         .on_done =
             [this](const Delta& d, const Outcome& o) {
               submission_.WaitConstructed();
               AddDelta(d, response_);
               SetOutcome(o, response_);
               Finish(ToGrpc(o.status));
             }});
    submission_.Constructed();
    if (!s.ok()) Finish(ToGrpc(s));
  }
  void OnCancel() override { submission_.Cancel(engine_); }
  void OnDone() override { delete this; }

 private:
  Engine& engine_;
  v1::GenerateResponse* response_;  // written by the engine thread only
  Submission submission_;
};

class StreamReactor
    : public grpc::ServerWriteReactor<v1::GenerateStreamResponse> {
 public:
  StreamReactor(Engine& engine, absl::StatusOr<ValidRequest> request)
      : engine_(engine) {
    if (request.ok()) request_id_ = request->request_id;
    const absl::Status s = submission_.Start(
        engine, std::move(request),
        {.on_delta = [this](const Delta& d) { Queue(d, nullptr); },
         .on_done = [this](const Delta& d,
                           const Outcome& o) { Queue(d, &o); }});
    submission_.Constructed();
    if (!s.ok()) Finish(ToGrpc(s));
  }
  void OnCancel() override { submission_.Cancel(engine_); }
  void OnWriteDone(bool ok) override {
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      if (!ok) return;  // the client is gone; OnCancel follows
    }
    Pump();
  }
  void OnDone() override { delete this; }

 private:
  // From the engine thread: new output (and, last, how it ended). Tokens
  // that come while a message is on its way join the next one.
  void Queue(const Delta& d, const Outcome* outcome) {
    submission_.WaitConstructed();
    {
      absl::MutexLock lock(&mu_);
      if (outcome != nullptr && !outcome->status.ok()) {
        status_ = ToGrpc(outcome->status);
        pending_.clear();  // a failed request sends nothing more
        done_ = true;
      } else {
        if (pending_.empty() || outcome != nullptr) pending_.emplace_back();
        v1::GenerateStreamResponse& m = pending_.back();
        m.set_request_id(request_id_);
        AddDelta(d, &m);
        if (outcome != nullptr) {
          SetOutcome(*outcome, &m);
          done_ = true;
        }
      }
    }
    Pump();
  }
  // Starts the next write, or finishes once everything was written; gRPC is
  // called outside the lock (its reactions may take it).
  void Pump() {
    bool write = false, finish = false;
    grpc::Status status;
    {
      absl::MutexLock lock(&mu_);
      if (writing_ || finished_) return;
      if (!pending_.empty()) {
        current_ = std::move(pending_.front());
        pending_.pop_front();
        writing_ = write = true;
      } else if (done_) {
        finished_ = finish = true;
        status = status_;
      }
    }
    if (write) StartWrite(&current_);  // current_ is not touched until done
    if (finish) Finish(status);
  }

  Engine& engine_;
  std::string request_id_;
  Submission submission_;
  absl::Mutex mu_;
  std::deque<v1::GenerateStreamResponse> pending_ ABSL_GUARDED_BY(mu_);
  v1::GenerateStreamResponse current_;  // the message being written
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status status_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

absl::StatusOr<ValidRequest> GenerationService::Check(
    const v1::GenerateRequest& request) {
  absl::StatusOr<ValidRequest> r = ValidateRequest(request, limits_, encode_);
  if (!r.ok() && metrics_ != nullptr) {
    metrics_->RequestEnded(r.status().code(), "none");
  }
  if (r.ok() && r->request_id.empty()) {
    r->request_id = absl::StrCat("octet-", next_id_++);
  }
  return r;
}

grpc::ServerUnaryReactor* GenerationService::Generate(
    grpc::CallbackServerContext*, const v1::GenerateRequest* request,
    v1::GenerateResponse* response) {
  return new UnaryReactor(engine_, Check(*request), response);
}

grpc::ServerWriteReactor<v1::GenerateStreamResponse>*
GenerationService::GenerateStream(grpc::CallbackServerContext*,
                                  const v1::GenerateRequest* request) {
  return new StreamReactor(engine_, Check(*request));
}

grpc::ServerUnaryReactor* GenerationService::GetModelInfo(
    grpc::CallbackServerContext* context, const v1::GetModelInfoRequest*,
    v1::ModelInfo* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (!engine_.serving()) {
    reactor->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                 "the model is not loaded yet"));
    return reactor;
  }
  *response = info_;
  response->set_dtype(engine_.activation_dtype());  // as the workers loaded
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

}  // namespace octet
