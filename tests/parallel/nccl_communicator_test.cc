// The NCCL communicator on one GPU (a 1-rank group): every collective on
// device memory gives the exact expected values, and a group whose second
// rank never comes ends in DeadlineExceeded, not a hang. With 2 or more
// GPUs, sums add the ranks in TreeSum order. Skips without a supported
// CUDA device.
#include "parallel/nccl_communicator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "kernels/cuda/device.h"
#include "base/status_macros.h"
#include "kernels/tree_sum.h"
#include "rpc/store.h"
#include "tests/kernels/cuda_test_util.h"
#include "tests/kernels/test_data.h"
#include "tests/status_util.h"

namespace octet {
namespace {

TEST(NcclCommunicator, OneRankCollectivesOnTheDevice) {
  OCTET_REQUIRE_CUDA_DEVICE();
  InMemoryStore store;
  NcclOptions o;
  o.group = "one";
  auto comm = NewNcclCommunicator(store, 0, 1, o);
  ASSERT_TRUE(comm.ok()) << comm.status();
  const std::vector<float> x = {1.5f, -2.0f, 3.0f, 448.0f};
  testing::DeviceBuffer d(64), out(64);
  ASSERT_TRUE(testing::CopyToDevice(x, d.get()));
  OCTET_ASSERT_OK((*comm)->AllReduceSum(d.get<float>(), 4));
  OCTET_ASSERT_OK((*comm)->AllReduceMax(d.get<float>(), 4));
  // Enqueued on the stream: the host reads after Await.
  OCTET_ASSERT_OK((*comm)->Await());
  EXPECT_EQ(testing::CopyToHost<float>(d.get(), 4), x);
  OCTET_ASSERT_OK((*comm)->AllGather(d.get<float>(), 4, out.get<float>()));
  OCTET_ASSERT_OK((*comm)->Await());
  EXPECT_EQ(testing::CopyToHost<float>(out.get(), 4), x);
  OCTET_ASSERT_OK((*comm)->Broadcast(d.get(), 16, 0));
  OCTET_ASSERT_OK((*comm)->Await());
  EXPECT_EQ(testing::CopyToHost<float>(d.get(), 4), x);
  OCTET_EXPECT_OK((*comm)->Barrier());
  EXPECT_EQ((*comm)->Broadcast(d.get(), 16, 1).code(),
            absl::StatusCode::kInvalidArgument);
}

// Between GPUs (one rank each, as threads of this process): AllReduceSum
// adds the ranks' values in TreeSum order (kernels/tree_sum.h), the bits
// the CPU communicators give, which NCCL's own sum does not promise.
TEST(NcclCommunicator, SumsAddTheRanksInTreeSumOrder) {
  OCTET_REQUIRE_CUDA_DEVICE();
  const int gpus = CudaDeviceCount();
  if (gpus < 2) {
    GTEST_SKIP() << "needs 2 GPUs, this machine has " << gpus
                 << " (NCCL refuses two ranks on one GPU)";
  }
  const int size = std::min(gpus, 8);
  constexpr int64_t n = 4099;
  std::vector<std::vector<float>> values(size);
  for (int r = 0; r < size; ++r) {
    values[r] = testing::MixedFloats(n, 70 + r);
    for (float& v : values[r]) {
      if (std::isnan(v)) v = 0.5f;
    }
  }
  InMemoryStore store;
  std::vector<std::vector<float>> got(size);
  std::vector<absl::Status> status(size);
  std::vector<std::thread> ranks;
  for (int r = 0; r < size; ++r) {
    ranks.emplace_back([&, r] {
      status[r] = [&]() -> absl::Status {
        NcclOptions o;
        o.group = "sum";
        o.device = r;
        OCTET_RETURN_IF_ERROR(BindCudaDevice(r));
        OCTET_ASSIGN_OR_RETURN(auto comm,
                               NewNcclCommunicator(store, r, size, o));
        testing::DeviceBuffer d(n * sizeof(float));
        if (!testing::CopyToDevice(values[r], d.get())) {
          return absl::InternalError("copy to the device");
        }
        OCTET_RETURN_IF_ERROR(comm->AllReduceSum(d.get<float>(), n));
        OCTET_RETURN_IF_ERROR(comm->Await());
        got[r] = testing::CopyToHost<float>(d.get(), n);
        return absl::OkStatus();
      }();
    });
  }
  for (std::thread& t : ranks) t.join();
  std::vector<float> parts;
  for (const auto& v : values) parts.insert(parts.end(), v.begin(), v.end());
  TreeSum(parts.data(), size, n, n);
  parts.resize(n);
  for (int r = 0; r < size; ++r) {
    OCTET_ASSERT_OK(status[r]);
    ASSERT_EQ(got[r].size(), parts.size()) << "rank " << r;
    EXPECT_EQ(std::memcmp(got[r].data(), parts.data(), n * sizeof(float)), 0)
        << "rank " << r << " of " << size;
  }
}

TEST(NcclCommunicator, AMissingRankIsATimeout) {
  OCTET_REQUIRE_CUDA_DEVICE();
  InMemoryStore store;
  NcclOptions o;
  o.group = "missing";
  o.timeout = absl::Seconds(3);
  const absl::Time start = absl::Now();
  auto comm = NewNcclCommunicator(store, 0, 2, o);  // rank 1 never comes
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kDeadlineExceeded)
      << comm.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
}

}  // namespace
}  // namespace octet
