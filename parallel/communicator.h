// Collectives between the ranks of one tensor-parallel group, behind one
// interface (docs/design.md): Gloo over TCP or shared memory for CPU ranks,
// single-rank for TP=1 (no work), and NCCL for GPU ranks.
//
// Rules for every implementation:
//  - Every rank calls the same collectives in the same order with the same
//    counts; `data` is memory of the rank's backend (host memory for CPU
//    ranks).
//  - One thread at a time per communicator (the worker's forward thread).
//  - A collective's results are ready for the device work issued after it,
//    but for the host only after Await() (NCCL enqueues on the stream and
//    returns at once; the others complete before returning).
//  - A collective that cannot complete — a peer died, stopped answering, or
//    never joined — returns an error (DeadlineExceeded or Unavailable) within
//    the communicator's timeout instead of blocking forever. After an error
//    the communicator is broken: the group is rebuilt, not reused.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "rpc/store.h"

namespace octet {

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string Describe() const = 0;

  // In place over `count` binary32 values: the sum, or the fmaxf maximum
  // (a NaN loses to any number, as in absmax). The sum adds the ranks'
  // values in TreeSum order over ranks 0 .. size() - 1 (kernels/tree_sum.h),
  // the same bits on every rank, so that row-parallel sums do not change
  // with the TP degree (every implementation, NCCL's included: it gathers
  // and adds on the device, since NCCL's own sum has its own order).
  virtual absl::Status AllReduceSum(float* data, int64_t count) = 0;
  virtual absl::Status AllReduceMax(float* data, int64_t count) = 0;
  // In place over `count` bfloat16 values (GPU ranks' embeddings, where
  // one rank holds each value and the others add zeros, so any order is
  // exact; row-parallel outputs are summed in binary32 instead): each
  // rank's values widened to binary32, summed as AllReduceSum sums, then
  // rounded once to bfloat16. The default does exactly that through host
  // memory, so `data` must be host memory for it; NCCL overrides it with
  // its own bfloat16 sum (its order and roundings).
  virtual absl::Status AllReduceSumBf16(void* data, int64_t count);
  // out[r * count + i] = rank r's in[i] (out holds size() * count values).
  virtual absl::Status AllGather(const float* in, int64_t count,
                                 float* out) = 0;
  // Rank `root`'s `bytes` bytes at `data` to every rank's `data`.
  virtual absl::Status Broadcast(void* data, int64_t bytes, int root) = 0;
  virtual absl::Status Barrier() = 0;

  // Waits until every collective issued so far, and the device work before
  // it, has completed; returns the group's error if one failed, or
  // DeadlineExceeded (the group aborted) if they did not complete within
  // the timeout. Call it before reading results on the host, and before any
  // host wait on the device stream that follows collectives: a wait that
  // NCCL's kernels would block forever if a peer died is then bounded.
  // Communicators that complete each collective before returning (CPU,
  // staged) have nothing to wait for.
  virtual absl::Status Await() { return absl::OkStatus(); }
  // Whether collectives may be recorded in the backend's captures
  // (Backend::BeginCapture) and replayed with them: true for NCCL, whose
  // collectives are stream work; not for those that wait on the host.
  virtual bool capturable() const { return false; }
};

// TP = 1: every collective is the identity.
std::unique_ptr<Communicator> NewSingleRankCommunicator();

struct GlooOptions {
  // Name of the group: the prefix of its keys in the store, so that a
  // restarted group (or another model) does not read stale addresses.
  std::string group = "octet";
  // Host name or address this rank listens on for its peers.
  std::string hostname = "127.0.0.1";
  // Bound on connecting and on every collective.
  absl::Duration timeout = absl::Seconds(60);
};

// Connects rank `rank` of `size` over TCP, exchanging addresses through
// `store` (which need only live until this returns). Fails with
// DeadlineExceeded naming the missing rank when one does not arrive within
// options.timeout.
absl::StatusOr<std::unique_ptr<Communicator>> NewGlooCommunicator(
    KeyValueStore& store, int rank, int size, const GlooOptions& options);

// How CPU ranks exchange data.
enum class CpuTransport {
  kGloo,  // TCP: ranks on any hosts
  kShm,   // shared memory: ranks on one host (parallel/shm_communicator.h)
};

// The transport a flag names ("gloo" or "shm"); InvalidArgument naming it
// otherwise.
absl::StatusOr<CpuTransport> ParseCpuTransport(absl::string_view name);

// A group of CPU ranks over `transport`. `hostname`: where this rank
// listens for its Gloo peers (GlooOptions::hostname).
absl::StatusOr<std::unique_ptr<Communicator>> NewCpuCommunicator(
    KeyValueStore& store, int rank, int size, CpuTransport transport,
    const std::string& group, absl::Duration timeout,
    const std::string& hostname = "127.0.0.1");
// The same, with the transport as a flag names it.
absl::StatusOr<std::unique_ptr<Communicator>> NewCpuCommunicator(
    KeyValueStore& store, int rank, int size, absl::string_view transport,
    const std::string& group, absl::Duration timeout,
    const std::string& hostname = "127.0.0.1");

}  // namespace octet
