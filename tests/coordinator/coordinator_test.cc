// End to end: the `coordinator` program serving the tiny preset at TP = 2
// with FP8, driven as a client would: GetModelInfo once it serves, unary
// and streaming generation (tokens equal to one rank's in-process greedy
// run), concurrent clients, invalid requests (INVALID_ARGUMENT naming the
// field), a client deadline, and a worker killed with SIGKILL mid-stream
// (UNAVAILABLE within 5 s, then served again by a new worker group). Bad
// flags end the program with exit code 2.
#include <dirent.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "kernels/cpu/backend.h"
#include "octet/v1/generation.grpc.pb.h"
#include "tests/process_util.h"
#include "tests/worker/model_test_util.h"
#include "worker/generator.h"
#include "worker/synthetic.h"

namespace octet {
namespace {

namespace fs = std::filesystem;

// Processes whose parent is `parent`.
std::vector<pid_t> ChildrenOf(pid_t parent) {
  std::vector<pid_t> out;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream status(e.path() / "status");
    std::string line;
    while (std::getline(status, line)) {
      if (line.rfind("PPid:", 0) == 0) {
        if (std::stoi(line.substr(5)) == parent) out.push_back(std::stoi(name));
        break;
      }
    }
  }
  return out;
}

class CoordinatorTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() /
                        absl::StrCat("octet_coord_", ::getpid()));
    ASSERT_TRUE(
        WriteSyntheticCheckpoint(*SyntheticPreset("tiny"), {.seed = 8}, Model())
            .ok());
    port_ = testing::FreeTcpPort();
    server_ = new testing::Child(
        {testing::SiblingProgram("coordinator"), "--model=" + Model(), "--tp=2",
         "--quantization=fp8", "--weight_scale=global", "--device=cpu",
         absl::StrCat("--port=", port_), "--kv_cache_tokens=2048",
         "--block_size=8", "--threads=1"});
    ASSERT_TRUE(server_->started());
    channel_ = new std::shared_ptr<grpc::Channel>(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", port_), grpc::InsecureChannelCredentials()));
    // Serving once GetModelInfo answers (UNAVAILABLE while loading).
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    while (absl::Now() < deadline) {
      grpc::ClientContext context;
      v1::ModelInfo info;
      if (Stub()->GetModelInfo(&context, {}, &info).ok()) return;
      absl::SleepFor(absl::Milliseconds(100));
    }
    FAIL() << "the coordinator did not serve within 60 s";
  }
  static void TearDownTestSuite() {
    delete channel_;
    server_->Kill(SIGTERM);
    delete server_;
    fs::remove_all(*dir_);
    delete dir_;
  }
  static std::string Model() { return (*dir_ / "tiny").string(); }
  // One rank's greedy FP8 tokens, in this process.
  static std::vector<int32_t> Expected(const std::vector<int32_t>& prompt,
                                       int max_new) {
    return testing::GreedyFp8Tokens(Model(), prompt, max_new);
  }
  static std::unique_ptr<v1::Generation::Stub> Stub() {
    return v1::Generation::NewStub(*channel_);
  }

  static v1::GenerateRequest Request(const std::vector<int32_t>& prompt,
                                     int max_new) {
    v1::GenerateRequest r;
    r.mutable_token_ids()->mutable_ids()->Add(prompt.begin(), prompt.end());
    r.mutable_sampling()->set_temperature(0.0f);
    r.mutable_stopping()->set_max_new_tokens(max_new);
    r.mutable_stopping()->set_ignore_eos(true);
    return r;
  }

  static fs::path* dir_;
  static int port_;
  static testing::Child* server_;
  static std::shared_ptr<grpc::Channel>* channel_;
};

fs::path* CoordinatorTest::dir_ = nullptr;
int CoordinatorTest::port_ = 0;
testing::Child* CoordinatorTest::server_ = nullptr;
std::shared_ptr<grpc::Channel>* CoordinatorTest::channel_ = nullptr;

const std::vector<int32_t> kPrompt = {1, 17, 33, 90, 5};

TEST_F(CoordinatorTest, ModelInfoDescribesTheServedModel) {
  grpc::ClientContext context;
  v1::ModelInfo info;
  ASSERT_TRUE(Stub()->GetModelInfo(&context, {}, &info).ok());
  EXPECT_EQ(info.model_name(), "tiny");
  EXPECT_EQ(info.architecture(), "LlamaForCausalLM");
  EXPECT_EQ(info.quantization(), "fp8");
  EXPECT_EQ(info.tensor_parallel_size(), 2u);
  EXPECT_EQ(info.vocab_size(), 512u);
  EXPECT_EQ(info.max_context_tokens(), 1024u);
  EXPECT_EQ(info.dtype(), "float32");
}

TEST_F(CoordinatorTest, HealthSaysServing) {
  // grpc.health.v1.Health/Check through a generic stub (the health proto is
  // not built here): an empty HealthCheckRequest (service "": the server),
  // answered by HealthCheckResponse{status: SERVING} = field 1, varint 1.
  grpc::GenericStub stub(*channel_);
  grpc::ClientContext context;
  grpc::Slice empty("");
  grpc::ByteBuffer request(&empty, 1), response;
  absl::Notification done;
  grpc::Status status;
  stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(),
                 &request, &response, [&](grpc::Status s) {
                   status = std::move(s);
                   done.Notify();
                 });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  ASSERT_TRUE(status.ok()) << status.error_message();
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(response.Dump(&slices).ok());
  std::string bytes;
  for (const grpc::Slice& slice : slices) {
    bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  EXPECT_EQ(bytes, std::string("\x08\x01", 2));
}

TEST_F(CoordinatorTest, UnaryAndStreamingGiveOneRanksTokens) {
  const std::vector<int32_t> want = Expected(kPrompt, 10);
  grpc::ClientContext context;
  v1::GenerateResponse unary;
  grpc::Status s = Stub()->Generate(&context, Request(kPrompt, 10), &unary);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(
      std::vector<int32_t>(unary.token_ids().begin(), unary.token_ids().end()),
      want);
  EXPECT_EQ(unary.finish_reason(), v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(unary.usage().prompt_tokens(), kPrompt.size());
  EXPECT_EQ(unary.usage().completion_tokens(), 10u);
  EXPECT_FALSE(unary.request_id().empty());
  EXPECT_GT(unary.timings().time_to_first_token_seconds(), 0);

  grpc::ClientContext sc;
  auto reader = Stub()->GenerateStream(&sc, Request(kPrompt, 10));
  v1::GenerateStreamResponse m;
  std::vector<int32_t> streamed;
  std::string text;
  int messages = 0;
  v1::FinishReason finish = v1::FINISH_REASON_UNSPECIFIED;
  while (reader->Read(&m)) {
    ++messages;
    streamed.insert(streamed.end(), m.token_ids().begin(), m.token_ids().end());
    text += m.text();
    if (m.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
      finish = m.finish_reason();
    }
  }
  ASSERT_TRUE(reader->Finish().ok());
  EXPECT_EQ(streamed, want);
  EXPECT_EQ(text, unary.text());
  EXPECT_EQ(finish, v1::FINISH_REASON_LENGTH);
  EXPECT_GE(messages, 2);  // tokens arrive as they are made
}

TEST_F(CoordinatorTest, ConcurrentClientsEachGetTheirOwn) {
  const std::vector<std::vector<int32_t>> prompts = {
      {1, 200, 201}, {1, 9, 8, 7, 6, 5}, {1, 42}, {1, 300, 301, 302, 303}};
  std::vector<std::vector<int32_t>> got(prompts.size());
  std::vector<std::thread> clients;
  for (size_t i = 0; i < prompts.size(); ++i) {
    clients.emplace_back([&, i] {
      grpc::ClientContext context;
      v1::GenerateResponse r;
      if (Stub()->Generate(&context, Request(prompts[i], 8), &r).ok()) {
        got[i].assign(r.token_ids().begin(), r.token_ids().end());
      }
    });
  }
  for (std::thread& t : clients) t.join();
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(got[i], Expected(prompts[i], 8)) << "client " << i;
  }
}

TEST_F(CoordinatorTest, InvalidRequestsNameTheirField) {
  struct Case {
    v1::GenerateRequest request;
    std::string field;
  };
  std::vector<Case> cases;
  cases.push_back({v1::GenerateRequest(), "input"});
  cases.push_back({Request({1, 600}, 4), "input.token_ids[1]"});
  cases.push_back({Request(kPrompt, 0), "stopping.max_new_tokens"});
  cases.push_back({Request(kPrompt, 5000), "stopping.max_new_tokens"});
  v1::GenerateRequest hot = Request(kPrompt, 4);
  hot.mutable_sampling()->set_temperature(-1);
  cases.push_back({hot, "sampling.temperature"});
  v1::GenerateRequest top = Request(kPrompt, 4);
  top.mutable_sampling()->set_top_p(2);
  cases.push_back({top, "sampling.top_p"});
  for (const Case& c : cases) {
    grpc::ClientContext context;
    v1::GenerateResponse r;
    const grpc::Status s = Stub()->Generate(&context, c.request, &r);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.field;
    EXPECT_EQ(s.error_message().rfind(c.field, 0), 0u) << s.error_message();
    // Streaming refuses it the same way.
    grpc::ClientContext sc;
    auto reader = Stub()->GenerateStream(&sc, c.request);
    v1::GenerateStreamResponse m;
    while (reader->Read(&m)) {
    }
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << c.field;
  }
}

TEST_F(CoordinatorTest, AClientDeadlineEndsTheRequest) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::milliseconds(300));
  v1::GenerateResponse r;
  const grpc::Status s = Stub()->Generate(&context, Request(kPrompt, 1000), &r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  // The server goes on serving others.
  grpc::ClientContext next;
  EXPECT_TRUE(Stub()->Generate(&next, Request(kPrompt, 3), &r).ok());
}

TEST_F(CoordinatorTest, AKilledWorkerEndsItsStreamsAndServiceComesBack) {
  grpc::ClientContext context;
  auto reader = Stub()->GenerateStream(&context, Request(kPrompt, 1000));
  v1::GenerateStreamResponse m;
  ASSERT_TRUE(reader->Read(&m));  // generating
  const std::vector<pid_t> workers = ChildrenOf(server_->pid());
  ASSERT_EQ(workers.size(), 2u);
  const absl::Time start = absl::Now();
  kill(workers[1], SIGKILL);
  while (reader->Read(&m)) {
  }
  const grpc::Status s = reader->Finish();
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  EXPECT_LT(seconds, 5.0);
  // A new worker group serves the next request.
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  grpc::Status again;
  v1::GenerateResponse r;
  do {
    grpc::ClientContext c;
    c.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    again = Stub()->Generate(&c, Request(kPrompt, 4), &r);
  } while (!again.ok() && absl::Now() < deadline);
  EXPECT_TRUE(again.ok()) << again.error_message();
  EXPECT_EQ(std::vector<int32_t>(r.token_ids().begin(), r.token_ids().end()),
            Expected(kPrompt, 4));
  std::printf(
      "[ measured ] worker killed mid-stream: UNAVAILABLE after %.2f s "
      "(%s); served again afterwards\n",
      seconds, s.error_message().c_str());
}

TEST(CoordinatorFlags, BadFlagsExitWithCodeTwo) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{
           {"--model=/nonexistent/model"},
           {"--model=/tmp", "--tp=0"},
           {"--model=/tmp", "--quantization=int4"},
           {"--model=/tmp", "--device=tpu"},
           {"--model=/tmp", "--tp=2", "--workers=a:1"}}) {
    std::vector<std::string> command = {testing::SiblingProgram("coordinator")};
    command.insert(command.end(), args.begin(), args.end());
    EXPECT_EQ(testing::RunTogether({command}, absl::Seconds(20)),
              std::vector<int>{2})
        << args.back();
  }
}

}  // namespace
}  // namespace octet
