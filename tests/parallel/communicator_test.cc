// Collectives between real processes: the test serves a rendezvous store,
// starts one collective_rank process per rank (Gloo over loopback TCP) and
// checks how each ended. Also the single-rank communicator.
#include "parallel/communicator.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "parallel/store.h"
#include "tests/process_util.h"

namespace octet {
namespace {

// Starts `ranks` of a group of `size` and returns their exit codes (-1: did
// not end within `limit`, and was killed).
std::vector<int> RunGroup(int size, int ranks, const std::string& scenario,
                          absl::Duration limit, int timeout_ms = 10000) {
  InMemoryStore store;
  auto server = RendezvousServer::Start("127.0.0.1:0", &store);
  EXPECT_TRUE(server.ok()) << server.status();
  if (!server.ok()) return {};
  const std::string group =
      absl::StrCat(scenario, "-", ::getpid(), "-", size, "-", ranks);
  std::vector<std::vector<std::string>> commands;
  for (int r = 0; r < ranks; ++r) {
    commands.push_back(
        {testing::SiblingProgram("collective_rank"),
         "--store=" + (*server)->address(), absl::StrCat("--rank=", r),
         absl::StrCat("--size=", size), "--group=" + group,
         "--scenario=" + scenario, absl::StrCat("--timeout_ms=", timeout_ms)});
  }
  return testing::RunTogether(commands, limit);
}

TEST(GlooCommunicator, CollectivesAreExactOnTwoAndThreeRanks) {
  for (int n : {2, 3}) {
    const std::vector<int> codes =
        RunGroup(n, n, "collectives", absl::Seconds(60));
    EXPECT_EQ(codes, std::vector<int>(n, 0)) << n << " ranks";
  }
}

TEST(GlooCommunicator, ARankThatNeverArrivesIsATimeoutNotAHang) {
  // A group of 3 with only 2 started: both give up with DeadlineExceeded
  // within their 2 s timeout (checked by the helper).
  const std::vector<int> codes =
      RunGroup(3, 2, "absent", absl::Seconds(30), 2000);
  EXPECT_EQ(codes, std::vector<int>(2, 0));
}

TEST(GlooCommunicator, ARankThatDiesMidRunFailsTheOthers) {
  // Rank 1 exits between collectives; ranks 0 and 2 must get an error
  // within the 3 s timeout, not hang (the victim itself exits 0).
  const std::vector<int> codes = RunGroup(3, 3, "die", absl::Seconds(30), 3000);
  EXPECT_EQ(codes, std::vector<int>(3, 0));
}

TEST(GlooCommunicator, ARankThatStopsAnsweringTimesTheOthersOut) {
  // Rank 1 stays alive but silent for three timeouts: ranks 0 and 2 must
  // fail within their 2 s timeout (checked by the helper).
  const std::vector<int> codes =
      RunGroup(3, 3, "stall", absl::Seconds(30), 2000);
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

}  // namespace
}  // namespace octet
