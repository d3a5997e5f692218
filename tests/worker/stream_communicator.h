// A Communicator that behaves, for LlamaModel's bookkeeping, as NCCL's
// does on a GPU stream (parallel/nccl_communicator.h), around a real host
// communicator (shared memory or Gloo) and a CapturingBackend:
//  - its collectives are stream work: run through the backend, so they are
//    recorded in a capture and run again by every replay (capturable());
//  - their results are not for the host until Await(): the backend refuses
//    a host read or wait (CopyToHost, Synchronize, Sample) while any
//    collective, issued directly or by a replay, has not been awaited.
//
// Why: with NCCL the model must Await before every host read that follows
// collectives (or a dead peer hangs the read), and TP decode graphs carry
// their collectives inside the capture. Both are host bookkeeping that the
// CPU tests can check (tp_rank --stream_collectives): a missed Await fails
// the read here, and graphs with collectives must give the eager tokens.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "parallel/communicator.h"
#include "tests/worker/capturing_backend.h"

namespace octet::testing {

class StreamCommunicator : public Communicator {
 public:
  // `backend` must outlive this; its host-wait check is set to this one's.
  StreamCommunicator(CapturingBackend& backend,
                     std::unique_ptr<Communicator> host)
      : backend_(backend), host_(std::move(host)) {
    backend_.set_host_wait_check([this]() -> absl::Status {
      if (unawaited_ == 0) return absl::OkStatus();
      return absl::FailedPreconditionError(
          absl::StrCat("a host read after ", unawaited_,
                       " collective(s) that were not awaited"));
    });
  }
  ~StreamCommunicator() override { backend_.set_host_wait_check({}); }

  // Collectives run so far, whether issued or replayed.
  int64_t collectives() const { return collectives_; }

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  std::string Describe() const override {
    return "stream-emulating " + host_->Describe();
  }
  absl::Status AllReduceSum(float* data, int64_t count) override {
    return Enqueue([=, this] { return host_->AllReduceSum(data, count); });
  }
  absl::Status AllReduceSumBf16(void* data, int64_t count) override {
    return Enqueue([=, this] { return host_->AllReduceSumBf16(data, count); });
  }
  absl::Status AllReduceMax(float* data, int64_t count) override {
    return Enqueue([=, this] { return host_->AllReduceMax(data, count); });
  }
  absl::Status AllGather(const float* in, int64_t count, float* out) override {
    return Enqueue([=, this] { return host_->AllGather(in, count, out); });
  }
  absl::Status Broadcast(void* data, int64_t bytes, int root) override {
    return Enqueue([=, this] { return host_->Broadcast(data, bytes, root); });
  }
  absl::Status Barrier() override {
    if (absl::Status s = Enqueue([this] { return host_->Barrier(); });
        !s.ok()) {
      return s;
    }
    return Await();
  }
  absl::Status Await() override {
    unawaited_ = 0;
    return absl::OkStatus();
  }
  bool capturable() const override { return true; }

 private:
  template <typename F>
  absl::Status Enqueue(F collective) {
    return backend_.Enqueue([this, collective]() -> absl::Status {
      ++unawaited_;
      ++collectives_;
      return collective();
    });
  }

  CapturingBackend& backend_;
  std::unique_ptr<Communicator> host_;
  int64_t unawaited_ = 0;
  int64_t collectives_ = 0;
};

}  // namespace octet::testing
