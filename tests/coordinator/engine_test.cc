// The coordinator's step loop (coordinator/engine.h) over a real TP = 2
// worker group (tiny preset, FP8): concurrent requests get what one rank
// generates alone, as tokens and as text; stop tokens and stop strings end
// a request where they should; cancellation; the queue limit; a worker
// killed mid-generation: the running requests resume on the replacement
// group where they were; a step stuck on a stopped worker, during which
// requests still queue and cancel; and groups that cannot start: backed
// off, and given up on when they fail alike max_start_failures times.
#include "coordinator/engine.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "kernels/cpu/backend.h"
#include "model/synthetic.h"
#include "model/tokenizer.h"
#include "tests/process_util.h"
#include "tests/worker/model_test_util.h"
#include "worker/generator.h"

namespace octet {
namespace {

namespace fs = std::filesystem;

// What a request received, filled by its callbacks.
struct Received {
  absl::Mutex mu;
  std::vector<int32_t> tokens;
  std::string text;
  int deltas = 0;
  Outcome outcome;
  absl::Notification first, done;

  RequestCallbacks Callbacks() {
    return {.on_delta =
                [this](const Delta& d) {
                  absl::MutexLock lock(&mu);
                  tokens.insert(tokens.end(), d.token_ids.begin(),
                                d.token_ids.end());
                  text += d.text;
                  if (deltas++ == 0) first.Notify();
                },
            .on_done =
                [this](const Delta& d, const Outcome& o) {
                  {
                    absl::MutexLock lock(&mu);
                    text += d.text;
                    outcome = o;
                  }
                  if (!first.HasBeenNotified()) first.Notify();
                  done.Notify();
                }};
  }
};

class EngineTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() /
                        absl::StrCat("octet_engine_", ::getpid()));
    ASSERT_TRUE(
        WriteSyntheticCheckpoint(*SyntheticPreset("tiny"), {.seed = 6}, Model())
            .ok());
    auto t = Tokenizer::Load(Model());
    ASSERT_TRUE(t.ok()) << t.status();
    tokenizer_ = t->release();
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    fs::remove_all(*dir_);
    delete dir_;
  }
  static std::string Model() { return (*dir_ / "tiny").string(); }
  // One rank's greedy FP8 tokens, in this process.
  static std::vector<int32_t> Expected(const std::vector<int32_t>& prompt,
                                       int max_new) {
    return testing::GreedyFp8Tokens(Model(), prompt, max_new);
  }

  // An engine over TP = 2 worker groups; `groups_` sees each new one.
  std::unique_ptr<Engine> Start(
      int64_t max_running = 8, int64_t max_waiting = 64,
      int max_group_failures = 3,
      absl::Duration health_timeout = absl::Seconds(2)) {
    EngineOptions o;
    o.scheduler = {.num_blocks = 64,
                   .block_size = 8,
                   .max_tokens_per_step = 64,
                   .max_running = max_running,
                   .max_waiting = max_waiting};
    o.start_group = [this, health_timeout](StartCancel& cancel)
        -> absl::StatusOr<std::unique_ptr<WorkerGroup>> {
      {
        absl::MutexLock lock(&mu_);
        // A replacement waits while the test holds it (to see the gap).
        mu_.Await(absl::Condition(
            +[](bool* hold) { return !*hold; }, &hold_replacement_));
      }
      WorkerGroupOptions g;
      g.tp = 2;
      g.worker_program = testing::SiblingProgram("worker");
      g.load.set_model_dir(Model());
      g.load.set_quantization(internal::v1::QUANTIZATION_FP8);
      g.load.set_global_weight_scale(true);
      g.load.set_transport(internal::v1::TRANSPORT_SHM);
      g.load.set_device(internal::v1::DEVICE_CPU);
      g.load.set_kv_blocks(64);
      g.load.set_kv_block_size(8);
      g.load.set_threads(1);
      g.health_timeout = health_timeout;
      auto group = WorkerGroup::Start(g, nullptr, &cancel);
      if (group.ok()) {
        absl::MutexLock lock(&mu_);
        pids_ = (*group)->pids();
        ++groups_;
      }
      return group;
    };
    o.tokenizer = tokenizer_;
    o.restart_backoff = absl::Milliseconds(200);
    o.max_group_failures = max_group_failures;
    auto e = Engine::Start(std::move(o));
    EXPECT_TRUE(e.ok()) << e.status();
    return *std::move(e);
  }

  static ValidRequest Greedy(std::vector<int32_t> prompt, int64_t max_new) {
    ValidRequest r;
    r.prompt = std::move(prompt);
    r.temperature = 0.0f;
    r.max_new_tokens = max_new;
    return r;
  }

  static std::string Text(const std::vector<int32_t>& ids) {
    return tokenizer_->Decode(std::vector<int64_t>(ids.begin(), ids.end()));
  }

  // Kills rank 1 of the current group while the test holds the replacement
  // back; returns once the engine has seen the failure (not serving).
  void KillRankOneAndWaitForTheFailure(Engine& engine) {
    pid_t victim;
    {
      absl::MutexLock lock(&mu_);
      victim = pids_.at(1);
      hold_replacement_ = true;
    }
    kill(victim, SIGKILL);
    const absl::Time deadline = absl::Now() + absl::Seconds(5);
    while (engine.serving() && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(5));
    }
  }

  absl::Mutex mu_;
  std::vector<pid_t> pids_;
  int groups_ = 0;
  bool hold_replacement_ = false;  // the next group waits while true
  static fs::path* dir_;
  static Tokenizer* tokenizer_;
};

fs::path* EngineTest::dir_ = nullptr;
Tokenizer* EngineTest::tokenizer_ = nullptr;

const std::vector<std::vector<int32_t>> kPrompts = {
    {1, 17, 33, 90, 5}, {1, 200, 201}, {1, 9, 8, 7, 6, 5, 4, 3, 2, 99}};

TEST_F(EngineTest, ConcurrentRequestsGetWhatOneRankGeneratesAlone) {
  auto engine = Start();
  std::vector<std::unique_ptr<Received>> got;
  for (const auto& p : kPrompts) {
    got.push_back(std::make_unique<Received>());
    ASSERT_TRUE(engine->Submit(Greedy(p, 12), got.back()->Callbacks()).ok());
  }
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    ASSERT_TRUE(got[i]->done.WaitForNotificationWithTimeout(absl::Seconds(60)));
    const std::vector<int32_t> want = Expected(kPrompts[i], 12);
    absl::MutexLock lock(&got[i]->mu);
    EXPECT_TRUE(got[i]->outcome.status.ok()) << got[i]->outcome.status;
    EXPECT_EQ(got[i]->tokens, want) << "request " << i;
    EXPECT_EQ(got[i]->text, Text(want)) << "request " << i;
    EXPECT_EQ(got[i]->outcome.finish, Finish::kLength);
    EXPECT_EQ(got[i]->outcome.completion_tokens, 12);
    EXPECT_EQ(got[i]->outcome.prompt_tokens,
              static_cast<int64_t>(kPrompts[i].size()));
    EXPECT_GT(got[i]->outcome.time_to_first_token_seconds, 0);
    EXPECT_GE(got[i]->deltas, 12);  // streamed: one delta per token
  }
  EXPECT_TRUE(engine->serving());
}

TEST_F(EngineTest, StopTokensAndStopStringsEndWhereTheyShould) {
  const std::vector<int32_t> full = Expected(kPrompts[0], 16);
  const std::string text = Text(full);
  auto engine = Start();
  // A stop token: the request ends with it (included), reason STOP.
  ValidRequest r = Greedy(kPrompts[0], 16);
  r.stop_token_ids = {full[5]};
  Received a;
  ASSERT_TRUE(engine->Submit(r, a.Callbacks()).ok());
  ASSERT_TRUE(a.done.WaitForNotificationWithTimeout(absl::Seconds(60)));
  const size_t at = std::find(full.begin(), full.end(), full[5]) - full.begin();
  EXPECT_EQ(a.tokens,
            std::vector<int32_t>(full.begin(), full.begin() + at + 1));
  EXPECT_EQ(a.outcome.finish, Finish::kStop);
  // A stop string: the text ends just before it, never streamed.
  ASSERT_GE(text.size(), 8u);
  const std::string stop = text.substr(4, 3);
  r = Greedy(kPrompts[0], 16);
  r.stop = {stop};
  Received b;
  ASSERT_TRUE(engine->Submit(r, b.Callbacks()).ok());
  ASSERT_TRUE(b.done.WaitForNotificationWithTimeout(absl::Seconds(60)));
  EXPECT_EQ(b.text, text.substr(0, text.find(stop))) << "stop '" << stop << "'";
  EXPECT_EQ(b.outcome.finish, Finish::kStop);
  // EOS: the model's end token ends it, reason EOS.
  r = Greedy(kPrompts[0], 16);
  r.eos_ids = {full[2]};
  Received c;
  ASSERT_TRUE(engine->Submit(r, c.Callbacks()).ok());
  ASSERT_TRUE(c.done.WaitForNotificationWithTimeout(absl::Seconds(60)));
  EXPECT_EQ(c.outcome.finish, Finish::kEos);
  EXPECT_EQ(c.tokens.back(), full[2]);
}

TEST_F(EngineTest, CancellingEndsARequestAndTheQueueIsBounded) {
  auto engine = Start(/*max_running=*/1, /*max_waiting=*/2);
  Received a;
  auto id = engine->Submit(Greedy(kPrompts[1], 400), a.Callbacks());
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(a.first.WaitForNotificationWithTimeout(absl::Seconds(60)));
  // a runs; two more wait; the next is refused.
  Received b, c;
  ASSERT_TRUE(engine->Submit(Greedy(kPrompts[0], 4), b.Callbacks()).ok());
  ASSERT_TRUE(engine->Submit(Greedy(kPrompts[2], 4), c.Callbacks()).ok());
  Received d;
  EXPECT_EQ(
      engine->Submit(Greedy(kPrompts[0], 4), d.Callbacks()).status().code(),
      absl::StatusCode::kResourceExhausted);
  const absl::Time start = absl::Now();
  engine->Cancel(*id);
  ASSERT_TRUE(a.done.WaitForNotificationWithTimeout(absl::Seconds(5)));
  EXPECT_EQ(a.outcome.status.code(), absl::StatusCode::kCancelled);
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  // Its blocks went back: the queued ones run to the end.
  ASSERT_TRUE(b.done.WaitForNotificationWithTimeout(absl::Seconds(60)));
  ASSERT_TRUE(c.done.WaitForNotificationWithTimeout(absl::Seconds(60)));
  EXPECT_EQ(b.tokens, Expected(kPrompts[0], 4));
  EXPECT_EQ(c.tokens, Expected(kPrompts[2], 4));
}

// A batch the workers refuse (here: a token id beyond the vocabulary, which
// request checks would have stopped before the engine) fails only the
// sequence at fault; the others in the same step run on, to their tokens.
TEST_F(EngineTest, ARefusedBatchFailsOnlyTheSequenceAtFault) {
  auto engine = Start();
  // Submitted while the first group loads: admitted in one step together.
  Received a, bad, b;
  ASSERT_TRUE(engine->Submit(Greedy(kPrompts[0], 6), a.Callbacks()).ok());
  ASSERT_TRUE(engine->Submit(Greedy({1, 5, 100000}, 6), bad.Callbacks()).ok());
  ASSERT_TRUE(engine->Submit(Greedy(kPrompts[2], 6), b.Callbacks()).ok());
  for (Received* r : {&a, &bad, &b}) {
    ASSERT_TRUE(r->done.WaitForNotificationWithTimeout(absl::Seconds(60)));
  }
  EXPECT_EQ(bad.outcome.status.code(), absl::StatusCode::kInternal)
      << bad.outcome.status;
  EXPECT_NE(bad.outcome.status.message().find("100000"), std::string::npos)
      << bad.outcome.status;
  EXPECT_TRUE(a.outcome.status.ok()) << a.outcome.status;
  EXPECT_TRUE(b.outcome.status.ok()) << b.outcome.status;
  EXPECT_EQ(a.tokens, Expected(kPrompts[0], 6));
  EXPECT_EQ(b.tokens, Expected(kPrompts[2], 6));
  EXPECT_TRUE(engine->serving());
  absl::MutexLock lock(&mu_);
  EXPECT_EQ(groups_, 1);  // the group served on
}

// A group that keeps failing to start (a checkpoint that cannot load) is
// retried with a wait that doubles each time, up to a bound, instead of
// every second forever; requests wait meanwhile, and a cancel still takes
// effect at once.
TEST(EngineBackoff, StartFailuresInARowBackOffExponentially) {
  absl::Mutex mu;
  std::vector<absl::Duration> waits;
  int attempts = 0;
  EngineOptions o;
  o.scheduler = {.num_blocks = 8, .block_size = 8};
  o.start_group =
      [&](StartCancel&) -> absl::StatusOr<std::unique_ptr<WorkerGroup>> {
    absl::MutexLock lock(&mu);
    ++attempts;
    return absl::InvalidArgumentError("config.json: broken");
  };
  o.on_start_failed = [&](const absl::Status& why, absl::Duration wait) {
    absl::MutexLock lock(&mu);
    EXPECT_EQ(why.message(), "config.json: broken");
    waits.push_back(wait);
  };
  o.restart_backoff = absl::Milliseconds(20);
  o.max_restart_backoff = absl::Milliseconds(320);
  auto engine = Engine::Start(std::move(o));
  ASSERT_TRUE(engine.ok()) << engine.status();
  Received r;
  ValidRequest request;
  request.prompt = {1, 2, 3};
  request.max_new_tokens = 4;
  auto id = (*engine)->Submit(request, r.Callbacks());
  ASSERT_TRUE(id.ok()) << id.status();
  absl::SleepFor(absl::Milliseconds(1500));
  const absl::Time cancelled = absl::Now();
  (*engine)->Cancel(*id);
  ASSERT_TRUE(r.done.WaitForNotificationWithTimeout(absl::Seconds(5)));
  const double cancel_seconds = absl::ToDoubleSeconds(absl::Now() - cancelled);
  EXPECT_EQ(r.outcome.status.code(), absl::StatusCode::kCancelled);
  EXPECT_LT(cancel_seconds, 0.5);
  EXPECT_FALSE((*engine)->serving());
  EXPECT_EQ((*engine)->last_failure().message(), "config.json: broken");
  absl::MutexLock lock(&mu);
  // 20, 40, 80, 160, 320, 320 ... ms: about 8 tries in 1.5 s, not 75.
  EXPECT_GE(attempts, 5);
  EXPECT_LE(attempts, 12);
  ASSERT_GE(waits.size(), 5u);
  const std::vector<absl::Duration> want = {
      absl::Milliseconds(20), absl::Milliseconds(40), absl::Milliseconds(80),
      absl::Milliseconds(160), absl::Milliseconds(320)};
  EXPECT_EQ(std::vector<absl::Duration>(waits.begin(), waits.begin() + 5),
            want);
  for (size_t i = 5; i < waits.size(); ++i) {
    EXPECT_EQ(waits[i], absl::Milliseconds(320));
  }
  std::printf(
      "[ measured ] a group that cannot start: %d tries in 1.5 s (backoff "
      "20 ms doubling to 320 ms); a cancel meanwhile took %.3f s\n",
      attempts, cancel_seconds);
}

// A group that fails to start the same way max_start_failures times in a
// row is given up on: the waiting request ends UNAVAILABLE with the error,
// a new one is refused with it, and on_gave_up hears it once. Failures that
// differ (a transient fault among them) go on being retried.
TEST(EngineBackoff, TheSameStartFailureInARowIsGivenUpOn) {
  for (const bool alternate : {false, true}) {
    absl::Mutex mu;
    int attempts = 0, gave_up = 0;
    EngineOptions o;
    o.scheduler = {.num_blocks = 8, .block_size = 8};
    o.start_group =
        [&](StartCancel&) -> absl::StatusOr<std::unique_ptr<WorkerGroup>> {
      absl::MutexLock lock(&mu);
      ++attempts;
      return absl::InvalidArgumentError(alternate && attempts % 2 == 0
                                            ? "rank 1: connection reset"
                                            : "config.json: broken");
    };
    o.on_gave_up = [&](const absl::Status&) {
      absl::MutexLock lock(&mu);
      ++gave_up;
    };
    o.restart_backoff = absl::Milliseconds(10);
    o.max_restart_backoff = absl::Milliseconds(40);
    o.max_start_failures = 3;
    // Before the engine: a request still queued when the engine stops ends
    // then, and its callbacks write into `r` (ASan found it written after
    // its destructor, and the status it kept leaked).
    Received r;
    auto engine = Engine::Start(std::move(o));
    ASSERT_TRUE(engine.ok()) << engine.status();
    ValidRequest request;
    request.prompt = {1, 2, 3};
    request.max_new_tokens = 4;
    ASSERT_TRUE((*engine)->Submit(request, r.Callbacks()).ok());
    const bool ended = r.done.WaitForNotificationWithTimeout(
        alternate ? absl::Seconds(1) : absl::Seconds(10));
    absl::MutexLock lock(&mu);
    if (alternate) {
      EXPECT_FALSE(ended) << r.outcome.status;
      EXPECT_FALSE((*engine)->gave_up());
      EXPECT_GE(attempts, 6);
      EXPECT_EQ(gave_up, 0);
      continue;
    }
    ASSERT_TRUE(ended);
    EXPECT_EQ(r.outcome.status.code(), absl::StatusCode::kUnavailable);
    EXPECT_EQ(r.outcome.status.message(),
              "the model cannot be served: its workers failed to start 3 "
              "times in a row with: config.json: broken");
    EXPECT_TRUE((*engine)->gave_up());
    EXPECT_EQ(attempts, 3);
    EXPECT_EQ(gave_up, 1);
    Received late;
    const absl::StatusOr<uint64_t> refused =
        (*engine)->Submit(request, late.Callbacks());
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_EQ(refused.status().message(), r.outcome.status.message());
  }
}

// A worker killed mid-request loses nothing: the running requests go back
// to the queue with what they generated and resume on the replacement
// group where they were -- greedy and seeded ones give exactly the tokens
// of an undisturbed run -- and the queued one runs too.
TEST_F(EngineTest, AKilledWorkersRequestsResumeOnTheNewGroupAsTheyWere) {
  auto engine = Start(/*max_running=*/2);
  ValidRequest seeded = Greedy(kPrompts[0], 150);
  seeded.temperature = 0.9f;
  seeded.top_p = 0.95f;
  seeded.seed = 7;
  seeded.repetition_penalty = 1.2f;
  Received reference;  // the seeded request, undisturbed
  ASSERT_TRUE(engine->Submit(seeded, reference.Callbacks()).ok());
  ASSERT_TRUE(reference.done.WaitForNotificationWithTimeout(absl::Seconds(60)));
  ASSERT_TRUE(reference.outcome.status.ok()) << reference.outcome.status;

  Received a, s, b;
  ASSERT_TRUE(engine->Submit(Greedy(kPrompts[1], 300), a.Callbacks()).ok());
  ASSERT_TRUE(engine->Submit(seeded, s.Callbacks()).ok());
  ASSERT_TRUE(engine->Submit(Greedy(kPrompts[2], 6), b.Callbacks()).ok());
  ASSERT_TRUE(a.first.WaitForNotificationWithTimeout(absl::Seconds(60)));
  ASSERT_TRUE(s.first.WaitForNotificationWithTimeout(absl::Seconds(60)));
  const absl::Time start = absl::Now();
  KillRankOneAndWaitForTheFailure(*engine);
  auto release = absl::MakeCleanup([this] {
    absl::MutexLock lock(&mu_);
    hold_replacement_ = false;
  });
  // Between the groups: not serving, saying why; the running requests are
  // neither done nor failed, only waiting.
  EXPECT_FALSE(engine->serving());
  EXPECT_NE(engine->last_failure().message().find("rank 1"), std::string::npos)
      << engine->last_failure();
  ASSERT_FALSE(a.done.HasBeenNotified()) << "a ended before the kill landed";
  ASSERT_FALSE(s.done.HasBeenNotified()) << "s ended before the kill landed";
  std::move(release).Invoke();
  for (Received* r : {&a, &s, &b}) {
    ASSERT_TRUE(r->done.WaitForNotificationWithTimeout(absl::Seconds(60)));
    EXPECT_TRUE(r->outcome.status.ok()) << r->outcome.status;
  }
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  EXPECT_EQ(a.tokens, Expected(kPrompts[1], 300));
  EXPECT_EQ(s.tokens, reference.tokens);
  EXPECT_EQ(s.text, reference.text);
  EXPECT_EQ(b.tokens, Expected(kPrompts[2], 6));
  EXPECT_TRUE(engine->serving());
  absl::MutexLock lock(&mu_);
  EXPECT_EQ(groups_, 2);
  std::printf(
      "[ measured ] worker killed (SIGKILL) mid-request: 0 of 3 requests "
      "lost; the two running resumed on the new group with the same tokens; "
      "all done %.2f s after the kill\n",
      seconds);
}

// The prefix cache goes with the group whose workers held it: a prompt
// served before a worker died, served again on the new group, finds
// nothing in the cache (the new workers hold no keys) and gets the same
// tokens.
TEST_F(EngineTest, AReplacedGroupsPrefixCacheIsForgotten) {
  auto engine = Start();
  std::vector<int32_t> prompt(20);
  for (int i = 0; i < 20; ++i) prompt[i] = 1 + (7 * i) % 250;
  Received first;
  ASSERT_TRUE(engine->Submit(Greedy(prompt, 4), first.Callbacks()).ok());
  ASSERT_TRUE(first.done.WaitForNotificationWithTimeout(absl::Seconds(60)));
  ASSERT_TRUE(first.outcome.status.ok()) << first.outcome.status;
  EXPECT_EQ(first.tokens, Expected(prompt, 4));
  KillRankOneAndWaitForTheFailure(*engine);
  {
    absl::MutexLock lock(&mu_);
    hold_replacement_ = false;
  }
  Received again;
  ASSERT_TRUE(engine->Submit(Greedy(prompt, 4), again.Callbacks()).ok());
  ASSERT_TRUE(again.done.WaitForNotificationWithTimeout(absl::Seconds(60)));
  ASSERT_TRUE(again.outcome.status.ok()) << again.outcome.status;
  EXPECT_EQ(again.tokens, first.tokens);
  absl::MutexLock lock(&mu_);
  EXPECT_EQ(groups_, 2);
}

// A step stuck on a stopped rank (here its health check would take minutes
// to fail) holds up nothing else: a new request queues and, cancelled, ends
// at once; a cancel of a request in the stuck step waits for the step; and
// stopping the engine cuts the step short instead of waiting for it.
TEST_F(EngineTest, AStuckStepStillTakesCancelsAndStopsAtOnce) {
  auto engine = Start(/*max_running=*/8, /*max_waiting=*/64,
                      /*max_group_failures=*/3,
                      /*health_timeout=*/absl::Minutes(5));
  Received a, b;
  auto a_id = engine->Submit(Greedy(kPrompts[1], 400), a.Callbacks());
  ASSERT_TRUE(a_id.ok());
  ASSERT_TRUE(a.first.WaitForNotificationWithTimeout(absl::Seconds(60)));
  pid_t stopped;
  {
    absl::MutexLock lock(&mu_);
    stopped = pids_.at(1);
  }
  ASSERT_EQ(kill(stopped, SIGSTOP), 0);
  absl::SleepFor(absl::Milliseconds(300));  // the step now waits for rank 1
  auto b_id = engine->Submit(Greedy(kPrompts[2], 6), b.Callbacks());
  ASSERT_TRUE(b_id.ok()) << b_id.status();
  absl::SleepFor(absl::Milliseconds(200));
  const absl::Time cancel = absl::Now();
  engine->Cancel(*b_id);
  engine->Cancel(*a_id);
  ASSERT_TRUE(b.done.WaitForNotificationWithTimeout(absl::Seconds(5)));
  const double b_seconds = absl::ToDoubleSeconds(absl::Now() - cancel);
  EXPECT_EQ(b.outcome.status.code(), absl::StatusCode::kCancelled);
  EXPECT_LT(b_seconds, 1.0);
  EXPECT_FALSE(a.done.WaitForNotificationWithTimeout(absl::Seconds(1)))
      << "a ended while its step was still stuck: " << a.outcome.status;
  const absl::Time stop = absl::Now();
  engine.reset();
  const double stop_seconds = absl::ToDoubleSeconds(absl::Now() - stop);
  ASSERT_TRUE(a.done.HasBeenNotified());
  EXPECT_EQ(a.outcome.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_LT(stop_seconds, 5.0);  // the group's workers get 2 s to stop
  std::printf(
      "[ measured ] a step stuck on a stopped rank: a queued request's "
      "cancel took %.3f s; stopping the engine took %.2f s\n",
      b_seconds, stop_seconds);
}

// A request that was running in max_group_failures failed groups ends
// UNAVAILABLE (it may be what kills them); the queue survives.
TEST_F(EngineTest, ARequestInTooManyFailedGroupsEndsUnavailable) {
  auto engine = Start(/*max_running=*/1, /*max_waiting=*/64,
                      /*max_group_failures=*/1);
  Received a, b;
  ASSERT_TRUE(engine->Submit(Greedy(kPrompts[1], 400), a.Callbacks()).ok());
  ASSERT_TRUE(a.first.WaitForNotificationWithTimeout(absl::Seconds(60)));
  ASSERT_TRUE(engine->Submit(Greedy(kPrompts[2], 6), b.Callbacks()).ok());
  const absl::Time start = absl::Now();
  KillRankOneAndWaitForTheFailure(*engine);
  auto release = absl::MakeCleanup([this] {
    absl::MutexLock lock(&mu_);
    hold_replacement_ = false;
  });
  ASSERT_TRUE(a.done.WaitForNotificationWithTimeout(absl::Seconds(5)));
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  EXPECT_EQ(a.outcome.status.code(), absl::StatusCode::kUnavailable)
      << a.outcome.status;
  EXPECT_NE(a.outcome.status.message().find("rank 1"), std::string::npos);
  EXPECT_NE(a.outcome.status.message().find("1 worker groups that failed"),
            std::string::npos)
      << a.outcome.status;
  EXPECT_FALSE(engine->serving());
  std::move(release).Invoke();
  // The queued request runs on the replacement group, to the right tokens.
  ASSERT_TRUE(b.done.WaitForNotificationWithTimeout(absl::Seconds(60)));
  EXPECT_TRUE(b.outcome.status.ok()) << b.outcome.status;
  EXPECT_EQ(b.tokens, Expected(kPrompts[2], 6));
  EXPECT_TRUE(engine->serving());
  std::printf(
      "[ measured ] worker killed (SIGKILL), max_group_failures 1: the "
      "running request ended UNAVAILABLE after %.2f s; the queued one "
      "finished on the new group\n",
      seconds);
}

}  // namespace
}  // namespace octet
