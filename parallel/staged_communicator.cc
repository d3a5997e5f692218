#include "parallel/staged_communicator.h"

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace octet {
namespace {

class StagedCommunicator : public Communicator {
 public:
  StagedCommunicator(Backend& backend, std::unique_ptr<Communicator> host)
      : backend_(backend), host_(std::move(host)) {}

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  std::string Describe() const override {
    return absl::StrCat(host_->Describe(), ", staged from ",
                        backend_.Describe());
  }

  absl::Status AllReduceSum(float* data, int64_t count) override {
    return InPlace(data, count * sizeof(float), [&](void* host) {
      return host_->AllReduceSum(static_cast<float*>(host), count);
    });
  }
  absl::Status AllReduceSumBf16(void* data, int64_t count) override {
    return InPlace(data, count * 2, [&](void* host) {
      return host_->AllReduceSumBf16(host, count);
    });
  }
  absl::Status AllReduceMax(float* data, int64_t count) override {
    return InPlace(data, count * sizeof(float), [&](void* host) {
      return host_->AllReduceMax(static_cast<float*>(host), count);
    });
  }
  absl::Status AllGather(const float* in, int64_t count, float* out) override {
    if (count < 0) return absl::InvalidArgumentError("AllGather: count < 0");
    // One staging buffer: this rank's part, then everyone's after it.
    const size_t bytes = count * sizeof(float);
    staging_.resize(bytes * (1 + size()));
    float* host_in = reinterpret_cast<float*>(staging_.data());
    float* host_out = host_in + count;
    OCTET_RETURN_IF_ERROR(backend_.CopyToHost(host_in, in, bytes));
    OCTET_RETURN_IF_ERROR(host_->AllGather(host_in, count, host_out));
    return backend_.CopyToDevice(out, host_out, bytes * size());
  }
  absl::Status Broadcast(void* data, int64_t bytes, int root) override {
    return InPlace(data, bytes, [&](void* host) {
      return host_->Broadcast(host, bytes, root);
    });
  }
  absl::Status Barrier() override { return host_->Barrier(); }

 private:
  // Copies `bytes` at `data` to the host, runs `collective` there, copies
  // the result back.
  template <typename F>
  absl::Status InPlace(void* data, int64_t bytes, F collective) {
    if (bytes < 0) return absl::InvalidArgumentError("collective: count < 0");
    staging_.resize(bytes);
    OCTET_RETURN_IF_ERROR(backend_.CopyToHost(staging_.data(), data, bytes));
    OCTET_RETURN_IF_ERROR(collective(staging_.data()));
    return backend_.CopyToDevice(data, staging_.data(), bytes);
  }

  Backend& backend_;
  std::unique_ptr<Communicator> host_;
  std::vector<uint8_t> staging_;
};

}  // namespace

std::unique_ptr<Communicator> NewStagedCommunicator(
    Backend& backend, std::unique_ptr<Communicator> host) {
  return std::make_unique<StagedCommunicator>(backend, std::move(host));
}

}  // namespace octet
