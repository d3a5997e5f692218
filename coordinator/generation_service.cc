#include "coordinator/generation_service.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "coordinator/responses.h"
#include "coordinator/stream_outbox.h"
#include "rpc/grpc_status.h"

namespace octet {
namespace {

// A reactor's request in the engine: its id, the client's cancellation
// (passed on once the id is known), and two moments that matter because a
// Finish may delete the reactor: its construction, which the checked
// request waits for before it is submitted, and the submission's end,
// which the engine's callbacks wait for.
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
  // Start has returned / the engine's callbacks wait for it (until then
  // the reactor is still in use on the checking thread).
  void Started() { started_.Notify(); }
  void WaitStarted() { started_.WaitForNotification(); }

 private:
  absl::Mutex mu_;
  std::optional<uint64_t> id_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  absl::Notification constructed_, started_;
};

class UnaryReactor : public grpc::ServerUnaryReactor {
 public:
  UnaryReactor(GenerationService& service, Engine& engine,
               const v1::GenerateRequest* request,
               v1::GenerateResponse* response)
      : engine_(engine), response_(response) {
    const absl::Status queued =
        service.CheckAside(*request, [this](absl::StatusOr<ValidRequest> r) {
          submission_.WaitConstructed();
          Begin(r);
        });
    submission_.Constructed();
    if (!queued.ok()) Finish(ToGrpc(queued));
  }
  void OnCancel() override { submission_.Cancel(engine_); }
  void OnDone() override { delete this; }

 private:
  // On the service's checking thread, once the request is checked.
  void Begin(absl::StatusOr<ValidRequest>& request) {
    if (request.ok()) response_->set_request_id(request->request_id);
    const absl::Status s =
        submission_.Start(engine_, std::move(request),
                          {.on_delta =
                               [this](const Delta& d) {
                                 submission_.WaitStarted();
                                 AddDelta(d, response_);
                               },
                           .on_done =
                               [this](const Delta& d, const Outcome& o) {
                                 submission_.WaitStarted();
                                 AddDelta(d, response_);
                                 SetOutcome(o, response_);
                                 Finish(ToGrpc(o.status));
                               }});
    submission_.Started();
    if (!s.ok()) Finish(ToGrpc(s));
  }

  Engine& engine_;
  v1::GenerateResponse* response_;  // written by one thread at a time
  Submission submission_;
};

// A streaming call: the engine's output goes through a StreamOutbox
// (stream_outbox.h), which decides every write and the one Finish; this
// class only carries them out, calling gRPC outside the outbox's lock.
class StreamReactor
    : public grpc::ServerWriteReactor<v1::GenerateStreamResponse> {
 public:
  StreamReactor(GenerationService& service, Engine& engine,
                const v1::GenerateRequest* request)
      : engine_(engine) {
    const absl::Status queued =
        service.CheckAside(*request, [this](absl::StatusOr<ValidRequest> r) {
          submission_.WaitConstructed();
          Begin(r);
        });
    submission_.Constructed();
    if (!queued.ok()) Finish(ToGrpc(queued));
  }
  void OnCancel() override { submission_.Cancel(engine_); }
  void OnWriteDone(bool ok) override {
    // A failed write: the client is gone (OnCancel follows, which ends the
    // request); the outbox finishes once the engine's end is in.
    Do(outbox_->WriteDone(ok));
  }
  void OnDone() override { delete this; }

 private:
  // On the service's checking thread, once the request is checked: the
  // outbox exists before the engine can say anything.
  void Begin(absl::StatusOr<ValidRequest>& request) {
    outbox_.emplace(request.ok() ? request->request_id : std::string());
    const absl::Status s = submission_.Start(
        engine_, std::move(request),
        {.on_delta = [this](const Delta& d) { Queue(d, nullptr); },
         .on_done = [this](const Delta& d,
                           const Outcome& o) { Queue(d, &o); }});
    submission_.Started();
    if (!s.ok()) Finish(ToGrpc(s));
  }
  // From the engine thread: new output (and, last, how it ended). The
  // engine's callbacks wait until Begin is done with the reactor.
  void Queue(const Delta& d, const Outcome* outcome) {
    submission_.WaitStarted();
    Do(outbox_->Add(d, outcome));
  }
  // Carries out what the outbox said; `this` may be gone right after a
  // Finish (OnDone), and nothing may touch it after an action of kNone
  // either, since another thread may be finishing the call meanwhile.
  void Do(const StreamOutbox::Action& a) {
    if (a.kind == StreamOutbox::Action::kWrite) StartWrite(a.message);
    if (a.kind == StreamOutbox::Action::kFinish) Finish(ToGrpc(a.status));
  }

  Engine& engine_;
  Submission submission_;
  std::optional<StreamOutbox> outbox_;  // made by Begin
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

absl::Status GenerationService::CheckAside(
    const v1::GenerateRequest& request,
    std::function<void(absl::StatusOr<ValidRequest>)> then) {
  if (checking_.Schedule(
          [this, &request, then = std::move(then)] { then(Check(request)); })) {
    return absl::OkStatus();
  }
  if (metrics_ != nullptr) {
    metrics_->RequestEnded(absl::StatusCode::kResourceExhausted, "none");
  }
  return absl::ResourceExhaustedError(
      "too many requests are waiting to be checked and tokenized");
}

grpc::ServerUnaryReactor* GenerationService::Generate(
    grpc::CallbackServerContext*, const v1::GenerateRequest* request,
    v1::GenerateResponse* response) {
  return new UnaryReactor(*this, engine_, request, response);
}

grpc::ServerWriteReactor<v1::GenerateStreamResponse>*
GenerationService::GenerateStream(grpc::CallbackServerContext*,
                                  const v1::GenerateRequest* request) {
  return new StreamReactor(*this, engine_, request);
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
