// Collectives between real processes: the test serves a rendezvous store,
// starts one collective_rank process per rank (Gloo over loopback TCP, or
// shared memory) and checks how each ended. Also the single-rank
// communicator.
#include "parallel/communicator.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "parallel/shm_communicator.h"
#include "rpc/store.h"
#include "tests/process_util.h"

namespace octet {
namespace {

// Starts `ranks` of a group of `size` and returns their exit codes (-1: did
// not end within `limit`, and was killed).
std::vector<int> RunGroup(const std::string& transport, int size, int ranks,
                          const std::string& scenario, absl::Duration limit,
                          int timeout_ms = 10000) {
  InMemoryStore store;
  auto server = RendezvousServer::Start("127.0.0.1:0", &store);
  EXPECT_TRUE(server.ok()) << server.status();
  if (!server.ok()) return {};
  const std::string group = absl::StrCat(transport, "-", scenario, "-",
                                         ::getpid(), "-", size, "-", ranks);
  std::vector<std::vector<std::string>> commands;
  for (int r = 0; r < ranks; ++r) {
    commands.push_back(
        {testing::SiblingProgram("collective_rank"),
         "--store=" + (*server)->address(), absl::StrCat("--rank=", r),
         absl::StrCat("--size=", size), "--group=" + group,
         "--scenario=" + scenario, absl::StrCat("--timeout_ms=", timeout_ms),
         "--transport=" + transport});
  }
  return testing::RunTogether(commands, limit);
}

// The same scenarios for each transport of CPU ranks, and for shared memory
// staged from a backend's memory (the transport of several GPU ranks on one
// GPU; here the CPU backend's).
class CommunicatorTest : public ::testing::TestWithParam<std::string> {};

INSTANTIATE_TEST_SUITE_P(Transports, CommunicatorTest,
                         ::testing::Values("gloo", "shm", "shm+staged"),
                         [](const auto& info) {
                           std::string name = info.param;
                           std::replace(name.begin(), name.end(), '+', '_');
                           return name;
                         });

TEST_P(CommunicatorTest, CollectivesAreExactOnTwoThreeAndFourRanks) {
  for (int n : {2, 3, 4}) {
    const std::vector<int> codes =
        RunGroup(GetParam(), n, n, "collectives", absl::Seconds(60));
    EXPECT_EQ(codes, std::vector<int>(n, 0)) << n << " ranks";
  }
}

TEST_P(CommunicatorTest, ARankThatNeverArrivesIsATimeoutNotAHang) {
  // A group of 3 with only 2 started: both give up with DeadlineExceeded
  // within their 2 s timeout (checked by the helper).
  const std::vector<int> codes =
      RunGroup(GetParam(), 3, 2, "absent", absl::Seconds(30), 2000);
  EXPECT_EQ(codes, std::vector<int>(2, 0));
}

TEST_P(CommunicatorTest, ARankThatDiesMidRunFailsTheOthers) {
  // Rank 1 exits between collectives; ranks 0 and 2 must get Unavailable
  // well within the 3 s timeout, not hang (the victim itself exits 0).
  const std::vector<int> codes =
      RunGroup(GetParam(), 3, 3, "die", absl::Seconds(30), 3000);
  EXPECT_EQ(codes, std::vector<int>(3, 0));
}

TEST_P(CommunicatorTest, ARankThatStopsAnsweringTimesTheOthersOut) {
  // Rank 1 stays alive but silent for three timeouts: ranks 0 and 2 must
  // fail within their 2 s timeout (checked by the helper).
  const std::vector<int> codes =
      RunGroup(GetParam(), 3, 3, "stall", absl::Seconds(30), 2000);
  EXPECT_EQ(codes, std::vector<int>(3, 0));
}

TEST(SingleRankCommunicator, CollectivesAreTheIdentity) {
  auto comm = NewSingleRankCommunicator();
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->size(), 1);
  std::vector<float> x = {1.5f, -2.0f, NAN};
  ASSERT_TRUE(comm->AllReduceSum(x.data(), 3).ok());
  ASSERT_TRUE(comm->AllReduceMax(x.data(), 3).ok());
  EXPECT_EQ(x[0], 1.5f);
  EXPECT_TRUE(std::isnan(x[2]));
  std::vector<float> out(3);
  ASSERT_TRUE(comm->AllGather(x.data(), 2, out.data()).ok());
  EXPECT_EQ(out[1], -2.0f);
  char c = 'a';
  EXPECT_TRUE(comm->Broadcast(&c, 1, 0).ok());
  EXPECT_EQ(comm->Broadcast(&c, 1, 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(comm->AllReduceSum(x.data(), -1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(comm->Barrier().ok());
}

TEST(GlooCommunicator, BadRankIsAnError) {
  InMemoryStore store;
  EXPECT_EQ(NewGlooCommunicator(store, 2, 2, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(NewGlooCommunicator(store, -1, 2, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ShmCommunicator, BadOptionsAreErrors) {
  InMemoryStore store;
  EXPECT_EQ(NewShmCommunicator(store, 2, 2, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(NewShmCommunicator(store, 0, 65, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      NewShmCommunicator(store, 0, 2, {.slot_bytes = 100}).status().code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(NewShmCommunicator(store, 0, 2, {.timeout = absl::ZeroDuration()})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ShmCommunicator, OneRankWorksInProcess) {
  InMemoryStore store;
  auto comm = NewShmCommunicator(store, 0, 1,
                                 {.group = absl::StrCat("one-", ::getpid())});
  ASSERT_TRUE(comm.ok()) << comm.status();
  std::vector<float> x = {1.0f, 2.0f};
  ASSERT_TRUE((*comm)->AllReduceSum(x.data(), 2).ok());
  EXPECT_EQ(x, (std::vector<float>{1.0f, 2.0f}));
  EXPECT_TRUE((*comm)->Barrier().ok());
}

}  // namespace
}  // namespace octet
