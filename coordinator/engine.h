// The coordinator's step loop: requests in, tokens out. It owns the
// scheduler (scheduler.h) and the worker group (worker_group.h) and runs one
// thread that, step after step, plans a batch, has the workers run it, and
// hands each request its new tokens and text; it checks the stopping rules
// (EOS, stop tokens, stop strings, max_new_tokens), ends cancelled requests
// and frees their KV blocks at the next step boundary, and replaces a failed
// worker group: the requests it was running go back to the queue with what
// they generated and resume on the new group, token for token where they
// were (Scheduler::Requeue); the client's stream just continues.
//
// Thread-safe: Submit, Cancel and the accessors from any thread. Callbacks
// run on the engine's thread and must not block. While a step runs, the
// thread still takes new requests into the queue and ends cancelled ones
// that are not in that step (those end when it does); stopping the engine
// cancels a step in flight. While a group loads (the loop waits for it),
// requests queue and cancelling one takes effect when the load ends;
// stopping the engine cancels the load.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/metrics.h"
#include "coordinator/request.h"
#include "coordinator/scheduler.h"
#include "coordinator/worker_group.h"
#include "model/tokenizer.h"

namespace octet {

struct EngineOptions {
  SchedulerOptions scheduler;
  // A new worker group (the first, and each replacement), to be started
  // with `cancel` (WorkerGroup::Start), which the engine's destructor uses.
  std::function<absl::StatusOr<std::unique_ptr<WorkerGroup>>(
      StartCancel& cancel)>
      start_group;
  // Decodes each request's generated ids into text (and so checks stop
  // strings); null: token ids only. Must outlive the engine.
  const Tokenizer* tokenizer = nullptr;
  // Pause after a group failed to start; it doubles with each failure in a
  // row, up to max_restart_backoff, and is back to restart_backoff once one
  // starts.
  absl::Duration restart_backoff = absl::Seconds(1);
  absl::Duration max_restart_backoff = absl::Minutes(1);
  // Told, on the engine's thread, why a group did not start and how long
  // the engine waits before the next try (for the log).
  std::function<void(const absl::Status& why, absl::Duration retry_in)>
      on_start_failed;
  // A group that fails to start this many times in a row with the same
  // error, numbers aside (a load that cannot succeed: a broken checkpoint, too
  // little memory) is not tried again: the engine gives up -- its requests end
  // UNAVAILABLE with that error, new ones are refused with it -- and tells
  // on_gave_up (the coordinator exits, for its supervisor to see). 0: it
  // tries for ever. A group that served and then failed is always replaced.
  int max_start_failures = 0;
  std::function<void(const absl::Status& why)> on_gave_up;
  // A request running when its worker group fails is resumed on the next
  // one, exactly where it was; after this many failed groups it ends with
  // UNAVAILABLE instead (it may be what brings them down).
  int max_group_failures = 3;
  // Where to count requests, tokens and latencies (none: null); must
  // outlive the engine.
  Metrics* metrics = nullptr;
  // Told, on the engine's thread, when serving() changes: true once a group
  // is loaded; false with the reason when it failed, before its running
  // requests end (so that health says NOT_SERVING first).
  std::function<void(bool serving, const absl::Status& why)> on_serving;
};

enum class Finish { kLength, kEos, kStop };

// New output of a request.
struct Delta {
  std::string text;
  std::vector<int32_t> token_ids;
  std::vector<float> logprobs;  // when asked for: one per token id
  // When asked for, with the first token: prompt token i + 1's at index i.
  std::vector<float> prompt_logprobs;
};

struct Outcome {
  absl::Status status;  // OK, CANCELLED or UNAVAILABLE
  Finish finish = Finish::kLength;
  int64_t prompt_tokens = 0, completion_tokens = 0;
  double time_to_first_token_seconds = 0, total_seconds = 0;
};

struct RequestCallbacks {
  std::function<void(const Delta&)> on_delta;
  // Last: the output not yet delivered, and how the request ended.
  std::function<void(const Delta&, const Outcome&)> on_done;
};

class Engine {
 public:
  // Starts the first worker group in the background (serving() turns true
  // once it is loaded) and the step loop.
  static absl::StatusOr<std::unique_ptr<Engine>> Start(EngineOptions options);
  ~Engine();  // ends every request (UNAVAILABLE) and stops the workers

  // Queues a request; its callbacks run later on the engine's thread. Its
  // id, or ResourceExhausted (queue full) / InvalidArgument (it could never
  // fit in the KV cache).
  absl::StatusOr<uint64_t> Submit(ValidRequest request,
                                  RequestCallbacks callbacks);
  // Ends a request (CANCELLED) at the next step boundary, freeing its
  // blocks; unknown or finished ids are ignored.
  void Cancel(uint64_t id);

  // Shutting down: from now on Submit refuses new requests (UNAVAILABLE);
  // those already submitted run on to their end.
  void Drain();
  // Waits until every submitted request has ended, or `deadline`; true
  // when none is left. (The destructor ends whatever is.)
  bool WaitUntilIdle(absl::Time deadline);
  // Requests submitted and not yet ended.
  int64_t unfinished() const;

  // Whether a loaded worker group serves (health).
  bool serving() const;
  // Why the last group failed or did not start (OK if none did).
  absl::Status last_failure() const;
  // Whether the engine gave up starting groups (see max_start_failures).
  bool gave_up() const;
  // What the last loaded group computes activations in (e.g. bfloat16);
  // empty before one loaded.
  std::string activation_dtype() const;

 private:
  struct Active;
  explicit Engine(EngineOptions options);
  // Submit, less the metrics of a refusal.
  absl::StatusOr<uint64_t> Queue(ValidRequest request,
                                 RequestCallbacks callbacks);
  // Requests and cancels handed over since the last turn of the loop.
  struct Inbox {
    std::deque<std::unique_ptr<Active>> fresh;
    std::vector<uint64_t> cancels;
  };
  void Loop();
  // The loop's steps, on the engine's thread. WaitForWork sleeps until
  // there is something to do and takes the inbox; false when stopping.
  bool WaitForWork(Inbox& inbox);
  // Moves submitted_ into the inbox, still counted as queued.
  void TakeSubmitted(Inbox& inbox) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ApplyCancels(Inbox& inbox);  // of queued and of running requests
  void Admit(std::deque<std::unique_ptr<Active>>& fresh);  // to the scheduler
  // Replaces a failed (or not yet started) group; what it was running
  // ends, the queue waits. False when no group could be started.
  bool EnsureGroup();
  // A group did not start: back off, or give up (max_start_failures).
  void StartFailed(const absl::Status& why);
  // Gave up: the requests waiting for a group end with `why`.
  void EndWaiting(const absl::Status& why);
  void RetireFailedGroup();  // NOT_SERVING, its running requests requeued
  // The running requests back to the queue (or ended, past
  // max_group_failures), with `why` they stopped.
  void RequeueRunning(const absl::Status& why);
  void StepOnce();                          // plans one step and runs it
  void EndAll(const absl::Status& status);  // every request, when stopping
  // The scheduler's state into the metrics (engine thread).
  void PublishLoad();
  void PublishLoadLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs one step of the plan (a failed group shows in group_->failed()).
  void RunStep(const StepPlan& plan);
  // While the workers compute `plan`: new requests are admitted, cancels
  // of the others applied (those of the plan's own wait for its end), and
  // a stopping engine cuts the step short.
  void WhileStepRuns(const StepPlan& plan);
  // The group's state of ended sequences, freed after the step in flight.
  void FreeOnWorkers(std::vector<uint64_t> ids);
  // A step the workers refused as malformed: its sequences run again one
  // by one, and those refused alone end (INTERNAL) and are freed.
  void RefusedStep(const StepPlan& plan, const absl::Status& why);
  // Hands `token` to its request; true when the request is done.
  bool Deliver(Active& a, int32_t token, float logprob);
  // prompt_logprobs: asks a step of `a`'s prompt to score its tokens, and
  // keeps what the workers send back.
  void AskPromptLogprobs(Active& a, const ScheduledSeq& q,
                         internal::v1::SequenceStep& s);
  void KeepPromptLogprobs(Active& a, const internal::v1::PromptLogprobs& p);
  void End(Active& a, const absl::Status& status, Finish finish);
  // Ends a request the scheduler holds, before its end (cancelled, refused,
  // or past its group failures): its blocks, its entry and its state on the
  // workers are freed.
  void EndActive(uint64_t id, const absl::Status& status);

  const EngineOptions options_;
  // Engine thread only, but for the thread-safe CheckFits.
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<WorkerGroup> group_;  // engine thread only
  uint64_t steps_ = 0;                  // engine thread only
  bool in_step_ = false;                // engine thread only
  // Ended during a step: freed on the workers once it is over (engine
  // thread only); and cancels that wait for the step's end.
  std::vector<uint64_t> free_after_step_;
  std::vector<uint64_t> cancels_after_step_;
  int start_failures_ = 0;  // groups that failed to start in a row (engine)
  int same_failures_ = 0;   // of them, ending with the last one's error
  absl::Time next_start_ = absl::InfinitePast();  // engine thread only

  mutable absl::Mutex mu_;
  absl::CondVar wake_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  StartCancel* starting_ ABSL_GUARDED_BY(mu_) = nullptr;  // while one starts
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status gave_up_ ABSL_GUARDED_BY(mu_);    // why, once it gave up
  int64_t unfinished_ ABSL_GUARDED_BY(mu_) = 0;  // submitted, not yet ended
  bool serving_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status last_failure_ ABSL_GUARDED_BY(mu_);
  std::string activation_dtype_ ABSL_GUARDED_BY(mu_);
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  int64_t queued_ ABSL_GUARDED_BY(mu_) = 0;  // submitted, not yet running
  std::deque<std::unique_ptr<Active>> submitted_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> cancelled_ ABSL_GUARDED_BY(mu_);
  // Requests the scheduler holds (engine thread only).
  absl::flat_hash_map<uint64_t, std::unique_ptr<Active>> active_;
  std::thread thread_;
};

}  // namespace octet
