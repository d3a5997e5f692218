#include "parallel/nccl_communicator.h"

#include <nccl.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

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
  ~NcclCommunicator() override {
    if (broken_) {
      ncclCommAbort(comm_);
    } else {
      ncclCommDestroy(comm_);
    }
    cudaFree(scratch_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string Describe() const override {
    return absl::StrCat("nccl, rank ", rank_, " of ", size_,
                        " on cuda:", options_.device);
  }

  absl::Status AllReduceSum(float* data, int64_t count) override {
    return Collective("AllReduceSum", count, [&] {
      return ncclAllReduce(data, data, count, ncclFloat, ncclSum, comm_,
                           options_.stream);
    });
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
    return Collective("Barrier", 1, [&] {
      return ncclAllReduce(scratch_, scratch_, 1, ncclFloat, ncclSum, comm_,
                           options_.stream);
    });
  }

 private:
  // Enqueues `op` and waits, polling, until it completed on the stream, NCCL
  // reported an error, or the timeout passed (then the group is aborted).
  template <typename Op>
  absl::Status Collective(const char* what, int64_t count, Op op) {
    if (count < 0) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": count < 0"));
    }
    if (broken_) {
      return absl::FailedPreconditionError(
          absl::StrCat(what, ": the communicator failed earlier"));
    }
    if (count == 0) return absl::OkStatus();
    const std::string where = absl::StrCat(what, " on rank ", rank_);
    const absl::Time deadline = absl::Now() + options_.timeout;
    ncclResult_t r = op();
    if (r != ncclSuccess && r != ncclInProgress) {
      broken_ = true;
      return NcclError(r, where);
    }
    while (true) {
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      if (async != ncclSuccess && async != ncclInProgress) {
        broken_ = true;
        return NcclError(async, where);
      }
      if (async == ncclSuccess) {
        const cudaError_t q = cudaStreamQuery(options_.stream);
        if (q == cudaSuccess) return absl::OkStatus();
        if (q != cudaErrorNotReady) {
          broken_ = true;
          return absl::InternalError(
              absl::StrCat(where, ": CUDA ", cudaGetErrorString(q)));
        }
      }
      if (absl::Now() > deadline) {
        broken_ = true;
        return absl::DeadlineExceededError(
            absl::StrCat(where, " did not complete within ",
                         absl::FormatDuration(options_.timeout),
                         " (a peer died or stopped answering)"));
      }
      absl::SleepFor(absl::Microseconds(20));
    }
  }

  ncclComm_t comm_;
  const int rank_, size_;
  const NcclOptions options_;
  float* scratch_;  // one device float for Barrier
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
