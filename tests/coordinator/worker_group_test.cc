// The coordinator's worker group (coordinator/worker_group.h) with real
// `worker` processes: a TP = 2 group starts, reports load progress and
// steps; a worker killed with SIGKILL, or stopped (SIGSTOP), fails the group
// within 5 s with UNAVAILABLE, also for the step in flight; a model that
// does not load is an error naming the rank. Remote workers (TCP, a shared
// token, Gloo between them, the rendezvous store on a wildcard address)
// step like spawned ones, and refuse a coordinator without the token.
#include "coordinator/worker_group.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "model/synthetic.h"
#include "tests/process_util.h"

namespace octet {
namespace {

namespace fs = std::filesystem;
namespace rpc = internal::v1;

class WorkerGroupTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() /
                        absl::StrCat("octet_group_", ::getpid()));
    ASSERT_TRUE(WriteSyntheticCheckpoint(*SyntheticPreset("tiny"), {.seed = 4},
                                         (*dir_ / "tiny").string())
                    .ok());
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }

  static WorkerGroupOptions Options(int tp) {
    WorkerGroupOptions o;
    o.tp = tp;
    o.worker_program = testing::SiblingProgram("worker");
    o.load.set_model_dir((*dir_ / "tiny").string());
    o.load.set_quantization(rpc::QUANTIZATION_FP8);
    o.load.set_transport(rpc::TRANSPORT_SHM);
    o.load.set_device(rpc::DEVICE_CPU);
    o.load.set_kv_blocks(32);
    o.load.set_kv_block_size(8);
    o.load.set_threads(1);
    o.load.set_collective_timeout_ms(30000);
    return o;
  }

  // One greedy step of a 3-token prompt (sequence `id`, block `block`).
  static rpc::StepRequest Prefill(uint64_t id, int32_t block) {
    rpc::StepRequest r;
    rpc::SequenceStep* s = r.add_seqs();
    s->set_seq_id(id);
    for (int32_t t : {1, 50, 60}) s->add_tokens(t);
    s->add_block_table(block);
    s->set_sample(true);
    s->mutable_sampling()->set_top_p(1.0f);
    s->mutable_sampling()->set_repetition_penalty(1.0f);
    return r;
  }

  static fs::path* dir_;
};

fs::path* WorkerGroupTest::dir_ = nullptr;

TEST_F(WorkerGroupTest, StartsLoadsWithProgressAndSteps) {
  absl::Mutex mu;
  std::vector<int> messages(2, 0);
  auto group =
      WorkerGroup::Start(Options(2), [&](int rank, const rpc::LoadProgress& p) {
        absl::MutexLock lock(&mu);
        ++messages[rank];
        EXPECT_LE(p.done(), p.total());
      });
  ASSERT_TRUE(group.ok()) << group.status();
  EXPECT_GE(messages[0], 2);  // one per layer at least
  EXPECT_GE(messages[1], 2);
  auto step = (*group)->Step(Prefill(1, 0));
  ASSERT_TRUE(step.ok()) << step.status();
  ASSERT_EQ(step->tokens_size(), 1);
  EXPECT_EQ(step->tokens(0).seq_id(), 1u);
  EXPECT_TRUE(step->tokens(0).token() >= 0 && step->tokens(0).token() < 512);
  EXPECT_TRUE((*group)->Free({1}).ok());
  // A malformed step (a block that does not exist) is refused by every rank
  // alike and leaves the group serving.
  EXPECT_EQ((*group)->Step(Prefill(2, 999)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE((*group)->failed().ok());
  EXPECT_TRUE((*group)->Step(Prefill(3, 1)).ok());
}

// A spawned group's store listens on loopback, where any local process can
// reach it: it serves only its own workers, which learn its token in Load.
TEST_F(WorkerGroupTest, ASpawnedGroupsStoreServesOnlyItsWorkers) {
  auto group = WorkerGroup::Start(Options(2), nullptr);
  ASSERT_TRUE(group.ok()) << group.status();
  GrpcStore stranger((*group)->rendezvous_address());
  EXPECT_EQ(stranger.Set("k", std::string(1 << 10, 'x')).code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(stranger.Get("k", absl::Now() + absl::Seconds(1)).status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE((*group)->Step(Prefill(1, 0)).ok());  // its workers met there
}

TEST_F(WorkerGroupTest, RemoteWorkersNeedTheTokenAndStepLikeSpawnedOnes) {
  // The reference: a spawned group's first token (a token given to a
  // spawned group is not asked of its workers, which have none).
  int32_t spawned_token = -1;
  {
    WorkerGroupOptions spawned = Options(2);
    spawned.token = "group-token";
    auto group = WorkerGroup::Start(spawned, nullptr);
    ASSERT_TRUE(group.ok()) << group.status();
    EXPECT_EQ((*group)->activation_dtype(), "float32");
    auto step = (*group)->Step(Prefill(1, 0));
    ASSERT_TRUE(step.ok() && step->tokens_size() == 1) << step.status();
    spawned_token = step->tokens(0).token();
  }
  // Two workers on TCP, as Kubernetes pods would run them.
  const std::string token_file = (*dir_ / "token").string();
  std::ofstream(token_file) << "group-token\n";
  std::vector<std::unique_ptr<testing::Child>> workers;
  WorkerGroupOptions o = Options(2);
  for (int r = 0; r < 2; ++r) {
    const std::string address =
        absl::StrCat("127.0.0.1:", testing::FreeTcpPort());
    workers.push_back(std::make_unique<testing::Child>(std::vector<std::string>{
        testing::SiblingProgram("worker"), "--listen=" + address,
        "--token_file=" + token_file}));
    o.remote.push_back(address);
  }
  o.worker_program.clear();
  o.load.set_transport(rpc::TRANSPORT_GLOO);
  // Every interface: the workers dial the address they are called from.
  o.rendezvous_listen = "0.0.0.0:0";
  // Without the right token nothing loads, and the workers stay usable.
  o.token = "not-the-token";
  auto refused = WorkerGroup::Start(o, nullptr);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnauthenticated)
      << refused.status();
  EXPECT_NE(refused.status().message().find("worker rank"), std::string::npos)
      << refused.status();
  o.token = "group-token";
  auto group = WorkerGroup::Start(o, nullptr);
  ASSERT_TRUE(group.ok()) << group.status();
  EXPECT_TRUE((*group)->pids().empty());  // nothing spawned
  EXPECT_EQ((*group)->activation_dtype(), "float32");
  auto step = (*group)->Step(Prefill(1, 0));
  ASSERT_TRUE(step.ok()) << step.status();
  ASSERT_EQ(step->tokens_size(), 1);
  EXPECT_EQ(step->tokens(0).token(), spawned_token);
}

TEST_F(WorkerGroupTest, ALostWorkerFailsTheGroupWithinFiveSeconds) {
  for (int sig : {SIGKILL, SIGSTOP}) {
    auto group = WorkerGroup::Start(Options(2), nullptr);
    ASSERT_TRUE(group.ok()) << group.status();
    const std::vector<pid_t> pids = (*group)->pids();
    ASSERT_EQ(pids.size(), 2u);
    // Steps keep coming while rank 1 goes away.
    std::atomic<bool> done{false};
    absl::Status last;
    absl::Time failed_at;
    std::thread stepper([&] {
      for (uint64_t id = 1; !done; ++id) {
        auto s = (*group)->Step(Prefill(id, id % 32));
        if (!s.ok()) {
          failed_at = absl::Now();
          last = s.status();
          return;
        }
        (*group)->Free({id}).IgnoreError();  // may race with the failure
      }
    });
    absl::SleepFor(absl::Milliseconds(300));
    const absl::Time lost = absl::Now();
    kill(pids[1], sig);
    stepper.join();
    const double seconds = absl::ToDoubleSeconds(failed_at - lost);
    EXPECT_EQ(last.code(), absl::StatusCode::kUnavailable) << last;
    EXPECT_LT(seconds, 5.0) << last;
    EXPECT_EQ((*group)->failed().code(), absl::StatusCode::kUnavailable);
    EXPECT_EQ((*group)->Step(Prefill(99, 0)).status().code(),
              absl::StatusCode::kUnavailable);
    std::printf(
        "[ measured ] rank 1 got signal %d: the group failed after "
        "%.2f s: %s\n",
        sig, seconds, std::string(last.message()).c_str());
    if (sig == SIGSTOP) kill(pids[1], SIGCONT);  // so that it can be stopped
  }
}

TEST_F(WorkerGroupTest, AModelThatDoesNotLoadIsAnErrorNamingTheRank) {
  WorkerGroupOptions o = Options(2);
  o.load.set_model_dir((*dir_ / "missing").string());
  auto group = WorkerGroup::Start(o, nullptr);
  ASSERT_FALSE(group.ok());
  EXPECT_NE(group.status().message().find("worker rank"), std::string::npos)
      << group.status();
  EXPECT_NE(group.status().message().find("missing"), std::string::npos)
      << group.status();
  o = Options(2);
  o.remote = {"127.0.0.1:1"};  // one address for two ranks
  EXPECT_EQ(WorkerGroup::Start(o, nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace octet
