#include "parallel/nccl_communicator.h"

#include <nccl.h>

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "kernels/cuda/gemm_fallback.h"
#include "base/status_macros.h"

namespace octet {
namespace {

absl::Status NcclError(ncclResult_t r, const std::string& what) {
  return absl::UnavailableError(
      absl::StrCat(what, ": NCCL ", ncclGetErrorString(r)));
}

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, int rank, int size,
                   const NcclOptions& options, float* scratch)
      : comm_(comm),
        rank_(rank),
        size_(size),
        options_(options),
        scratch_(scratch) {}
  // Destroying a group with collectives in flight waits for them, which a
  // dead peer would make forever: they are awaited first, within the
  // timeout, and a group that fails that is aborted instead (by Await).
  ~NcclCommunicator() override {
    if (comm_ != nullptr) Await().IgnoreError();
    if (comm_ != nullptr) ncclCommDestroy(comm_);
    cudaFree(scratch_);
    cudaFree(gather_);
    for (float* p : retired_) cudaFree(p);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string Describe() const override {
    return absl::StrCat("nccl, rank ", rank_, " of ", size_,
                        " on cuda:", options_.device);
  }

  // NCCL's own sum adds in its order (ring, tree or in-switch), which the
  // rule of communicator.h does not allow: every rank's values are
  // gathered, then added on every rank in TreeSum order (CudaTreeSum), as
  // the CPU communicators add them.
  absl::Status AllReduceSum(float* data, int64_t count) override {
    OCTET_RETURN_IF_ERROR(Usable("AllReduceSum", count));
    if (size_ == 1 || count == 0) return absl::OkStatus();  // the identity
    OCTET_ASSIGN_OR_RETURN(float* parts, GatherScratch(size_ * count));
    OCTET_RETURN_IF_ERROR(Collective("AllReduceSum", count, [&] {
      return ncclAllGather(data, parts, count, ncclFloat, comm_,
                           options_.stream);
    }));
    return CudaTreeSum(parts, size_, count, count, data, options_.stream);
  }
  absl::Status AllReduceSumBf16(void* data, int64_t count) override {
    return Collective("AllReduceSumBf16", count, [&] {
      return ncclAllReduce(data, data, count, ncclBfloat16, ncclSum, comm_,
                           options_.stream);
    });
  }
  absl::Status AllReduceMax(float* data, int64_t count) override {
    return Collective("AllReduceMax", count, [&] {
      return ncclAllReduce(data, data, count, ncclFloat, ncclMax, comm_,
                           options_.stream);
    });
  }
  absl::Status AllGather(const float* in, int64_t count, float* out) override {
    return Collective("AllGather", count, [&] {
      return ncclAllGather(in, out, count, ncclFloat, comm_, options_.stream);
    });
  }
  absl::Status Broadcast(void* data, int64_t bytes, int root) override {
    if (root < 0 || root >= size_) {
      return absl::InvalidArgumentError(
          absl::StrCat("Broadcast: root ", root, " of ", size_));
    }
    return Collective("Broadcast", bytes, [&] {
      return ncclBroadcast(data, data, bytes, ncclUint8, root, comm_,
                           options_.stream);
    });
  }
  absl::Status Barrier() override {
    OCTET_RETURN_IF_ERROR(Collective("Barrier", 1, [&] {
      return ncclAllReduce(scratch_, scratch_, 1, ncclFloat, ncclSum, comm_,
                           options_.stream);
    }));
    return Await();
  }

  // Spins (yielding) on the stream rather than sleeping: the step's end is
  // latency that every token pays, and this thread has nothing else to do.
  absl::Status Await() override {
    if (broken_) {
      return absl::FailedPreconditionError(
          "Await: the communicator failed earlier");
    }
    const absl::Time deadline = absl::Now() + options_.timeout;
    while (true) {
      OCTET_RETURN_IF_ERROR(AsyncError("Await"));
      const cudaError_t q = cudaStreamQuery(options_.stream);
      if (q == cudaSuccess) return absl::OkStatus();
      if (q != cudaErrorNotReady) {
        return Break(absl::InternalError(absl::StrCat(
            "Await on rank ", rank_, ": CUDA ", cudaGetErrorString(q))));
      }
      if (absl::Now() > deadline) {
        return Break(absl::DeadlineExceededError(absl::StrCat(
            "collectives on rank ", rank_, " did not complete within ",
            absl::FormatDuration(options_.timeout),
            " (a peer died or stopped answering)")));
      }
      std::this_thread::yield();
    }
  }
  bool capturable() const override { return true; }

 private:
  // Enqueues `op` on the stream and returns once NCCL has taken it (a
  // non-blocking communicator may still be enqueueing when `op` returns:
  // ncclInProgress), without waiting for it to run: Await does that.
  template <typename Op>
  absl::Status Collective(const char* what, int64_t count, Op op) {
    OCTET_RETURN_IF_ERROR(Usable(what, count));
    if (count == 0) return absl::OkStatus();
    const ncclResult_t r = op();
    if (r != ncclSuccess && r != ncclInProgress) {
      return Break(NcclError(r, absl::StrCat(what, " on rank ", rank_)));
    }
    const absl::Time deadline = absl::Now() + options_.timeout;
    while (true) {
      ncclResult_t async = ncclInProgress;
      ncclCommGetAsyncError(comm_, &async);
      if (async == ncclSuccess) return absl::OkStatus();
      if (async != ncclInProgress) {
        return Break(NcclError(async, absl::StrCat(what, " on rank ", rank_)));
      }
      if (absl::Now() > deadline) {
        return Break(absl::DeadlineExceededError(absl::StrCat(
            what, " on rank ", rank_, ": NCCL did not take it within ",
            absl::FormatDuration(options_.timeout))));
      }
      std::this_thread::yield();
    }
  }

  // Whether a collective of `count` values may be issued now.
  absl::Status Usable(const char* what, int64_t count) const {
    if (count < 0) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": count < 0"));
    }
    if (broken_) {
      return absl::FailedPreconditionError(
          absl::StrCat(what, ": the communicator failed earlier"));
    }
    return absl::OkStatus();
  }

  // AllReduceSum's gathered values: `floats` of device memory, grown on
  // demand (never while the stream is being captured: a capture names the
  // buffer it saw, so outgrown ones are kept until the communicator ends).
  absl::StatusOr<float*> GatherScratch(int64_t floats) {
    if (size_ > kMaxTreeSumParts) {
      return absl::InvalidArgumentError(
          absl::StrCat("AllReduceSum: TreeSum adds at most ", kMaxTreeSumParts,
                       " ranks, not ", size_));
    }
    if (floats <= gather_floats_) return gather_;
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(options_.stream, &capturing) != cudaSuccess ||
        capturing != cudaStreamCaptureStatusNone) {
      return absl::FailedPreconditionError(absl::StrCat(
          "AllReduceSum of ", floats / size_,
          " values while capturing: its scratch must grow first (run the "
          "same shapes once without capture)"));
    }
    float* grown = nullptr;
    if (cudaMalloc(reinterpret_cast<void**>(&grown),
                   static_cast<size_t>(floats) * sizeof(float)) !=
        cudaSuccess) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "AllReduceSum: no device memory for ", floats, " gathered values"));
    }
    if (gather_ != nullptr) retired_.push_back(gather_);
    gather_ = grown;
    gather_floats_ = floats;
    return gather_;
  }

  // The group's asynchronous error (a peer's failure NCCL noticed), if any.
  absl::Status AsyncError(const char* what) {
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(comm_, &async);
    if (async == ncclSuccess || async == ncclInProgress) {
      return absl::OkStatus();
    }
    return Break(NcclError(async, absl::StrCat(what, " on rank ", rank_)));
  }

  // Marks the communicator broken (aborted, not destroyed, at the end:
  // ncclCommAbort also ends kernels stuck waiting for a dead peer) and
  // returns `s`.
  absl::Status Break(absl::Status s) {
    if (!broken_) {
      broken_ = true;
      ncclCommAbort(comm_);
      comm_ = nullptr;
    }
    return s;
  }

  ncclComm_t comm_;
  const int rank_, size_;
  const NcclOptions options_;
  float* scratch_;           // one device float for Barrier
  float* gather_ = nullptr;  // AllReduceSum's (GatherScratch)
  int64_t gather_floats_ = 0;
  std::vector<float*> retired_;
  bool broken_ = false;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> NewNcclCommunicator(
    KeyValueStore& store, int rank, int size, const NcclOptions& options) {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat("NCCL: rank ", rank, " is not in [0, ", size, ")"));
  }
  if (cudaSetDevice(options.device) != cudaSuccess) {
    return absl::UnavailableError(
        absl::StrCat("NCCL: no CUDA device ", options.device));
  }
  const absl::Time deadline = absl::Now() + options.timeout;
  const std::string key = options.group + "/nccl_unique_id";
  ncclUniqueId id;
  if (rank == 0) {
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess) return NcclError(r, "ncclGetUniqueId");
    absl::Status s =
        store.Set(key, std::string(id.internal, sizeof(id.internal)));
    if (!s.ok()) return s;
  } else {
    absl::StatusOr<std::string> v = store.Get(key, deadline);
    if (!v.ok()) return v.status();
    if (v->size() != sizeof(id.internal)) {
      return absl::DataLossError("NCCL: malformed unique id in the store");
    }
    std::copy(v->begin(), v->end(), id.internal);
  }
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&comm, size, id, rank, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    return NcclError(r, "ncclCommInitRankConfig");
  }
  while (true) {
    ncclResult_t async = ncclInProgress;
    ncclCommGetAsyncError(comm, &async);
    if (async == ncclSuccess) break;
    if (async != ncclInProgress) {
      ncclCommAbort(comm);
      return NcclError(async, absl::StrCat("NCCL init on rank ", rank));
    }
    if (absl::Now() > deadline) {
      ncclCommAbort(comm);
      return absl::DeadlineExceededError(absl::StrCat(
          "NCCL init on rank ", rank, ": the group of ", size,
          " did not form within ", absl::FormatDuration(options.timeout)));
    }
    absl::SleepFor(absl::Milliseconds(1));
  }
  float* scratch = nullptr;
  if (cudaMalloc(reinterpret_cast<void**>(&scratch), sizeof(float)) !=
      cudaSuccess) {
    ncclCommDestroy(comm);
    return absl::ResourceExhaustedError("NCCL: no device memory for scratch");
  }
  return std::unique_ptr<Communicator>(
      new NcclCommunicator(comm, rank, size, options, scratch));
}

}  // namespace octet
