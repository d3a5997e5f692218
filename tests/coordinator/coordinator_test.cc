// End to end: the `coordinator` program serving the tiny preset at TP = 2
// with FP8, driven as a client would: GetModelInfo once it serves, unary
// and streaming generation (tokens equal to one rank's in-process greedy
// run), concurrent clients, invalid requests (INVALID_ARGUMENT naming the
// field), a client deadline, a worker killed with SIGKILL or stopped with
// SIGSTOP mid-stream (the stream continues on a new worker group), a step
// past --step_timeout, SIGTERM with streams in flight (drain) and while
// the workers start. Health and server reflection answer as grpcurl and
// Kubernetes probes ask. The OpenAI-compatible HTTP API on the same
// server: the gRPC API's text, a client that leaves (streaming or not)
// cancelling its request, OpenAI's error objects, 429 for a full queue
// (the real `openai` client drives it in openai_client_test.py); chat on
// a SentencePiece tokenizer. Bad flags, a TP degree the model cannot split
// by and a model beyond the machine's memory end the program with exit
// code 2; a load that fails alike each time, after --max_start_failures,
// with 1.
#include <arpa/inet.h>
#include <dirent.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "coordinator/proto/reflection_client.grpc.pb.h"
#include "google/protobuf/descriptor.pb.h"
#include "kernels/cpu/backend.h"
#include "model/synthetic.h"
#include "model/tokenizer.h"
#include "nlohmann/json.hpp"
#include "octet/v1/generation.grpc.pb.h"
#include "tests/coordinator/client_util.h"
#include "tests/process_util.h"
#include "tests/worker/model_test_util.h"
#include "worker/generator.h"

namespace octet {
namespace {

namespace fs = std::filesystem;

class CoordinatorTest : public ::testing::Test {
 public:  // (the helpers below the fixture use its statics)
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() /
                        absl::StrCat("octet_coord_", ::getpid()));
    ASSERT_TRUE(
        WriteSyntheticCheckpoint(*SyntheticPreset("tiny"), {.seed = 8}, Model())
            .ok());
    port_ = testing::FreeTcpPort();
    metrics_port_ = testing::FreeTcpPort();
    http_port_ = testing::FreeTcpPort();
    server_ = new testing::Child(
        {testing::SiblingProgram("coordinator"), "--model=" + Model(), "--tp=2",
         "--quantization=fp8", "--weight_scale=global", "--device=cpu",
         absl::StrCat("--port=", port_), "--kv_cache_tokens=2048",
         "--block_size=8", "--threads=1",
         absl::StrCat("--metrics_port=", metrics_port_),
         absl::StrCat("--http_port=", http_port_)});
    ASSERT_TRUE(server_->started());
    channel_ = new std::shared_ptr<grpc::Channel>(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", port_), grpc::InsecureChannelCredentials()));
    ASSERT_TRUE(testing::WaitUntilServing(*Stub(), absl::Seconds(60)))
        << "the coordinator did not serve within 60 s";
  }
  static void TearDownTestSuite() {
    delete channel_;
    server_->Kill(SIGTERM);
    delete server_;
    fs::remove_all(*dir_);
    delete dir_;
  }
  static std::string Model() { return (*dir_ / "tiny").string(); }
  static pid_t pid() { return server_->pid(); }
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

  // GET /metrics: every sample, "name{labels}" -> value.
  // How much sample `key` grew between two scrapes (absent before: from 0);
  // NaN, failing any comparison, when the later scrape lacks it.
  static double Increase(const std::map<std::string, double>& before,
                         const std::map<std::string, double>& after,
                         const std::string& key) {
    const auto a = after.find(key);
    if (a == after.end()) {
      ADD_FAILURE() << "no sample " << key;
      return std::nan("");
    }
    const auto b = before.find(key);
    return a->second - (b == before.end() ? 0.0 : b->second);
  }

  static std::map<std::string, double> Scrape() {
    return Scrape(metrics_port_);
  }

  // Requests ended CANCELLED since `before`, once there is one (or after
  // 30 s).
  static double CancelledSince(const std::map<std::string, double>& before) {
    const std::string cancelled =
        R"(octet_requests_total{code="CANCELLED",finish_reason="none"})";
    double ended = 0;
    for (int i = 0; i < 300 && ended < 1; ++i) {
      absl::SleepFor(absl::Milliseconds(100));
      ended = Increase(before, Scrape(), cancelled);
    }
    return ended;
  }

  static std::map<std::string, double> Scrape(int metrics_port) {
    std::map<std::string, double> samples;
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(metrics_port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    std::string reply;
    if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
      const std::string get = "GET /metrics HTTP/1.0\r\nHost: test\r\n\r\n";
      if (write(fd, get.data(), get.size()) ==
          static_cast<ssize_t>(get.size())) {
        char buf[4096];
        for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) {
          reply.append(buf, n);
        }
      }
    }
    close(fd);
    const size_t body = reply.find("\r\n\r\n");
    EXPECT_NE(reply.find(" 200 "), std::string::npos) << reply.substr(0, 200);
    if (body == std::string::npos) return samples;
    std::istringstream lines(reply.substr(body + 4));
    for (std::string line; std::getline(lines, line);) {
      if (line.empty() || line[0] == '#') continue;
      const size_t space = line.rfind(' ');
      samples[line.substr(0, space)] = std::stod(line.substr(space + 1));
    }
    return samples;
  }

  static fs::path* dir_;
  static int port_, metrics_port_, http_port_;
  static testing::Child* server_;
  static std::shared_ptr<grpc::Channel>* channel_;
};

fs::path* CoordinatorTest::dir_ = nullptr;
int CoordinatorTest::port_ = 0;
int CoordinatorTest::metrics_port_ = 0;
int CoordinatorTest::http_port_ = 0;
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
  EXPECT_EQ(info.quantization_scheme(), "fp8-tensor");
  EXPECT_EQ(info.tensor_parallel_size(), 2u);
  EXPECT_EQ(info.vocab_size(), 512u);
  EXPECT_EQ(info.max_context_tokens(), 1024u);
  EXPECT_EQ(info.dtype(), "float32");
}

// grpc.health.v1.Health/Check of `service` through a generic stub (the
// health proto is not built here): the call's status and the
// HealthCheckResponse's bytes (SERVING = field 1, varint 1: "\x08\x01").
std::pair<grpc::StatusCode, std::string> CheckHealth(
    const std::shared_ptr<grpc::Channel>& channel, const std::string& service) {
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  // HealthCheckRequest{service}: field 1, length-delimited (short names).
  std::string bytes;
  if (!service.empty()) {
    bytes =
        std::string("\x0a", 1) + static_cast<char>(service.size()) + service;
  }
  grpc::Slice slice(bytes);
  grpc::ByteBuffer request(&slice, 1), response;
  absl::Notification done;
  grpc::Status status;
  stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(),
                 &request, &response, [&](grpc::Status s) {
                   status = std::move(s);
                   done.Notify();
                 });
  if (!done.WaitForNotificationWithTimeout(absl::Seconds(10))) {
    context.TryCancel();
    done.WaitForNotification();
  }
  std::vector<grpc::Slice> slices;
  std::string out;
  if (status.ok() && response.Dump(&slices).ok()) {
    for (const grpc::Slice& s : slices) {
      out.append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
  }
  return {status.error_code(), out};
}

const std::string kServing("\x08\x01", 2);

TEST_F(CoordinatorTest, HealthSaysServing) {
  // The server, the API and liveness (what the Kubernetes probes ask).
  for (const std::string service : {"", "octet.v1.Generation", "liveness"}) {
    const auto [code, bytes] = CheckHealth(*channel_, service);
    EXPECT_EQ(code, grpc::StatusCode::OK) << "'" << service << "'";
    EXPECT_EQ(bytes, kServing) << "'" << service << "'";
  }
  EXPECT_EQ(CheckHealth(*channel_, "no.such.Service").first,
            grpc::StatusCode::NOT_FOUND);
}

TEST_F(CoordinatorTest, MetricsCountWhatHappened) {
  const std::map<std::string, double> before = Scrape();
  auto delta = [&](const std::map<std::string, double>& after,
                   const std::string& key) {
    return Increase(before, after, key);
  };
  constexpr int kNew = 6;
  for (int i = 0; i < 2; ++i) {  // two that run to their length
    grpc::ClientContext context;
    v1::GenerateResponse response;
    ASSERT_TRUE(
        Stub()->Generate(&context, Request(kPrompt, kNew), &response).ok());
  }
  // One stopped by a stop token: the third greedy one, which ends the
  // request where it first comes (the stop token counts as generated).
  const std::vector<int32_t> want = Expected(kPrompt, 3);
  const int stopped_after = static_cast<int>(
      std::find(want.begin(), want.end(), want[2]) - want.begin() + 1);
  {
    v1::GenerateRequest r = Request(kPrompt, kNew);
    r.mutable_stopping()->add_stop_token_ids(want[2]);
    grpc::ClientContext context;
    v1::GenerateResponse response;
    ASSERT_TRUE(Stub()->Generate(&context, r, &response).ok());
    ASSERT_EQ(response.finish_reason(), v1::FINISH_REASON_STOP);
  }
  {  // one invalid
    grpc::ClientContext context;
    v1::GenerateResponse response;
    ASSERT_EQ(
        Stub()->Generate(&context, Request(kPrompt, 0), &response).error_code(),
        grpc::StatusCode::INVALID_ARGUMENT);
  }
  // The gauges are set when the engine goes back to wait: poll briefly.
  // All three, since a scrape right after the last answer can still read
  // the values published when that request was queued (waiting 1, running
  // and used 0).
  std::map<std::string, double> after;
  for (int i = 0; i < 50; ++i) {
    after = Scrape();
    if (after["octet_requests_waiting"] == 0 &&
        after["octet_requests_running"] == 0 &&
        after["octet_kv_blocks_used"] == 0) {
      break;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(
      delta(after, R"(octet_requests_total{code="OK",finish_reason="length"})"),
      2);
  EXPECT_EQ(
      delta(after, R"(octet_requests_total{code="OK",finish_reason="stop"})"),
      1);
  EXPECT_EQ(
      delta(
          after,
          R"(octet_requests_total{code="INVALID_ARGUMENT",finish_reason="none"})"),
      1);
  EXPECT_EQ(
      delta(after, R"(octet_requests_total{code="OK",finish_reason="eos"})"),
      0);
  EXPECT_EQ(delta(after, "octet_prompt_tokens_total"), 3.0 * kPrompt.size());
  EXPECT_EQ(delta(after, "octet_generation_tokens_total"),
            2 * kNew + stopped_after);
  EXPECT_EQ(delta(after, "octet_time_to_first_token_seconds_count"), 3);
  // One gap fewer than tokens, per request.
  EXPECT_EQ(delta(after, "octet_inter_token_latency_seconds_count"),
            2 * (kNew - 1) + stopped_after - 1);
  EXPECT_EQ(delta(after, "octet_e2e_request_latency_seconds_count"), 3);
  EXPECT_GT(delta(after, "octet_time_to_first_token_seconds_sum"), 0);
  EXPECT_EQ(after["octet_requests_waiting"], 0);
  EXPECT_EQ(after["octet_requests_running"], 0);
  EXPECT_EQ(after["octet_kv_blocks_used"], 0);
  EXPECT_EQ(after["octet_kv_blocks_free"], 2048 / 8);
  EXPECT_EQ(delta(after, "octet_worker_group_failures_total"), 0);
}

TEST_F(CoordinatorTest, ReflectionDescribesTheApiWithoutTheProto) {
  // What grpcurl does: list the services, then fetch the file that defines
  // octet.v1.Generation and read its methods from the descriptor.
  namespace refl = grpc::reflection::v1alpha;
  auto stub = refl::ServerReflection::NewStub(*channel_);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(10));
  auto stream = stub->ServerReflectionInfo(&context);
  refl::ServerReflectionRequest request;
  refl::ServerReflectionResponse response;
  request.set_list_services("");
  ASSERT_TRUE(stream->Write(request));
  ASSERT_TRUE(stream->Read(&response));
  std::set<std::string> services;
  for (const auto& s : response.list_services_response().service()) {
    services.insert(s.name());
  }
  EXPECT_TRUE(services.contains("octet.v1.Generation"));
  EXPECT_TRUE(services.contains("grpc.health.v1.Health"));
  EXPECT_FALSE(services.contains("octet.internal.v1.Worker"));  // internal
  request.set_file_containing_symbol("octet.v1.Generation");
  ASSERT_TRUE(stream->Write(request));
  ASSERT_TRUE(stream->Read(&response));
  ASSERT_TRUE(response.has_file_descriptor_response())
      << response.error_response().error_message();
  std::set<std::string> methods;
  for (const std::string& bytes :
       response.file_descriptor_response().file_descriptor_proto()) {
    google::protobuf::FileDescriptorProto file;
    ASSERT_TRUE(file.ParseFromString(bytes));
    if (file.package() != "octet.v1") continue;
    for (const auto& service : file.service()) {
      for (const auto& m : service.method()) {
        methods.insert(service.name() + "/" + m.name());
      }
    }
  }
  EXPECT_EQ(methods, (std::set<std::string>{"Generation/Generate",
                                            "Generation/GenerateStream",
                                            "Generation/GetModelInfo"}));
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
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

TEST_F(CoordinatorTest, PromptLogprobsAreOneRanksScores) {
  // TP = 2 through the API gives one in-process rank's scores bit for bit,
  // one per prompt token after the first, unary and in the stream's first
  // message.
  const std::vector<float> want =
      testing::Fp8PromptLogprobs(Model(), kPrompt);
  ASSERT_EQ(want.size(), kPrompt.size() - 1);
  v1::GenerateRequest request = Request(kPrompt, 3);
  request.set_prompt_logprobs(true);
  grpc::ClientContext context;
  v1::GenerateResponse unary;
  ASSERT_TRUE(Stub()->Generate(&context, request, &unary).ok());
  const std::vector<float> got(unary.prompt_logprobs().begin(),
                               unary.prompt_logprobs().end());
  ASSERT_EQ(got.size(), want.size());
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), 4 * want.size()));
  for (float v : got) EXPECT_LT(v, 0.0f);

  grpc::ClientContext sc;
  auto reader = Stub()->GenerateStream(&sc, request);
  v1::GenerateStreamResponse m;
  std::vector<int> sizes;
  while (reader->Read(&m)) sizes.push_back(m.prompt_logprobs_size());
  ASSERT_TRUE(reader->Finish().ok());
  ASSERT_FALSE(sizes.empty());
  EXPECT_EQ(sizes[0], static_cast<int>(want.size()));
  for (size_t i = 1; i < sizes.size(); ++i) EXPECT_EQ(sizes[i], 0);
  // Not asked for: none.
  grpc::ClientContext plain;
  ASSERT_TRUE(Stub()->Generate(&plain, Request(kPrompt, 3), &unary).ok());
  EXPECT_EQ(unary.prompt_logprobs_size(), 0);
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

// A request whose deadline passes while it runs ends there: the client gets
// DEADLINE_EXCEEDED and the server ends the request (counted CANCELLED).
// Whether a request can finish in time must not depend on the machine's
// speed (1000 tiny-model tokens once fit in 300 ms on a fast machine), so
// the workers are held (SIGSTOP) while it runs: its step cannot end before
// the deadline on any machine. They are let go well before their health
// check (2 s) would fail the group.
TEST_F(CoordinatorTest, AClientDeadlineEndsTheRequest) {
  const std::map<std::string, double> before = Scrape();
  const std::vector<pid_t> workers = testing::ChildrenOf(pid());
  ASSERT_EQ(workers.size(), 2u);
  for (pid_t w : workers) ASSERT_EQ(kill(w, SIGSTOP), 0);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::milliseconds(300));
  v1::GenerateResponse r;
  const grpc::Status s = Stub()->Generate(&context, Request(kPrompt, 100), &r);
  for (pid_t w : workers) kill(w, SIGCONT);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED)
      << s.error_message();
  // The server ends it once the held step returns.
  EXPECT_EQ(CancelledSince(before), 1)
      << "the server did not end the request within 30 s";
  // And goes on serving others, on the same group.
  grpc::ClientContext next;
  EXPECT_TRUE(Stub()->Generate(&next, Request(kPrompt, 3), &r).ok());
  EXPECT_EQ(Increase(before, Scrape(), "octet_worker_group_failures_total"), 0);
}

// The OpenAI-compatible HTTP API (--http_port) on the same engine: a
// greedy completion, whole and streamed, has the gRPC API's text.
nlohmann::json Completion(const std::vector<int32_t>& prompt, int max_tokens,
                          bool stream) {
  return {{"prompt", prompt},  {"max_tokens", max_tokens},
          {"temperature", 0},  {"ignore_eos", true},
          {"stream", stream}};
}

TEST_F(CoordinatorTest, HttpCompletionsHaveTheGrpcApisText) {
  grpc::ClientContext context;
  v1::GenerateResponse unary;
  ASSERT_TRUE(Stub()->Generate(&context, Request(kPrompt, 10), &unary).ok());

  httplib::Client http("127.0.0.1", http_port_);
  http.set_read_timeout(60);
  const httplib::Result health = http.Get("/health");
  ASSERT_TRUE(health) << httplib::to_string(health.error());
  EXPECT_EQ(health->status, 200);
  const httplib::Result whole = http.Post(
      "/v1/completions", Completion(kPrompt, 10, false).dump(),
      "application/json");
  ASSERT_TRUE(whole) << httplib::to_string(whole.error());
  ASSERT_EQ(whole->status, 200) << whole->body;
  const nlohmann::json answer = nlohmann::json::parse(whole->body);
  EXPECT_EQ(answer["choices"][0]["text"], unary.text());
  EXPECT_EQ(answer["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(answer["usage"]["completion_tokens"], 10);

  const httplib::Result streamed = http.Post(
      "/v1/completions", Completion(kPrompt, 10, true).dump(),
      "application/json");
  ASSERT_TRUE(streamed) << httplib::to_string(streamed.error());
  ASSERT_EQ(streamed->status, 200) << streamed->body;
  std::string text;
  std::istringstream events(streamed->body);
  std::string last;
  for (std::string line; std::getline(events, line);) {
    if (line.rfind("data: ", 0) != 0) continue;
    last = line;
    if (line == "data: [DONE]") break;
    text += nlohmann::json::parse(line.substr(6))["choices"][0]["text"]
                .get<std::string>();
  }
  EXPECT_EQ(last, "data: [DONE]");
  EXPECT_EQ(text, unary.text());
}

// A stream whose client goes away ends its request (CANCELLED), as a
// cancelled gRPC call does, though the server never wrote to it: the
// workers are held (SIGSTOP), so no token comes, and the stream must carry
// nothing meanwhile (only `data:` events, no SSE comment lines: any bytes
// fail the test and hang up) until the client's read time-out, longer than
// the server's one-second client check, hangs up; then the workers are let
// go (well before their 2 s health check would fail the group). The server
// finds the client gone by polling its socket, long before 1000 tokens are
// made on any machine.
TEST_F(CoordinatorTest, AnHttpStreamWhoseClientLeavesIsCancelled) {
  const std::map<std::string, double> before = Scrape();
  const std::vector<pid_t> workers = testing::ChildrenOf(pid());
  ASSERT_EQ(workers.size(), 2u);
  for (pid_t w : workers) ASSERT_EQ(kill(w, SIGSTOP), 0);
  httplib::Client http("127.0.0.1", http_port_);
  http.set_read_timeout(1, 500'000);  // 1.5 s, then it hangs up
  httplib::Request request;
  request.method = "POST";
  request.path = "/v1/completions";
  request.body = Completion(kPrompt, 1000, true).dump();
  request.set_header("Content-Type", "application/json");
  std::string received;
  request.content_receiver = [&](const char* data, size_t n, uint64_t,
                                 uint64_t) {
    received.append(data, n);
    return false;  // bytes while no token can come: wrong, hang up
  };
  const httplib::Result gone = http.send(request);
  http.stop();
  for (pid_t w : workers) kill(w, SIGCONT);
  EXPECT_FALSE(gone);
  EXPECT_EQ(received, "") << "an idle stream must carry nothing";
  EXPECT_EQ(CancelledSince(before), 1)
      << "the server did not end the request within 30 s";
  EXPECT_EQ(Increase(before, Scrape(), "octet_worker_group_failures_total"), 0);
}

// A non-streaming request whose client leaves (here: its read time-out)
// ends too, with the workers held so that it cannot end first.
TEST_F(CoordinatorTest, AnHttpRequestWhoseClientLeavesIsCancelled) {
  const std::map<std::string, double> before = Scrape();
  const std::vector<pid_t> workers = testing::ChildrenOf(pid());
  ASSERT_EQ(workers.size(), 2u);
  for (pid_t w : workers) ASSERT_EQ(kill(w, SIGSTOP), 0);
  httplib::Client http("127.0.0.1", http_port_);
  http.set_read_timeout(0, 300'000);  // 300 ms, then it hangs up
  const httplib::Result gone = http.Post(
      "/v1/completions", Completion(kPrompt, 1000, false).dump(),
      "application/json");
  http.stop();
  for (pid_t w : workers) kill(w, SIGCONT);
  EXPECT_FALSE(gone);
  EXPECT_EQ(CancelledSince(before), 1)
      << "the server did not end the request within 30 s";
  EXPECT_EQ(Increase(before, Scrape(), "octet_worker_group_failures_total"), 0);
}

TEST_F(CoordinatorTest, HttpErrorsAreOpenAisErrorObject) {
  httplib::Client http("127.0.0.1", http_port_);
  const httplib::Result bad =
      http.Post("/v1/completions", "{", "application/json");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  EXPECT_NE(bad->body.find("not valid JSON"), std::string::npos) << bad->body;
  nlohmann::json body = Completion(kPrompt, 5, false);
  body["max_tokens"] = 100000;
  const httplib::Result big =
      http.Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(big);
  EXPECT_EQ(big->status, 400);
  EXPECT_EQ(nlohmann::json::parse(big->body)["error"]["param"], "max_tokens")
      << big->body;
  body["max_tokens"] = 5;
  body["model"] = "not-this-one";
  const httplib::Result other =
      http.Post("/v1/completions", body.dump(), "application/json");
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 404) << other->body;
  // The tiny preset has no chat template: chat says so, by field.
  const httplib::Result chat = http.Post(
      "/v1/chat/completions",
      R"({"messages": [{"role": "user", "content": "hi"}]})",
      "application/json");
  ASSERT_TRUE(chat);
  EXPECT_EQ(chat->status, 400);
  EXPECT_NE(chat->body.find("no chat template"), std::string::npos)
      << chat->body;
}

// A greedy stream of `max_new` tokens during which rank 1 of the serving
// group gets `sig`, read to its end.
struct StreamRead {
  grpc::Status status;
  v1::GenerateStreamResponse last;
  std::vector<int32_t> tokens;
  double longest_gap = 0;  // seconds between two messages, at most
  double seconds = 0;      // from the signal to the end
};

StreamRead StreamThroughASignal(int sig, int max_new) {
  StreamRead out;
  grpc::ClientContext context;
  auto reader = CoordinatorTest::Stub()->GenerateStream(
      &context, CoordinatorTest::Request(kPrompt, max_new));
  v1::GenerateStreamResponse& m = out.last;
  if (!reader->Read(&m)) {  // generating
    out.status = reader->Finish();
    return out;
  }
  out.tokens.assign(m.token_ids().begin(), m.token_ids().end());
  const std::vector<pid_t> workers =
      testing::ChildrenOf(CoordinatorTest::pid());
  EXPECT_EQ(workers.size(), 2u);
  const absl::Time start = absl::Now();
  if (workers.size() == 2) kill(workers[1], sig);
  absl::Time last = start;
  while (reader->Read(&m)) {
    const absl::Time now = absl::Now();
    out.longest_gap =
        std::max(out.longest_gap, absl::ToDoubleSeconds(now - last));
    last = now;
    out.tokens.insert(out.tokens.end(), m.token_ids().begin(),
                      m.token_ids().end());
  }
  out.status = reader->Finish();
  out.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  return out;
}

// A worker killed mid-stream loses nothing: the coordinator replaces the
// group, the request resumes where it was, and the client's stream just
// continues -- to exactly the tokens an undisturbed run gives.
TEST_F(CoordinatorTest, AKilledWorkersStreamContinuesOnTheNewGroup) {
  const std::map<std::string, double> before = Scrape();
  constexpr int kNew = 400;  // GreedyFp8Tokens' cache holds 512 tokens
  const StreamRead r = StreamThroughASignal(SIGKILL, kNew);
  EXPECT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.last.finish_reason(), v1::FINISH_REASON_LENGTH);
  EXPECT_EQ(r.tokens, Expected(kPrompt, kNew));
  // Alive all along (a liveness probe must not restart the pod for this).
  EXPECT_EQ(CheckHealth(*channel_, "liveness").second, kServing);
  const std::map<std::string, double> after = Scrape();
  EXPECT_EQ(Increase(before, after, "octet_worker_group_failures_total"), 1);
  EXPECT_EQ(
      Increase(before, after,
               R"(octet_requests_total{code="OK",finish_reason="length"})"),
      1);
  EXPECT_EQ(
      Increase(
          before, after,
          R"(octet_requests_total{code="UNAVAILABLE",finish_reason="none"})"),
      0);
  std::printf(
      "[ measured ] worker killed mid-stream: the stream paused %.2f s at "
      "most and ended OK with all %d tokens, %.2f s after the kill\n",
      r.longest_gap, kNew, r.seconds);
}

// A worker stopped with SIGSTOP (stuck: alive, answering nothing) stalls
// the stream only until its health check fails (2 s); the group is
// replaced and the stream continues to the undisturbed run's tokens.
TEST_F(CoordinatorTest, AStoppedWorkersStreamContinuesOnTheNewGroup) {
  constexpr int kNew = 300;
  const StreamRead r = StreamThroughASignal(SIGSTOP, kNew);
  EXPECT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.tokens, Expected(kPrompt, kNew));
  // Health check (2 s), the old group's end, the new one's load: seconds
  // (~8 s on 2 cores; more under a sanitizer), not the 5-minute step
  // timeout a stopped rank would otherwise hold the step for.
  EXPECT_LT(r.longest_gap, 60.0);
  std::printf(
      "[ measured ] worker stopped (SIGSTOP) mid-stream: the stream paused "
      "%.2f s at most and ended OK with all %d tokens\n",
      r.longest_gap, kNew);
}

// A step the workers do not finish within --step_timeout (here 1 ms: every
// long prefill) fails their group, which is replaced; the request, failing in
// every group, ends UNAVAILABLE saying why, and the server lives on.
TEST_F(CoordinatorTest, AStepPastStepTimeoutFailsItsGroupSayingSo) {
  const int port = testing::FreeTcpPort();
  testing::Child server({testing::SiblingProgram("coordinator"),
                         "--model=" + Model(), "--tp=2", "--device=cpu",
                         absl::StrCat("--port=", port), "--threads=1",
                         "--kv_cache_tokens=1024", "--step_timeout=1ms"});
  ASSERT_TRUE(server.started());
  auto stub = v1::Generation::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(60));
  context.set_wait_for_ready(true);  // the server may not listen yet
  v1::GenerateResponse r;
  // An 800-token prefill: milliseconds even for the tiny model (a short
  // step can finish within 1 ms).
  std::vector<int32_t> prompt(800);
  for (int i = 0; i < 800; ++i) prompt[i] = 3 + i % 500;
  const grpc::Status s = stub->Generate(&context, Request(prompt, 4), &r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  EXPECT_NE(s.error_message().find("within the step timeout (1ms)"),
            std::string::npos)
      << s.error_message();
  EXPECT_EQ(kill(server.pid(), 0), 0);  // still running
}

// --drain_timeout of the drain test: 60s, or OCTET_TEST_DRAIN_TIMEOUT (set
// to 5s by hand, the old fixed cut, the test fails: queued streams end
// UNAVAILABLE; the TSan run sets it longer, scripts/sanitizer-test.sh). The
// test waits that long for the exit, plus 10 s.
std::string DrainTimeoutForTest() {
  const char* v = std::getenv("OCTET_TEST_DRAIN_TIMEOUT");
  return v != nullptr ? v : "60s";
}

// SIGTERM drains: health NOT_SERVING and new requests UNAVAILABLE at once,
// while the running and queued requests -- more than the 5 s the server used
// to give them before cutting them off -- run to their end; clients that
// cancel or read slowly change nothing; the process exits 0 once idle.
TEST_F(CoordinatorTest, SigtermDrainsRunningAndQueuedRequests) {
  const int port = testing::FreeTcpPort(), metrics = testing::FreeTcpPort();
  testing::Child server(
      {testing::SiblingProgram("coordinator"), "--model=" + Model(), "--tp=2",
       "--quantization=fp8", "--device=cpu", absl::StrCat("--port=", port),
       "--kv_cache_tokens=4096", "--block_size=8", "--threads=1",
       "--max_running=2", "--drain_timeout=" + DrainTimeoutForTest(),
       absl::StrCat("--metrics_port=", metrics)});
  ASSERT_TRUE(server.started());
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", port),
                                     grpc::InsecureChannelCredentials());
  auto stub = v1::Generation::NewStub(channel);
  ASSERT_TRUE(testing::WaitUntilServing(*stub, absl::Seconds(60)))
      << "not serving within 60 s";
  // Sixteen long streams, two at a time: the queue outlasts 5 s here (~9 s
  // on 2 cores). Two clients cancel mid-stream, one reads slowly.
  constexpr int kStreams = 16, kNew = 1000;
  struct Result {
    grpc::Status status;
    int tokens = 0;
  };
  std::vector<Result> results(kStreams);
  std::atomic<int> started{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < kStreams; ++i) {
    clients.emplace_back([&, i] {
      grpc::ClientContext context;
      auto reader = stub->GenerateStream(&context, Request({1, 5, 9}, kNew));
      v1::GenerateStreamResponse m;
      bool counted = false;
      while (reader->Read(&m)) {
        results[i].tokens += m.token_ids_size();
        if (!counted) started.fetch_add(1), counted = true;
        if (i < 2 && results[i].tokens >= 20) context.TryCancel();
        if (i == 2) absl::SleepFor(absl::Milliseconds(2));
      }
      results[i].status = reader->Finish();
    });
  }
  while (started.load() < 2) absl::SleepFor(absl::Milliseconds(10));
  // Every stream is in the server (running, queued or ended) before the
  // signal: one that had not arrived yet would be refused, rightly, and the
  // test would measure the machine's speed (a loaded TSan run sent the
  // signal before the 16th stream arrived).
  const absl::Time arrive_by = absl::Now() + absl::Seconds(120);
  for (double in_server = 0; in_server < kStreams;) {
    ASSERT_LT(absl::Now(), arrive_by)
        << in_server << " of " << kStreams << " streams reached the server";
    absl::SleepFor(absl::Milliseconds(20));
    in_server = 0;
    for (const auto& [name, value] : Scrape(metrics)) {
      if (name == "octet_requests_running" ||
          name == "octet_requests_waiting" ||
          name.starts_with("octet_requests_total{")) {
        in_server += value;
      }
    }
  }
  const absl::Time sigterm = absl::Now();
  ASSERT_EQ(kill(server.pid(), SIGTERM), 0);
  // Once the signal is seen (within ~0.1 s), a new request is refused at
  // once. Probes with a short deadline, since one sent before that queues.
  grpc::Status refused;
  while (absl::Now() - sigterm < absl::Seconds(5)) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::milliseconds(200));
    v1::GenerateResponse r;
    refused = stub->Generate(&context, Request({1, 5, 9}, 1), &r);
    if (refused.error_code() == grpc::StatusCode::UNAVAILABLE) break;
  }
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE)
      << refused.error_message();
  for (std::thread& t : clients) t.join();
  absl::Duration drain_timeout;
  ASSERT_TRUE(absl::ParseDuration(DrainTimeoutForTest(), &drain_timeout));
  const int code = server.Wait(drain_timeout + absl::Seconds(10));
  const double drained = absl::ToDoubleSeconds(absl::Now() - sigterm);
  EXPECT_EQ(code, 0);
  for (int i = 0; i < kStreams; ++i) {
    if (i < 2) {
      EXPECT_EQ(results[i].status.error_code(), grpc::StatusCode::CANCELLED)
          << "client " << i;
      continue;
    }
    EXPECT_TRUE(results[i].status.ok())
        << "client " << i << ": " << results[i].status.error_message();
    EXPECT_EQ(results[i].tokens, kNew) << "client " << i;
  }
  std::printf(
      "[ measured ] SIGTERM with %d streams (2 cancelled, 1 slow reader, "
      "2 running at a time): drained and exited after %.2f s\n",
      kStreams, drained);
}

// Stderr of `coordinator ARGS` (run to its end, at most 60 s) and its
// exit code.
std::pair<int, std::string> RunCoordinator(const std::string& args,
                                           const std::string& log) {
  const std::vector<std::string> command = {
      "/bin/sh", "-c",
      absl::StrCat(testing::SiblingProgram("coordinator"), " ", args, " 2>",
                   log)};
  const std::vector<int> codes =
      testing::RunTogether({command}, absl::Seconds(60));
  std::ifstream in(log);
  return {codes.at(0), std::string((std::istreambuf_iterator<char>(in)),
                                   std::istreambuf_iterator<char>())};
}

// SIGTERM while the workers are still starting (here a "worker" that
// accepts the connection and never speaks) ends the start at once: the
// coordinator exits 0 within seconds, not after the 30 s start timeout (or
// a load's 30 minutes) it used to wait out.
TEST_F(CoordinatorTest, SigtermWhileWorkersStartExitsAtOnce) {
  const int silent = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(bind(silent, reinterpret_cast<sockaddr*>(&addr), len), 0);
  ASSERT_EQ(listen(silent, 4), 0);
  ASSERT_EQ(getsockname(silent, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const std::string token = (*dir_ / "start_token").string();
  std::ofstream(token) << "a-token-for-a-worker-that-never-answers\n";
  testing::Child server(
      {testing::SiblingProgram("coordinator"), "--model=" + Model(), "--tp=1",
       "--device=cpu", "--port=0", "--token_file=" + token,
       absl::StrCat("--workers=127.0.0.1:", ntohs(addr.sin_port))});
  ASSERT_TRUE(server.started());
  absl::SleepFor(absl::Seconds(2));  // connecting to the silent worker
  const absl::Time sigterm = absl::Now();
  ASSERT_EQ(kill(server.pid(), SIGTERM), 0);
  const int code = server.Wait(absl::Seconds(60));
  const double seconds = absl::ToDoubleSeconds(absl::Now() - sigterm);
  close(silent);
  EXPECT_EQ(code, 0);
  EXPECT_LT(seconds, 5.0);
  std::printf(
      "[ measured ] SIGTERM while the workers start: exit %d after %.2f s\n",
      code, seconds);
}

// A TP degree the model cannot be split by is known from config.json: one
// line naming the dimension and exit code 2, before any worker starts (it
// used to restart the failing group every second without end).
TEST_F(CoordinatorTest, ATpTheModelCannotSplitExitsWithCodeTwo) {
  const auto [code, text] = RunCoordinator(
      absl::StrCat("--model=", Model(), " --tp=3 --device=cpu --port=0"),
      (*dir_ / "tp3.log").string());
  EXPECT_EQ(code, 2) << text;
  EXPECT_NE(text.find("num_attention_heads = 4 does not divide by the 3"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("starting"), std::string::npos) << text;
}

// A KV cache the machine's memory cannot hold is known from config.json and
// the flags: exit code 2 with the sizes, before any worker starts (the
// load used to fail, or wake the OOM killer, in every new group).
TEST_F(CoordinatorTest, AModelBeyondTheMachinesMemoryExitsWithCodeTwo) {
  const auto [code, text] = RunCoordinator(
      absl::StrCat(
          "--model=", Model(),
          " --tp=2 --device=cpu --port=0 --kv_cache_tokens=", int64_t{1} << 40),
      (*dir_ / "memory.log").string());
  EXPECT_EQ(code, 2) << text;
  EXPECT_NE(text.find("the workers need at least"), std::string::npos) << text;
  EXPECT_NE(text.find("lower --kv_cache_tokens"), std::string::npos) << text;
  EXPECT_EQ(text.find("starting"), std::string::npos) << text;
}

// A checkpoint whose weights are cut short fails every load the same way:
// after --max_start_failures tries the coordinator gives up, saying why,
// and exits 1 for its supervisor to see (it used to retry for ever).
TEST_F(CoordinatorTest, ALoadThatFailsAlikeEachTimeIsGivenUpOn) {
  const fs::path broken = *dir_ / "broken";
  fs::copy(Model(), broken, fs::copy_options::recursive);
  int cut = 0;
  for (const auto& e : fs::directory_iterator(broken)) {
    if (e.path().extension() != ".safetensors") continue;
    fs::resize_file(e.path(), fs::file_size(e.path()) / 2);
    ++cut;
  }
  ASSERT_GT(cut, 0);
  const auto [code, text] =
      RunCoordinator(absl::StrCat("--model=", broken.string(),
                                  " --tp=2 --device=cpu --threads=1 --port=0 "
                                  "--max_start_failures=2"),
                     (*dir_ / "giveup.log").string());
  EXPECT_EQ(code, 1) << text;
  EXPECT_NE(text.find("giving up: the model cannot be served: its workers "
                      "failed to start 2 times in a row with: worker rank"),
            std::string::npos)
      << text;
}

// A coordinator of its own on `model` (default flags, one CPU thread), and
// a stub once it serves (null if it did not within 60 s).
struct Served {
  std::unique_ptr<testing::Child> server;
  std::unique_ptr<v1::Generation::Stub> stub;
};
Served Serve(const std::string& model,
             const std::vector<std::string>& flags = {}) {
  const int port = testing::FreeTcpPort();
  Served s;
  std::vector<std::string> argv = {
      testing::SiblingProgram("coordinator"), "--model=" + model,
      "--device=cpu", "--threads=1", absl::StrCat("--port=", port)};
  argv.insert(argv.end(), flags.begin(), flags.end());
  s.server = std::make_unique<testing::Child>(argv);
  auto stub = v1::Generation::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  if (s.server->started() &&
      testing::WaitUntilServing(*stub, absl::Seconds(60))) {
    s.stub = std::move(stub);
  }
  return s;
}

// An FP8 checkpoint (written by `octet quantize`) needs no flag: the
// default --quantization auto serves it as its config.json says, and
// --quantization none, which cannot serve e4m3 weights, is refused naming
// both before any worker starts.
TEST_F(CoordinatorTest, AnFp8CheckpointIsServedAsItsConfigSays) {
  const std::string fp8 = (*dir_ / "tiny_fp8").string();
  ASSERT_EQ(testing::RunTogether({{testing::SiblingProgram("octet"), "quantize",
                                   "--in=" + Model(), "--out=" + fp8}},
                                 absl::Seconds(60)),
            std::vector<int>{0});
  const auto [code, text] = RunCoordinator(
      absl::StrCat("--model=", fp8, " --quantization=none --device=cpu"),
      (*dir_ / "fp8_none.log").string());
  EXPECT_EQ(code, 2) << text;
  EXPECT_NE(
      text.find("--quantization none, but " + fp8 + " is an FP8 checkpoint"),
      std::string::npos)
      << text;

  const Served served = Serve(fp8);
  ASSERT_NE(served.stub, nullptr);
  v1::Generation::Stub* stub = served.stub.get();
  grpc::ClientContext context;
  v1::ModelInfo info;
  ASSERT_TRUE(stub->GetModelInfo(&context, {}, &info).ok());
  EXPECT_EQ(info.quantization(), "fp8");
  EXPECT_EQ(info.quantization_scheme(), "fp8-tensor");
  grpc::ClientContext generate;
  v1::GenerateResponse response;
  const grpc::Status s =
      stub->Generate(&generate, Request(kPrompt, 4), &response);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(response.token_ids_size(), 4);
}

// A full queue is RESOURCE_EXHAUSTED over gRPC and 429 over HTTP. One
// sequence runs at a time and one may wait; the workers are held (SIGSTOP,
// for well under their 2 s health check) once the first runs, so that it
// cannot end and free its place on any machine.
TEST_F(CoordinatorTest, AFullQueueIsHttp429) {
  const int http_port = testing::FreeTcpPort();
  const int metrics_port = testing::FreeTcpPort();
  const Served served =
      Serve(Model(), {"--max_running=1", "--max_queue=1",
                      absl::StrCat("--http_port=", http_port),
                      absl::StrCat("--metrics_port=", metrics_port)});
  ASSERT_NE(served.stub, nullptr);
  grpc::ClientContext running_context, waiting_context;
  auto running =
      served.stub->GenerateStream(&running_context, Request(kPrompt, 1000));
  v1::GenerateStreamResponse first;
  ASSERT_TRUE(running->Read(&first));  // it runs
  const std::vector<pid_t> workers = testing::ChildrenOf(served.server->pid());
  ASSERT_EQ(workers.size(), 1u);
  ASSERT_EQ(kill(workers[0], SIGSTOP), 0);
  auto waiting =
      served.stub->GenerateStream(&waiting_context, Request(kPrompt, 4));
  const std::string queued = "octet_requests_waiting";
  for (int i = 0; i < 100 && Scrape(metrics_port)[queued] < 1; ++i) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(Scrape(metrics_port)[queued], 1);
  httplib::Client http("127.0.0.1", http_port);
  const httplib::Result refused = http.Post(
      "/v1/completions", Completion(kPrompt, 4, false).dump(),
      "application/json");
  kill(workers[0], SIGCONT);
  ASSERT_TRUE(refused) << httplib::to_string(refused.error());
  EXPECT_EQ(refused->status, 429) << refused->body;
  EXPECT_EQ(nlohmann::json::parse(refused->body)["error"]["type"],
            "rate_limit_error");
  EXPECT_NE(refused->body.find("the queue is full"), std::string::npos);
  running_context.TryCancel();
  waiting_context.TryCancel();
}

// A Llama 3-style checkpoint with only tokenizer.json (make-model
// --tokenizer json) serves text: the prompt tokenized as the tokenizer
// says (BOS from its template), the streamed text the decode of the ids.
TEST_F(CoordinatorTest, ACheckpointWithOnlyTokenizerJsonServesText) {
  const std::string dir = (*dir_ / "tiny_json").string();
  ASSERT_EQ(testing::RunTogether(
                {{testing::SiblingProgram("octet"), "make-model",
                  "--preset=tiny", "--tokenizer=json", "--out=" + dir}},
                absl::Seconds(60)),
            std::vector<int>{0});
  ASSERT_FALSE(fs::exists(fs::path(dir) / "tokenizer.model"));
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::Load(dir);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const Served served = Serve(dir);
  ASSERT_NE(served.stub, nullptr);
  v1::Generation::Stub* stub = served.stub.get();
  const std::string prompt = "Hello, world! Quantization stores weights.";
  v1::GenerateRequest request;
  request.set_text(prompt);
  request.mutable_sampling()->set_temperature(0.0f);
  request.mutable_stopping()->set_max_new_tokens(12);
  request.mutable_stopping()->set_ignore_eos(true);
  grpc::ClientContext context;
  auto reader = stub->GenerateStream(&context, request);
  v1::GenerateStreamResponse m;
  std::vector<int64_t> ids;
  std::string text;
  uint32_t prompt_tokens = 0;
  while (reader->Read(&m)) {
    ids.insert(ids.end(), m.token_ids().begin(), m.token_ids().end());
    text += m.text();
    if (m.has_usage()) prompt_tokens = m.usage().prompt_tokens();
  }
  const grpc::Status s = reader->Finish();
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(prompt_tokens, (*tokenizer)->Encode(prompt, true).size());
  EXPECT_EQ(ids.size(), 12u);
  EXPECT_EQ(text, (*tokenizer)->Decode(ids));
}

// Chat on a SentencePiece tokenizer.model, with a Llama 2-style template
// that writes "<s>" and "</s>" as text: they become the BOS and EOS ids
// (SentencePiece would spell them out), the rest encoded between them,
// and the answer is the gRPC API's for those ids.
TEST_F(CoordinatorTest, ChatWithSentencePieceTurnsSpecialTextIntoIds) {
  const fs::path dir = *dir_ / "tiny_chat";
  fs::remove_all(dir);
  fs::copy(Model(), dir, fs::copy_options::recursive);
  ASSERT_TRUE(fs::exists(dir / "tokenizer.model"));
  std::ofstream(dir / "tokenizer_config.json")
      << R"({"bos_token": "<s>", "eos_token": "</s>", "chat_template":
      "{% for m in messages %}{% if m.role == 'user' %}{{ bos_token }}[INST] {{ m.content }} [/INST]{% else %} {{ m.content }}{{ eos_token }}{% endif %}{% endfor %}"})";
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
      Tokenizer::Load(dir.string());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const Tokenizer& t = **tokenizer;
  ASSERT_GE(t.bos_id(), 0);
  ASSERT_GE(t.eos_id(), 0);
  std::vector<int64_t> want = {t.bos_id()};
  for (int64_t id : t.Encode("[INST] Hi there [/INST] ok", false)) {
    want.push_back(id);
  }
  want.push_back(t.eos_id());
  want.push_back(t.bos_id());
  for (int64_t id : t.Encode("[INST] And now? [/INST]", false)) {
    want.push_back(id);
  }

  const int http_port = testing::FreeTcpPort();
  const Served served =
      Serve(dir.string(), {absl::StrCat("--http_port=", http_port)});
  ASSERT_NE(served.stub, nullptr);
  grpc::ClientContext context;
  v1::GenerateResponse grpc_answer;
  ASSERT_TRUE(served.stub
                  ->Generate(&context,
                             Request(std::vector<int32_t>(want.begin(),
                                                          want.end()),
                                     8),
                             &grpc_answer)
                  .ok());
  httplib::Client http("127.0.0.1", http_port);
  const nlohmann::json body = {
      {"messages",
       {{{"role", "user"}, {"content", "Hi there"}},
        {{"role", "assistant"}, {"content", "ok"}},
        {{"role", "user"}, {"content", "And now?"}}}},
      {"max_tokens", 8},
      {"temperature", 0},
      {"ignore_eos", true}};
  const httplib::Result chat =
      http.Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(chat) << httplib::to_string(chat.error());
  ASSERT_EQ(chat->status, 200) << chat->body;
  const nlohmann::json answer = nlohmann::json::parse(chat->body);
  EXPECT_EQ(answer["usage"]["prompt_tokens"], want.size());
  EXPECT_EQ(answer["choices"][0]["message"]["content"], grpc_answer.text());
}

TEST(CoordinatorFlags, BadFlagsExitWithCodeTwo) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{
           {"--model=/nonexistent/model"},
           {"--model=/tmp", "--tp=0"},
           {"--model=/tmp", "--quantization=int4"},
           {"--model=/tmp", "--device=tpu"},
           {"--model=/tmp", "--tp=2", "--workers=a:1"},
           {"--model=/tmp", "--tp=2", "--workers=a:1,b"},
           {"--model=/tmp", "--tp=2", "--gpus=0"},
           {"--model=/tmp", "--tp=2", "--gpus=0,-1"},
           {"--model=/tmp", "--tp=2", "--gpus=0,x"},
           {"--model=/tmp", "--transport=rdma"},
           {"--model=/tmp", "--transport=nccl", "--device=cpu"},
           {"--model=/tmp", "--metrics_port=70000"},
           {"--model=/tmp", "--rendezvous_port=-1"},
           {"--model=/tmp", "--step_timeout=0s"},
           {"--model=/tmp", "--max_start_failures=-1"},
           {"--model=/tmp", "--http_port=70000"},
           {"--model=/tmp", "--port=5000", "--http_port=5000"},
           {"--model=/tmp", "--http_max_connections=0"},
           {"--model=/tmp", "--served_model_name=a\"b"}}) {
    std::vector<std::string> command = {testing::SiblingProgram("coordinator")};
    command.insert(command.end(), args.begin(), args.end());
    EXPECT_EQ(testing::RunTogether({command}, absl::Seconds(20)),
              std::vector<int>{2})
        << args.back();
  }
}

}  // namespace
}  // namespace octet
