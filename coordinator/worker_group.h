// The coordinator's tensor-parallel worker group: one `worker` process per
// rank (worker/worker_main.cc), spawned here on private Unix sockets, or
// already running elsewhere (`remote` addresses, reached with the group's
// shared token). The group serves the rendezvous store the ranks meet
// through, loads the model on every rank, and sends each step to all of
// them at once.
//
// A group that loses a rank fails as a whole: a watchdog notices a spawned
// worker's exit at once and a worker that stops answering its health check
// within `health_timeout`; every step in flight or later then ends with
// UNAVAILABLE. The coordinator replaces a failed group with a new one.
//
// Thread-safe: Step and Free may come from one thread while the watchdog
// runs; failed() from anywhere.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "octet/internal/v1/worker.grpc.pb.h"
#include "rpc/store.h"

namespace octet {

struct WorkerGroupOptions {
  int tp = 1;
  // Spawned workers: the `worker` program (its path).
  std::string worker_program;
  // Or already running workers, one HOST:PORT per rank (then nothing is
  // spawned), with their shared token.
  std::vector<std::string> remote;
  // Each rank's CUDA device when it runs on CUDA; empty: rank i on GPU i
  // (remote workers: their GPU 0).
  std::vector<int> gpus;
  std::string token;
  // The link to remote workers over TLS (rpc/tls.h), when `tls.ca` is
  // set: the workers' certificates must be signed by `tls.ca` and name the
  // host dialled; `cert_chain` identifies this coordinator to them and
  // serves the rendezvous store, which then takes only workers with a
  // certificate `tls.ca` signed. Empty: plaintext. Spawned workers never
  // use it (private Unix sockets, a loopback store).
  TlsConfig tls;
  // Where remote workers reach the rendezvous store (which then requires
  // the token): HOST:PORT on this machine, port 0 picking one. A wildcard
  // host (0.0.0.0) is sent as such; each worker dials the address its Load
  // call came from. Spawned workers use loopback.
  std::string rendezvous_listen = "127.0.0.1:0";
  // With remote workers: the host they dial for the store instead (when
  // set), e.g. this pod's address where a proxy or NAT hides the caller's.
  std::string rendezvous_host;
  // What every rank loads; rank, world size and rendezvous are set here.
  internal::v1::LoadRequest load;
  // Bounds: a worker to come up, the load, a step, a health check.
  absl::Duration start_timeout = absl::Seconds(30);
  absl::Duration load_timeout = absl::Minutes(30);
  absl::Duration step_timeout = absl::Minutes(10);
  absl::Duration health_timeout = absl::Seconds(2);
};

class WorkerGroup;

// Stops a worker group's start from another thread (the engine, when it
// is stopping): the start ends at once with CANCELLED, its calls to the
// workers cancelled and its spawned workers stopped. Thread-safe.
class StartCancel {
 public:
  void Cancel();

 private:
  friend class WorkerGroup;
  // The group being started, while it is (false: already cancelled).
  bool Attach(WorkerGroup* group);
  void Detach();
  absl::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  WorkerGroup* group_ ABSL_GUARDED_BY(mu_) = nullptr;
};

class WorkerGroup {
 public:
  // Load progress of each rank, as it comes (from the loading threads).
  using Progress =
      std::function<void(int rank, const internal::v1::LoadProgress&)>;

  // Starts (or connects to) every rank and loads the model; the first
  // failure, naming the rank, if any does not come up or load. `cancel`
  // (optional) can stop it meanwhile.
  static absl::StatusOr<std::unique_ptr<WorkerGroup>> Start(
      const WorkerGroupOptions& options, const Progress& progress,
      StartCancel* cancel = nullptr);
  ~WorkerGroup();  // stops spawned workers

  // One step on every rank: rank 0's answer (the sampled tokens).
  // UNAVAILABLE once the group has failed (see above), or when a rank does
  // not answer within step_timeout. While the ranks compute, `while_waiting`
  // (if any) runs on this thread every 50 ms: the caller's chance to take
  // other work meanwhile.
  absl::StatusOr<internal::v1::StepResponse> Step(
      const internal::v1::StepRequest& request,
      const std::function<void()>& while_waiting = nullptr);
  absl::Status Free(const std::vector<uint64_t>& seq_ids);

  // What rank 0 computes activations in, as its Load said (e.g. float32).
  const std::string& activation_dtype() const { return activation_dtype_; }
  // Why the group failed; OK while it serves.
  absl::Status failed() const;
  // Fails the group now (the first reason stays) and cancels the calls in
  // flight: a step waiting on a stuck rank returns at once. Thread-safe.
  void Abort(const absl::Status& why);
  int size() const { return static_cast<int>(stubs_.size()); }
  // Spawned workers' process ids (empty for remote workers).
  std::vector<pid_t> pids() const { return pids_; }
  // Where the group's rendezvous store listens ("host:port").
  const std::string& rendezvous_address() const {
    return rendezvous_->address();
  }

 private:
  explicit WorkerGroup(const WorkerGroupOptions& options) : options_(options) {}
  absl::Status Spawn();
  absl::Status Connect(const std::vector<std::string>& targets);
  absl::Status LoadAll(const Progress& progress);
  void Watch(int rank);
  // Why a remote worker may not answer, for the message that says so.
  std::string ConnectHint() const;
  // The store's address as the workers are told it.
  std::string RendezvousAddress() const;
  // A context for a call to a worker, with the token and a deadline.
  std::unique_ptr<grpc::ClientContext> Context(absl::Duration timeout) const;

  const WorkerGroupOptions options_;
  std::string socket_dir_;  // spawned workers' sockets (private: 0700)
  std::vector<pid_t> pids_;
  std::string activation_dtype_;  // set by LoadAll
  std::vector<std::unique_ptr<internal::v1::Worker::Stub>> stubs_;
  InMemoryStore store_;
  std::unique_ptr<RendezvousServer> rendezvous_;
  std::atomic<bool> stop_{false};
  std::vector<std::thread> watchdogs_;
  mutable absl::Mutex mu_;
  absl::Status failed_ ABSL_GUARDED_BY(mu_);
  std::vector<grpc::ClientContext*> in_flight_ ABSL_GUARDED_BY(mu_);
  std::vector<grpc::ClientContext*> health_checks_ ABSL_GUARDED_BY(mu_);
};

}  // namespace octet
