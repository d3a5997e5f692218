// The worker process (worker/worker_main.cc, worker/worker_service.h) over
// its gRPC protocol, as the coordinator drives it: real `worker` processes
// on Unix sockets, loaded as a TP = 2 group, stepped through batches the
// coordinator's scheduler plans. Their tokens must equal what one rank
// generates in this process (row-parallel sums are TP-invariant), greedy
// and seeded sampling alike; and the protocol's errors.
#include "worker/worker_service.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "coordinator/scheduler.h"
#include "kernels/cpu/backend.h"
#include "model/synthetic.h"
#include "octet/internal/v1/worker.grpc.pb.h"
#include "rpc/store.h"
#include "tests/process_util.h"
#include "worker/generator.h"

namespace octet {
namespace {

namespace fs = std::filesystem;
namespace rpc = internal::v1;

constexpr int64_t kBlocks = 64, kBlockSize = 8, kNewTokens = 24;

class WorkerServiceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() /
                        absl::StrCat("octet_worker_", ::getpid()));
    fs::create_directories(*dir_);
    ASSERT_TRUE(
        WriteSyntheticCheckpoint(*SyntheticPreset("tiny"), {.seed = 3}, Model())
            .ok());
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }
  static std::string Model() { return (*dir_ / "tiny").string(); }

  // `n` worker processes on Unix sockets (with `token` when not empty).
  struct Workers {
    std::vector<std::unique_ptr<testing::Child>> procs;
    std::vector<std::unique_ptr<rpc::Worker::Stub>> stubs;
  };
  Workers Start(int n, const std::string& token = "") {
    Workers w;
    const std::string tag = absl::StrCat(next_++);
    for (int r = 0; r < n; ++r) {
      const std::string socket =
          (*dir_ / absl::StrCat("w", tag, "_", r, ".sock")).string();
      std::vector<std::string> command = {testing::SiblingProgram("worker"),
                                          "--listen=unix:" + socket};
      if (!token.empty()) {
        const std::string file = (*dir_ / absl::StrCat("token", tag)).string();
        std::ofstream(file) << token << "\n";
        command.push_back("--token_file=" + file);
      }
      w.procs.push_back(std::make_unique<testing::Child>(command));
      EXPECT_TRUE(w.procs.back()->started());
      auto channel = grpc::CreateChannel("unix:" + socket,
                                         grpc::InsecureChannelCredentials());
      EXPECT_TRUE(channel->WaitForConnected(std::chrono::system_clock::now() +
                                            std::chrono::seconds(20)))
          << "worker " << r << " did not come up";
      w.stubs.push_back(rpc::Worker::NewStub(channel));
    }
    return w;
  }

  // Loads every rank at once (they form their group while loading); the
  // statuses in rank order, and the progress messages of rank 0.
  std::vector<grpc::Status> LoadAll(Workers& w, rpc::LoadRequest base,
                                    std::vector<rpc::LoadProgress>* progress) {
    InMemoryStore store;
    auto server = RendezvousServer::Start("127.0.0.1:0", &store);
    EXPECT_TRUE(server.ok());
    std::vector<grpc::Status> statuses(w.stubs.size());
    std::vector<std::thread> threads;
    for (size_t r = 0; r < w.stubs.size(); ++r) {
      threads.emplace_back([&, r] {
        rpc::LoadRequest req = base;
        req.set_rank(static_cast<int32_t>(r));
        req.set_world_size(static_cast<int32_t>(w.stubs.size()));
        req.set_rendezvous_address((*server)->address());
        req.set_group(absl::StrCat("load-", next_));
        grpc::ClientContext context;
        auto reader = w.stubs[r]->Load(&context, req);
        rpc::LoadProgress p;
        while (reader->Read(&p)) {
          if (r == 0 && progress != nullptr) progress->push_back(p);
        }
        statuses[r] = reader->Finish();
      });
    }
    for (std::thread& t : threads) t.join();
    return statuses;
  }

  // One rank in this process, loaded as Base() loads a worker.
  struct InProcess {
    std::unique_ptr<Checkpoint> ckpt;
    std::unique_ptr<Backend> backend;
    std::unique_ptr<LlamaModel> model;
    std::unique_ptr<KvCache> cache;
  };
  static void LoadInProcess(InProcess* out) {
    auto ckpt = Checkpoint::Open(Model());
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    out->ckpt = *std::move(ckpt);
    out->backend = NewCpuBackend({.num_threads = 1});
    ModelOptions options;
    options.method = LinearMethod::kFp8;
    options.cpu.num_threads = 1;
    auto model = LlamaModel::Load(*out->ckpt, *out->backend, options);
    ASSERT_TRUE(model.ok()) << model.status();
    out->model = *std::move(model);
    auto cache = out->model->NewKvCache(
        {.block_size = kBlockSize, .num_blocks = kBlocks});
    ASSERT_TRUE(cache.ok()) << cache.status();
    out->cache = *std::move(cache);
  }

  static rpc::LoadRequest Base() {
    rpc::LoadRequest r;
    r.set_model_dir(Model());
    r.set_quantization(rpc::QUANTIZATION_FP8);
    r.set_global_weight_scale(true);
    r.set_transport(rpc::TRANSPORT_SHM);
    r.set_device(rpc::DEVICE_CPU);
    r.set_kv_blocks(kBlocks);
    r.set_kv_block_size(kBlockSize);
    r.set_threads(1);
    r.set_collective_timeout_ms(20000);
    return r;
  }

  // The same step on every rank at once: their responses, or the first
  // error.
  absl::StatusOr<std::vector<rpc::StepResponse>> StepAll(
      Workers& w, const rpc::StepRequest& request) {
    std::vector<rpc::StepResponse> responses(w.stubs.size());
    std::vector<grpc::Status> statuses(w.stubs.size());
    std::vector<std::thread> threads;
    for (size_t r = 0; r < w.stubs.size(); ++r) {
      threads.emplace_back([&, r] {
        grpc::ClientContext context;
        statuses[r] = w.stubs[r]->Step(&context, request, &responses[r]);
      });
    }
    for (std::thread& t : threads) t.join();
    for (const grpc::Status& s : statuses) {
      if (!s.ok()) {
        return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                            s.error_message());
      }
    }
    return responses;
  }

  static fs::path* dir_;
  static int next_;
};

fs::path* WorkerServiceTest::dir_ = nullptr;
int WorkerServiceTest::next_ = 0;

std::vector<std::vector<int32_t>> Prompts() {
  return {
      {1, 17, 33, 90, 5, 61, 7},
      {1, 200, 201, 202},
      {1, 9, 8, 7, 6, 5, 4, 3, 2, 99, 98, 97, 96, 95, 94, 93, 92, 91, 90, 89}};
}

TEST_F(WorkerServiceTest, TwoRanksGenerateWhatOneRankGeneratesInProcess) {
  Workers w = Start(2);
  std::vector<rpc::LoadProgress> progress;
  for (const grpc::Status& s : LoadAll(w, Base(), &progress)) {
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  // Load progress: every layer of the tiny preset (2), for a person.
  ASSERT_FALSE(progress.empty());
  EXPECT_EQ(progress.back().done(), progress.back().total());
  EXPECT_EQ(progress.back().total(), 2);

  for (float temperature : {0.0f, 0.9f}) {
    // One rank, in this process.
    InProcess one;
    ASSERT_NO_FATAL_FAILURE(LoadInProcess(&one));
    std::vector<GenerationRequest> requests;
    for (size_t i = 0; i < Prompts().size(); ++i) {
      GenerationRequest r;
      r.prompt = Prompts()[i];
      r.max_new_tokens = kNewTokens;
      r.sampling.temperature = temperature;
      r.sampling.seed = 100 + i;
      requests.push_back(r);
    }
    auto expected = Generate(*one.model, *one.cache, requests);
    ASSERT_TRUE(expected.ok()) << expected.status();

    // Two ranks, driven by the scheduler (a small token budget, so that
    // prompts are chunked and sequences join a running batch).
    auto sched = Scheduler::Create({.num_blocks = kBlocks,
                                    .block_size = kBlockSize,
                                    .max_tokens_per_step = 12});
    ASSERT_TRUE(sched.ok());
    const SeqId base = temperature == 0 ? 10 : 20;
    for (size_t i = 0; i < requests.size(); ++i) {
      ASSERT_TRUE((*sched)->Add(base + i, Prompts()[i], kNewTokens).ok());
    }
    std::vector<std::vector<int32_t>> got(requests.size());
    for (int step = 0; step < 500 && (*sched)->running() + (*sched)->waiting();
         ++step) {
      const StepPlan plan = (*sched)->Schedule();
      ASSERT_FALSE(plan.seqs.empty());
      rpc::StepRequest req;
      req.set_step(step);
      for (const ScheduledSeq& q : plan.seqs) {
        rpc::SequenceStep* s = req.add_seqs();
        s->set_seq_id(q.id);
        s->set_start(q.start);
        s->mutable_tokens()->Add(q.tokens.begin(), q.tokens.end());
        s->mutable_block_table()->Add(q.block_table->begin(),
                                      q.block_table->end());
        s->set_sample(q.sample);
        s->mutable_sampling()->set_temperature(temperature);
        s->mutable_sampling()->set_top_p(1.0f);
        s->mutable_sampling()->set_seed(100 + (q.id - base));
        s->mutable_sampling()->set_repetition_penalty(1.0f);
      }
      auto responses = StepAll(w, req);
      ASSERT_TRUE(responses.ok()) << responses.status();
      EXPECT_EQ((*responses)[1].tokens_size(), 0);  // only rank 0 samples
      for (const rpc::SampledToken& t : (*responses)[0].tokens()) {
        ASSERT_TRUE((*sched)->Append(t.seq_id(), t.token()).ok());
        auto& mine = got[t.seq_id() - base];
        mine.push_back(t.token());
        if (static_cast<int64_t>(mine.size()) == kNewTokens) {
          (*sched)->Finish(t.seq_id());
        }
      }
    }
    for (size_t i = 0; i < requests.size(); ++i) {
      EXPECT_EQ(got[i], (*expected)[i].tokens)
          << "temperature " << temperature << " request " << i;
    }
  }
}

// Rank 0 samples each row from its sequence's history, penalty and
// parameters, and returns the log-probability when asked: the same token
// and log-probability as the host reference (SampleOne) on the logits of the
// same model in this process.
TEST_F(WorkerServiceTest, SamplesWithPenaltyAndLogprobAsTheReference) {
  Workers w = Start(1);
  ASSERT_TRUE(LoadAll(w, Base(), nullptr)[0].ok());
  const std::vector<int32_t> prompt = {1, 17, 33, 17, 90, 17};
  rpc::StepRequest req;
  rpc::SequenceStep* q = req.add_seqs();
  q->set_seq_id(5);
  q->mutable_tokens()->Add(prompt.begin(), prompt.end());
  q->add_block_table(0);
  q->set_sample(true);
  q->set_logprobs(true);
  q->mutable_sampling()->set_temperature(0.8f);
  q->mutable_sampling()->set_top_k(20);
  q->mutable_sampling()->set_top_p(0.9f);
  q->mutable_sampling()->set_seed(77);
  q->mutable_sampling()->set_repetition_penalty(1.3f);
  auto responses = StepAll(w, req);
  ASSERT_TRUE(responses.ok()) << responses.status();
  ASSERT_EQ((*responses)[0].tokens_size(), 1);
  const rpc::SampledToken& got = (*responses)[0].tokens(0);

  InProcess one;
  ASSERT_NO_FATAL_FAILURE(LoadInProcess(&one));
  const std::vector<int32_t> table = {0};
  const SequenceStep step{prompt, 0, &table};
  std::vector<float> logits;
  ASSERT_TRUE(one.model->Forward({&step, 1}, *one.cache, &logits).ok());
  const SampledToken want = SampleOne(
      logits,
      {.params = {.temperature = 0.8f, .top_k = 20, .top_p = 0.9f, .seed = 77},
       .position = static_cast<int64_t>(prompt.size()),
       .repetition_penalty = 1.3f,
       .history = prompt,
       .logprob = true});
  EXPECT_EQ(got.token(), want.id);
  EXPECT_EQ(got.logprob(), want.logprob);
  EXPECT_LT(want.logprob, 0.0f);
}

TEST_F(WorkerServiceTest, ProtocolErrorsAreClear) {
  Workers w = Start(1);
  rpc::StepRequest step;
  rpc::SequenceStep* s = step.add_seqs();
  s->set_seq_id(1);
  s->add_tokens(1);
  s->add_block_table(0);
  auto before = StepAll(w, step);
  EXPECT_EQ(before.status().code(), absl::StatusCode::kFailedPrecondition);

  rpc::LoadRequest bad = Base();
  bad.set_model_dir(Model() + "-missing");
  grpc::Status st = LoadAll(w, bad, nullptr)[0];
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.error_message().find("-missing"), std::string::npos)
      << st.error_message();
  // Enums a sender left unset or from a newer protocol: refused, named.
  bad = Base();
  bad.set_quantization(rpc::QUANTIZATION_UNSPECIFIED);
  st = LoadAll(w, bad, nullptr)[0];
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("quantization"), std::string::npos);
  bad = Base();
  bad.set_quantization(static_cast<rpc::Quantization>(7));
  st = LoadAll(w, bad, nullptr)[0];
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  bad = Base();
  bad.set_device(static_cast<rpc::Device>(7));
  st = LoadAll(w, bad, nullptr)[0];
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("device"), std::string::npos);
  bad = Base();
  bad.set_transport(static_cast<rpc::Transport>(7));
  st = LoadAll(w, bad, nullptr)[0];
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("transport"), std::string::npos);
  bad = Base();
  bad.set_transport(rpc::TRANSPORT_NCCL);  // NCCL on a CPU rank
  st = LoadAll(w, bad, nullptr)[0];
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("nccl"), std::string::npos)
      << st.error_message();
  bad = Base();
  bad.set_cuda_device(-1);
  st = LoadAll(w, bad, nullptr)[0];
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("cuda_device"), std::string::npos);

  ASSERT_TRUE(LoadAll(w, Base(), nullptr)[0].ok());
  EXPECT_EQ(LoadAll(w, Base(), nullptr)[0].error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);  // loaded already
  EXPECT_TRUE(StepAll(w, step).ok());
  s->set_start(kBlockSize);  // one block does not hold 9 tokens
  auto short_table = StepAll(w, step);
  EXPECT_EQ(short_table.status().code(), absl::StatusCode::kInvalidArgument);
  s->set_start(0);
  s->set_block_table(0, kBlocks);  // no such block
  EXPECT_EQ(StepAll(w, step).status().code(),
            absl::StatusCode::kInvalidArgument);
  s->set_block_table(0, 0);
  s->set_tokens(0, 100000);  // not in the vocabulary
  EXPECT_EQ(StepAll(w, step).status().code(),
            absl::StatusCode::kInvalidArgument);
  s->set_tokens(0, 1);
  EXPECT_TRUE(StepAll(w, step).ok());  // refused requests leave it serving
}

TEST_F(WorkerServiceTest, AWorkerWhoseGroupFailedExits) {
  // Rank 1 dies; rank 0's next step fails in its collectives, and rank 0
  // exits (code 1) so that a supervisor starts a fresh one.
  Workers w = Start(2);
  for (const grpc::Status& s : LoadAll(w, Base(), nullptr)) {
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  w.procs[1]->Kill(SIGKILL);
  rpc::StepRequest step;
  rpc::SequenceStep* s = step.add_seqs();
  s->set_seq_id(1);
  s->add_tokens(1);
  s->add_block_table(0);
  grpc::ClientContext context;
  rpc::StepResponse response;
  const grpc::Status failed = w.stubs[0]->Step(&context, step, &response);
  EXPECT_EQ(failed.error_code(), grpc::StatusCode::UNAVAILABLE)
      << failed.error_message();
  EXPECT_EQ(w.procs[0]->Wait(absl::Seconds(10)), 1);
}

TEST_F(WorkerServiceTest, AnAbandonedLoadEndsTheWorkerPromptly) {
  // The coordinator gives up on a group that will not form (another rank
  // refused) and cancels this rank's Load while it waits for its peer. The
  // worker must exit (code 1) within seconds, not after the collective
  // timeout, so that its supervisor's fresh one is there for the
  // coordinator's next attempt (remote_hosts_test.sh hung on this).
  Workers w = Start(1);
  InMemoryStore store;
  auto server = RendezvousServer::Start("127.0.0.1:0", &store);
  ASSERT_TRUE(server.ok());
  rpc::LoadRequest req = Base();
  req.set_world_size(2);  // rank 1 never comes
  req.set_rendezvous_address((*server)->address());
  req.set_group("abandoned");
  req.set_collective_timeout_ms(60000);
  grpc::ClientContext context;
  auto reader = w.stubs[0]->Load(&context, req);
  rpc::LoadProgress p;
  ASSERT_TRUE(reader->Read(&p));
  EXPECT_NE(p.stage().find("joining"), std::string::npos) << p.stage();
  context.TryCancel();
  reader->Finish();
  EXPECT_EQ(w.procs[0]->Wait(absl::Seconds(15)), 1);
}

TEST(RendezvousTarget, AWildcardHostIsTheCallersHost) {
  struct Case {
    std::string address, peer, want;  // want "": an error
  };
  const std::vector<Case> cases = {
      {"10.0.0.5:7000", "ipv4:10.0.0.9:4444", "10.0.0.5:7000"},
      {"coordinator.ns.svc:7000", "ipv4:10.0.0.9:1", "coordinator.ns.svc:7000"},
      {"0.0.0.0:7000", "ipv4:10.0.0.9:4444", "10.0.0.9:7000"},
      {":7000", "ipv4:127.0.0.1:4444", "127.0.0.1:7000"},
      {"[::]:7000", "ipv6:[fd00::2]:4444", "[fd00::2]:7000"},
      {"[::]:7000", "ipv6:%5Bfd00::2%5D:4444", "[fd00::2]:7000"},
      {"0.0.0.0:7000", "unix:", ""},  // a Unix socket names no host
      {"0.0.0.0:7000", "ipv4::1", ""},
      {"7000", "ipv4:10.0.0.9:1", ""},
  };
  for (const Case& c : cases) {
    absl::StatusOr<std::string> got = RendezvousTarget(c.address, c.peer);
    if (c.want.empty()) {
      EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument)
          << c.address << " from " << c.peer;
      EXPECT_NE(got.status().message().find("rendezvous_address"),
                std::string::npos);
    } else {
      EXPECT_EQ(got.value_or("error"), c.want) << c.address << " " << c.peer;
    }
  }
}

TEST_F(WorkerServiceTest, ALoadForAnotherGroupEndsALoadedWorker) {
  // A restarted coordinator (or a replacement group) finds the worker
  // loaded: it says so and exits (code 1) so that a fresh one can join.
  Workers w = Start(1);
  ASSERT_TRUE(LoadAll(w, Base(), nullptr)[0].ok());
  rpc::LoadRequest other = Base();
  other.set_world_size(1);
  other.set_group("another-group");
  grpc::ClientContext context;
  auto reader = w.stubs[0]->Load(&context, other);
  rpc::LoadProgress p;
  while (reader->Read(&p)) {
  }
  const grpc::Status s = reader->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  EXPECT_NE(s.error_message().find("another-group"), std::string::npos)
      << s.error_message();
  EXPECT_EQ(w.procs[0]->Wait(absl::Seconds(10)), 1);
}

TEST_F(WorkerServiceTest, ATokenIsRequiredWhenConfigured) {
  Workers w = Start(1, "s3cret");
  rpc::HealthResponse health;
  {
    grpc::ClientContext context;
    EXPECT_EQ(w.stubs[0]->Health(&context, {}, &health).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  {
    grpc::ClientContext context;
    context.AddMetadata("authorization", "Bearer wrong");
    EXPECT_EQ(w.stubs[0]->Health(&context, {}, &health).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  grpc::ClientContext context;
  context.AddMetadata("authorization", "Bearer s3cret");
  EXPECT_TRUE(w.stubs[0]->Health(&context, {}, &health).ok());
  EXPECT_FALSE(health.loaded());
}

}  // namespace
}  // namespace octet
