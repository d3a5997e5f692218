// The public service's request checking (coordinator/generation_service.h)
// in this process, over an engine whose workers never start (requests only
// queue): text is tokenized on the service's own "octet-tokenize" threads,
// never on a gRPC thread, and no more requests wait to be checked than
// the service allows (RESOURCE_EXHAUSTED beyond).
#include "coordinator/generation_service.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <pthread.h>

#include <atomic>
#include <thread>

#include "absl/synchronization/notification.h"

namespace octet {
namespace {

// An engine that queues requests: its worker group never starts.
std::unique_ptr<Engine> QueueOnlyEngine() {
  EngineOptions o;
  o.scheduler = {.num_blocks = 64, .block_size = 8};
  o.start_group =
      [](StartCancel&) -> absl::StatusOr<std::unique_ptr<WorkerGroup>> {
    return absl::UnavailableError("no workers in this test");
  };
  o.max_restart_backoff = absl::Seconds(1);
  auto engine = Engine::Start(std::move(o));
  EXPECT_TRUE(engine.ok()) << engine.status();
  return *std::move(engine);
}

std::string ThisThreadsName() {
  char name[16] = {};
  pthread_getname_np(pthread_self(), name, sizeof(name));
  return name;
}

// A text request, given up on by the client after `ms`.
grpc::Status Generate(grpc::Channel& channel, int ms) {
  auto stub = v1::Generation::NewStub(
      std::shared_ptr<grpc::Channel>(&channel, [](grpc::Channel*) {}));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::milliseconds(ms));
  v1::GenerateRequest request;
  request.set_text("hello");
  v1::GenerateResponse response;
  return stub->Generate(&context, request, &response);
}

struct Served {
  std::unique_ptr<Engine> engine = QueueOnlyEngine();
  std::unique_ptr<GenerationService> service;
  std::unique_ptr<grpc::Server> server;
  std::shared_ptr<grpc::Channel> channel;

  Served(EncodeFn encode, int check_threads, int max_checking) {
    ModelLimits limits;
    limits.vocab_size = 100;
    limits.max_context = 64;
    service = std::make_unique<GenerationService>(
        *engine, limits, std::move(encode), v1::ModelInfo(), nullptr,
        check_threads, max_checking);
    grpc::ServerBuilder builder;
    builder.RegisterService(service.get());
    server = builder.BuildAndStart();
    channel = server->InProcessChannel(grpc::ChannelArguments());
  }
  ~Served() {
    server->Shutdown(std::chrono::system_clock::now());
    server->Wait();
  }
};

TEST(GenerationServiceTest, TextIsTokenizedOffTheGrpcThreads) {
  absl::Mutex mu;
  std::vector<std::string> threads;
  Served s(
      [&](const std::string&) {
        absl::MutexLock lock(&mu);
        threads.push_back(ThisThreadsName());
        return std::vector<int64_t>{1, 2, 3};
      },
      /*check_threads=*/2, /*max_checking=*/16);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(Generate(*s.channel, 200).error_code(),
              grpc::StatusCode::DEADLINE_EXCEEDED);  // queued: no workers
  }
  absl::MutexLock lock(&mu);
  EXPECT_EQ(threads, std::vector<std::string>(4, "octet-tokenize"));
}

TEST(GenerationServiceTest, NoMoreRequestsWaitToBeCheckedThanAllowed) {
  absl::Notification release;
  std::atomic<int> encoding{0};
  Served s(
      [&](const std::string&) {
        ++encoding;
        release.WaitForNotification();  // a very slow tokenizer
        return std::vector<int64_t>{1, 2, 3};
      },
      /*check_threads=*/1, /*max_checking=*/1);
  // One is being tokenized, one waits; the third is refused at once.
  std::thread first([&] { Generate(*s.channel, 1500); });
  while (encoding.load() == 0) absl::SleepFor(absl::Milliseconds(5));
  std::thread second([&] { Generate(*s.channel, 1500); });
  absl::SleepFor(absl::Milliseconds(200));
  const grpc::Status third = Generate(*s.channel, 1500);
  EXPECT_EQ(third.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << third.error_message();
  release.Notify();
  first.join();
  second.join();
  EXPECT_EQ(encoding.load(), 2);
}

}  // namespace
}  // namespace octet
