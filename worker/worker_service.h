// The worker process's gRPC service (proto/octet/internal/v1/worker.proto):
// one tensor-parallel rank that loads its shard when the coordinator says
// so and runs the forward passes the coordinator schedules. The coordinator
// owns the KV-cache block tables; the worker stores keys and values where
// they say. Rank 0 samples (each sequence's sampler and token history live
// here, so that seeds and repetition penalties work across steps).
//
// Thread-safe: Load, Step and Free are served one at a time (one model, one
// cache); Health answers at once, also while a long call runs.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "kernels/backend.h"
#include "kernels/sampling.h"
#include "model/checkpoint.h"
#include "octet/internal/v1/worker.grpc.pb.h"
#include "parallel/communicator.h"
#include "rpc/tls.h"
#include "worker/kv_cache.h"
#include "worker/llama_model.h"

namespace octet {

struct WorkerServiceOptions {
  // When not empty, every call must carry "authorization: Bearer <token>"
  // (remote workers); empty for workers on a Unix socket.
  std::string token;
  // How this rank reaches the coordinator's rendezvous store: over TLS when
  // `tls.ca` is set (rpc/tls.h; its certificate, if any, presented),
  // plaintext otherwise (spawned workers: a loopback store).
  TlsConfig tls;
  // Where this rank listens for its peers' Gloo connections: an address of
  // this machine the other ranks can reach (127.0.0.1 when all ranks run
  // here).
  std::string collective_host = "127.0.0.1";
  // Called when a step fails inside the group's collectives, or when a Load
  // for another group comes to a worker that has one: the group is broken
  // or replaced and this process cannot join another, so the worker program
  // exits (and its supervisor, e.g. Kubernetes, starts a fresh one).
  std::function<void()> on_group_failed;
};

// Whether `host` (of a HOST:PORT) means "every interface": empty,
// 0.0.0.0, :: or [::].
bool IsWildcardHost(const std::string& host);

// The rendezvous store's address as a worker dials it. A coordinator that
// listens on every interface cannot know which of its addresses a worker
// reaches, so it sends a wildcard host ("0.0.0.0:PORT", "[::]:PORT") or
// none (":PORT"); the host is then the one the Load call came from: `peer`,
// as gRPC writes it ("ipv4:HOST:PORT", "ipv6:[HOST]:PORT"). InvalidArgument
// when neither names a host.
absl::StatusOr<std::string> RendezvousTarget(const std::string& address,
                                             const std::string& peer);

class WorkerService final : public internal::v1::Worker::Service {
 public:
  explicit WorkerService(WorkerServiceOptions options)
      : options_(std::move(options)) {}
  ~WorkerService() override;

  grpc::Status Load(
      grpc::ServerContext* context, const internal::v1::LoadRequest* request,
      grpc::ServerWriter<internal::v1::LoadProgress>* writer) override;
  grpc::Status Step(grpc::ServerContext* context,
                    const internal::v1::StepRequest* request,
                    internal::v1::StepResponse* response) override;
  grpc::Status Free(grpc::ServerContext* context,
                    const internal::v1::FreeRequest* request,
                    internal::v1::FreeResponse* response) override;
  grpc::Status Health(grpc::ServerContext* context,
                      const internal::v1::HealthRequest* request,
                      internal::v1::HealthResponse* response) override;

 private:
  // What a loaded rank holds; destroyed in reverse order.
  struct Loaded {
    int rank = 0;
    std::unique_ptr<Checkpoint> checkpoint;
    std::unique_ptr<Backend> backend;
    std::unique_ptr<Communicator> comm;
    std::unique_ptr<LlamaModel> model;
    std::unique_ptr<KvCache> cache;
  };
  // Rank 0's per-sequence sampling state.
  struct SeqState {
    std::optional<SamplingParams> params;  // checked once, at its first token
    std::vector<int32_t> history;          // every token fed so far
  };

  grpc::Status Authorize(const grpc::ServerContext& context) const;

  // Load's steps. Load progress for the coordinator: (done, total, stage).
  using Progress = std::function<void(int64_t, int64_t, const std::string&)>;
  // Marks this worker as loading for the request's group, or says why it
  // cannot: it has a model, or belongs to another group (and then ends).
  grpc::Status ClaimLoad(const internal::v1::LoadRequest& request);
  // Opens the checkpoint, makes the backend, joins the group and loads this
  // rank's model and cache into `result`; `peer` is the caller's address.
  absl::Status LoadRank(const internal::v1::LoadRequest& request,
                        const std::string& peer, const Progress& report,
                        Loaded* result);
  // This rank's communicator, through the rendezvous store the request
  // names.
  absl::StatusOr<std::unique_ptr<Communicator>> JoinGroup(
      const internal::v1::LoadRequest& request, const std::string& peer,
      Backend& backend);
  // Records the tokens `seq` feeds in its history; when it asks for a
  // token, the row that samples it from logits row `logits_row` (which
  // points into the history: valid until the history changes).
  absl::StatusOr<std::optional<SampleRow>> SampleRowFor(
      const internal::v1::SequenceStep& seq, int64_t logits_row)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Rank 0, after a step's forward: the prompt_logprobs of its scored
  // sequences (first_row[i]: sequence i's first logit row).
  absl::Status ScorePrompts(const internal::v1::StepRequest& request,
                            const std::vector<int64_t>& first_row,
                            internal::v1::StepResponse* response)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const WorkerServiceOptions options_;
  // Health answers from these, without waiting for a long Step or Load: a
  // busy worker is alive. `description_` is written once, before `ready_`.
  std::atomic<bool> ready_{false};
  std::atomic<int> rank_{-1};
  std::string description_;
  absl::Mutex mu_;
  std::unique_ptr<Loaded> loaded_ ABSL_GUARDED_BY(mu_);
  bool loading_ ABSL_GUARDED_BY(mu_) = false;
  std::string group_ ABSL_GUARDED_BY(mu_);  // the group it loads for
  absl::flat_hash_map<uint64_t, SeqState> seqs_ ABSL_GUARDED_BY(mu_);
};

}  // namespace octet
