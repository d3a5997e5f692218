#include "rpc/store.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "octet/internal/v1/rendezvous.grpc.pb.h"
#include "rpc/bearer_token.h"
#include "rpc/grpc_status.h"

namespace octet {

namespace rpc = ::octet::internal::v1;

absl::Status InMemoryStore::Set(const std::string& key,
                                const std::string& value) {
  absl::MutexLock lock(&mu_);
  values_[key] = value;
  return absl::OkStatus();
}

absl::StatusOr<std::string> InMemoryStore::Get(const std::string& key,
                                               absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto present = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return values_.contains(key);
  };
  if (!mu_.AwaitWithDeadline(absl::Condition(&present), deadline)) {
    return absl::DeadlineExceededError(
        absl::StrCat("rendezvous: key '", key, "' was not set in time"));
  }
  return values_.at(key);
}

namespace {

std::chrono::system_clock::time_point ToChrono(absl::Time t) {
  return absl::ToChronoTime(
      std::clamp(t, absl::Now(), absl::Now() + absl::Hours(24 * 365)));
}

// What one group's store may hold: its ranks set a few short keys each
// (addresses, segment names, NCCL's 128-byte id).
constexpr size_t kMaxKeyBytes = 512;
constexpr size_t kMaxValueBytes = size_t{64} << 10;
constexpr size_t kMaxStoredBytes = size_t{16} << 20;
constexpr absl::Duration kMaxGetWait = absl::Minutes(10);

// The service: Get waits in the store for at most the request's timeout
// (kMaxGetWait at most), and never past the call's own deadline. With a
// token, calls without it are refused; keys, values and the total are
// bounded.
class RendezvousService final : public rpc::Rendezvous::Service {
 public:
  RendezvousService(KeyValueStore* store, std::string token)
      : store_(store), token_(std::move(token)) {}

  grpc::Status Set(grpc::ServerContext* context, const rpc::SetRequest* request,
                   rpc::SetResponse*) override {
    if (grpc::Status s = CheckBearerToken(token_, *context); !s.ok()) return s;
    if (request->key().size() > kMaxKeyBytes ||
        request->value().size() > kMaxValueBytes) {
      return grpc::Status(
          grpc::StatusCode::INVALID_ARGUMENT,
          absl::StrCat("rendezvous: a key of ", request->key().size(),
                       " bytes or a value of ", request->value().size(),
                       " bytes is over the limit (", kMaxKeyBytes, ", ",
                       kMaxValueBytes, ")"));
    }
    {
      absl::MutexLock lock(&mu_);
      size_t& held = sizes_[request->key()];
      const size_t now = request->key().size() + request->value().size();
      if (stored_ - held + now > kMaxStoredBytes) {
        if (held == 0) sizes_.erase(request->key());
        return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                            absl::StrCat("rendezvous: the store holds ",
                                         kMaxStoredBytes, " bytes at most"));
      }
      stored_ = stored_ - held + now;
      held = now;
    }
    return ToGrpc(store_->Set(request->key(), request->value()));
  }

  grpc::Status Get(grpc::ServerContext* context, const rpc::GetRequest* request,
                   rpc::GetResponse* response) override {
    if (grpc::Status s = CheckBearerToken(token_, *context); !s.ok()) return s;
    if (request->timeout_ms() < 0) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "rendezvous: timeout_ms must be >= 0");
    }
    const absl::Time deadline = std::min(
        absl::Now() +
            std::min(absl::Milliseconds(request->timeout_ms()), kMaxGetWait),
        absl::FromChrono(context->deadline()));
    absl::StatusOr<std::string> value = store_->Get(request->key(), deadline);
    if (!value.ok()) return ToGrpc(value.status());
    response->set_value(*std::move(value));
    return grpc::Status::OK;
  }

 private:
  KeyValueStore* store_;
  const std::string token_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, size_t> sizes_ ABSL_GUARDED_BY(mu_);
  size_t stored_ ABSL_GUARDED_BY(mu_) = 0;  // keys and values, in bytes
};

}  // namespace

struct RendezvousServer::Impl {
  Impl(KeyValueStore* store, std::string token)
      : service(store, std::move(token)) {}
  RendezvousService service;
  std::unique_ptr<grpc::Server> server;
};

RendezvousServer::RendezvousServer(std::unique_ptr<Impl> impl,
                                   std::string address)
    : impl_(std::move(impl)), address_(std::move(address)) {}

RendezvousServer::~RendezvousServer() {
  // Ends waiting Gets at once (the client sees CANCELLED or UNAVAILABLE).
  impl_->server->Shutdown(std::chrono::system_clock::now());
  impl_->server->Wait();
}

absl::StatusOr<std::unique_ptr<RendezvousServer>> RendezvousServer::Start(
    const std::string& address, KeyValueStore* store, const std::string& token,
    const TlsConfig& tls) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("rendezvous: address '", address, "' is not host:port"));
  }
  auto impl = std::make_unique<Impl>(store, token);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(address, TlsServerCredentials(tls), &port);
  builder.RegisterService(&impl->service);
  builder.SetMaxReceiveMessageSize(1 << 20);
  impl->server = builder.BuildAndStart();
  if (impl->server == nullptr || port == 0) {
    return absl::UnavailableError(
        absl::StrCat("rendezvous: cannot listen on ", address));
  }
  return std::unique_ptr<RendezvousServer>(new RendezvousServer(
      std::move(impl), absl::StrCat(address.substr(0, colon), ":", port)));
}

struct GrpcStore::Impl {
  std::unique_ptr<rpc::Rendezvous::Stub> stub;
};

GrpcStore::GrpcStore(const std::string& address, std::string token,
                     const TlsConfig& tls)
    : impl_(std::make_unique<Impl>()), token_(std::move(token)) {
  impl_->stub = rpc::Rendezvous::NewStub(
      grpc::CreateChannel(address, TlsChannelCredentials(tls)));
}

GrpcStore::~GrpcStore() = default;

absl::Status GrpcStore::Set(const std::string& key, const std::string& value) {
  grpc::ClientContext context;
  context.set_deadline(ToChrono(absl::Now() + kSetTimeout));
  context.set_wait_for_ready(true);
  AddBearerToken(token_, context);
  rpc::SetRequest request;
  request.set_key(key);
  request.set_value(value);
  rpc::SetResponse response;
  return FromGrpc(impl_->stub->Set(&context, request, &response));
}

absl::StatusOr<std::string> GrpcStore::Get(const std::string& key,
                                           absl::Time deadline) {
  grpc::ClientContext context;
  context.set_deadline(ToChrono(deadline));
  context.set_wait_for_ready(true);
  AddBearerToken(token_, context);
  rpc::GetRequest request;
  request.set_key(key);
  request.set_timeout_ms(
      std::max<int64_t>(0, absl::ToInt64Milliseconds(deadline - absl::Now())));
  rpc::GetResponse response;
  grpc::Status s = impl_->stub->Get(&context, request, &response);
  if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    return absl::DeadlineExceededError(
        absl::StrCat("rendezvous: key '", key, "' was not set in time"));
  }
  if (!s.ok()) return FromGrpc(s);
  return std::move(*response.mutable_value());
}

}  // namespace octet
