// The public API (proto/octet/v1/generation.proto) on the engine: each call
// is checked (request.h) and its text tokenized on the service's own
// threads (never on gRPC's), submitted, and answered as the engine
// delivers; a client that cancels or passes its deadline ends its request
// at once (its KV blocks are freed at the next step boundary).
#pragma once

#include <atomic>
#include <functional>
#include <string>

#include "coordinator/engine.h"
#include "coordinator/request.h"
#include "coordinator/work_queue.h"
#include "octet/v1/generation.grpc.pb.h"

namespace octet {

class GenerationService final : public v1::Generation::CallbackService {
 public:
  // `engine` must outlive the service; `encode` tokenizes text prompts
  // (null: token ids only); `info` is what GetModelInfo answers, its dtype
  // the loaded workers' (Engine::activation_dtype). Invalid requests count
  // in `metrics` (optional; the engine counts the rest).
  // Requests wait to be checked on `check_threads` threads, at most
  // `max_checking` of them (more: RESOURCE_EXHAUSTED).
  GenerationService(Engine& engine, ModelLimits limits, EncodeFn encode,
                    v1::ModelInfo info, Metrics* metrics = nullptr,
                    int check_threads = 2, int max_checking = 1024)
      : engine_(engine),
        limits_(std::move(limits)),
        encode_(std::move(encode)),
        info_(std::move(info)),
        metrics_(metrics),
        checking_(check_threads, max_checking, "octet-tokenize") {}

  grpc::ServerUnaryReactor* Generate(grpc::CallbackServerContext* context,
                                     const v1::GenerateRequest* request,
                                     v1::GenerateResponse* response) override;
  grpc::ServerWriteReactor<v1::GenerateStreamResponse>* GenerateStream(
      grpc::CallbackServerContext* context,
      const v1::GenerateRequest* request) override;
  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* context,
                                         const v1::GetModelInfoRequest* request,
                                         v1::ModelInfo* response) override;

  // For the call reactors: checks `request` (which must live until `then`
  // has run) on a checking thread and hands `then` the result; an error,
  // and no call of `then`, when too many wait already.
  absl::Status CheckAside(
      const v1::GenerateRequest& request,
      std::function<void(absl::StatusOr<ValidRequest>)> then);

 private:
  // The request checked, with its id (the client's, or one made here).
  absl::StatusOr<ValidRequest> Check(const v1::GenerateRequest& request);

  Engine& engine_;
  const ModelLimits limits_;
  const EncodeFn encode_;
  const v1::ModelInfo info_;
  Metrics* const metrics_;
  std::atomic<uint64_t> next_id_{1};
  WorkQueue checking_;  // last: its threads stop before the rest goes
};

}  // namespace octet
