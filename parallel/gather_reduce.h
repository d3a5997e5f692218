// Internal: communicators whose all-reduces are an all-gather followed by a
// local reduction, the same on every rank (Gloo, shared memory). For the
// small all-reduces of decoding (the FP8 absmax, one token's activations)
// latency is what counts, and one all-gather is one exchange instead of an
// all-reduce's two; the sum is added in TreeSum order (kernels/tree_sum.h),
// which no library all-reduce promises. Costs size() * count floats of
// memory per call.
#pragma once

#include <cstdint>
#include <vector>

#include "parallel/communicator.h"

namespace octet::parallel_internal {

class GatherReduceCommunicator : public Communicator {
 public:
  absl::Status AllReduceSum(float* data, int64_t count) final;
  absl::Status AllReduceMax(float* data, int64_t count) final;
  absl::Status AllGather(const float* in, int64_t count, float* out) final {
    return Gather(in, count, out, "AllGather");
  }

 protected:
  // out[r * count + i] = rank r's in[i]; `what` names the collective in
  // errors. count >= 0 is checked by the caller.
  virtual absl::Status GatherFloats(const float* in, int64_t count, float* out,
                                    const char* what) = 0;

 private:
  absl::Status Gather(const float* in, int64_t count, float* out,
                      const char* what);
  std::vector<float> gathered_;
};

}  // namespace octet::parallel_internal
