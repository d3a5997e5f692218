// The NCCL communicator on one GPU (a 1-rank group): every collective on
// device memory gives the exact expected values, and a group whose second
// rank never comes ends in DeadlineExceeded, not a hang. Skips without a
// supported CUDA device.
#include "parallel/nccl_communicator.h"

#include <gtest/gtest.h>

#include <vector>

#include "absl/time/clock.h"
#include "parallel/store.h"
#include "tests/kernels/cuda_test_util.h"
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
