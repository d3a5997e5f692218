#include "coordinator/engine.h"

#include <algorithm>
#include <optional>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"

namespace octet {

namespace rpc = internal::v1;

struct Engine::Active {
  uint64_t id = 0;
  ValidRequest request;
  RequestCallbacks callbacks;
  uint64_t seed = 0;
  std::optional<TextStream> decoder;  // with a tokenizer
  std::string text;                   // generated so far (stop strings cut off)
  size_t sent = 0;                    // bytes of `text` delivered
  int64_t generated = 0;
  // With prompt_logprobs: prompt token i + 1's at index i, and how many of
  // them the workers have sent.
  std::vector<float> prompt_logprobs;
  int64_t prompt_scored = 0;
  int group_failures = 0;  // worker groups that failed while it ran
  absl::Time arrival, first_token, last_token;
};

namespace {

// The finish_reason label of octet_requests_total.
const char* FinishName(Finish f) {
  switch (f) {
    case Finish::kEos:
      return "eos";
    case Finish::kStop:
      return "stop";
    case Finish::kLength:
      break;
  }
  return "length";
}

// The longest stop string, less one: how much text to hold back, since it
// may be the start of a stop string.
size_t HoldBack(const ValidRequest& r) {
  size_t longest = 0;
  for (const std::string& s : r.stop) longest = std::max(longest, s.size());
  return longest > 0 ? longest - 1 : 0;
}

// `at`, moved back to the start of a UTF-8 character (a message's string
// must be whole characters).
size_t CharStart(const std::string& text, size_t at) {
  while (at > 0 && at < text.size() &&
         (static_cast<unsigned char>(text[at]) & 0xC0) == 0x80) {
    --at;
  }
  return at;
}

// Whether two failures to start a group are the same one, numbers aside
// (which rank said it first, a pid or a port vary from try to try).
bool SameFailure(const absl::Status& a, const absl::Status& b) {
  const auto letters = [](absl::string_view m) {
    std::string out(m);
    std::erase_if(out, [](char c) { return c >= '0' && c <= '9'; });
    return out;
  };
  return a.code() == b.code() && letters(a.message()) == letters(b.message());
}

bool Contains(const std::vector<int32_t>& ids, int32_t id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Engine>> Engine::Start(EngineOptions options) {
  if (!options.start_group) {
    return absl::InvalidArgumentError("engine: start_group is required");
  }
  if (options.restart_backoff <= absl::ZeroDuration() ||
      options.max_restart_backoff < options.restart_backoff) {
    return absl::InvalidArgumentError(
        "engine: restart_backoff must be > 0 and <= max_restart_backoff");
  }
  if (options.max_start_failures < 0) {
    return absl::InvalidArgumentError(
        "engine: max_start_failures must be >= 0");
  }
  if (options.max_group_failures < 1) {
    return absl::InvalidArgumentError(
        "engine: max_group_failures must be >= 1");
  }
  OCTET_ASSIGN_OR_RETURN(std::unique_ptr<Scheduler> scheduler,
                         Scheduler::Create(options.scheduler));
  std::unique_ptr<Engine> e(new Engine(std::move(options)));
  e->scheduler_ = std::move(scheduler);
  e->thread_ = std::thread(&Engine::Loop, e.get());
  return e;
}

Engine::Engine(EngineOptions options) : options_(std::move(options)) {}

Engine::~Engine() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    if (starting_ != nullptr) starting_->Cancel();  // a load in progress
    wake_.SignalAll();
  }
  thread_.join();
}

absl::StatusOr<uint64_t> Engine::Submit(ValidRequest request,
                                        RequestCallbacks callbacks) {
  absl::StatusOr<uint64_t> id = Queue(std::move(request), std::move(callbacks));
  if (!id.ok() && options_.metrics != nullptr) {
    options_.metrics->RequestEnded(id.status().code(), "none");
  }
  return id;
}

absl::StatusOr<uint64_t> Engine::Queue(ValidRequest request,
                                       RequestCallbacks callbacks) {
  // Checked here, on the caller's thread, so that the answer is immediate.
  if (absl::Status fits = scheduler_->CheckFits(
          static_cast<int64_t>(request.prompt.size()), request.max_new_tokens);
      !fits.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("stopping.max_new_tokens: ", fits.message()));
  }
  auto a = std::make_unique<Active>();
  a->request = std::move(request);
  a->callbacks = std::move(callbacks);
  a->arrival = absl::Now();
  if (a->request.seed.has_value()) {
    a->seed = *a->request.seed;
  } else {
    std::random_device random;
    a->seed = (uint64_t{random()} << 32) | random();
  }
  absl::MutexLock lock(&mu_);
  if (stop_) return absl::UnavailableError("the server is stopping");
  if (!gave_up_.ok()) return gave_up_;
  if (draining_) {
    return absl::UnavailableError(
        "the server is shutting down and takes no new requests");
  }
  const int64_t max_waiting = options_.scheduler.max_waiting;
  if (queued_ + static_cast<int64_t>(submitted_.size()) >= max_waiting) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the queue is full (", max_waiting, " waiting requests)"));
  }
  a->id = next_id_++;
  const uint64_t id = a->id;
  submitted_.push_back(std::move(a));
  ++unfinished_;
  // (Seen at once, also while the engine is busy replacing a group.)
  if (options_.metrics != nullptr) {
    options_.metrics->SetWaiting(queued_ +
                                 static_cast<int64_t>(submitted_.size()));
  }
  wake_.Signal();
  return id;
}

void Engine::Cancel(uint64_t id) {
  absl::MutexLock lock(&mu_);
  cancelled_.push_back(id);
  wake_.Signal();
}

bool Engine::serving() const {
  absl::MutexLock lock(&mu_);
  return serving_;
}

bool Engine::gave_up() const {
  absl::MutexLock lock(&mu_);
  return !gave_up_.ok();
}

absl::Status Engine::last_failure() const {
  absl::MutexLock lock(&mu_);
  return last_failure_;
}

std::string Engine::activation_dtype() const {
  absl::MutexLock lock(&mu_);
  return activation_dtype_;
}

void Engine::Drain() {
  absl::MutexLock lock(&mu_);
  draining_ = true;
}

bool Engine::WaitUntilIdle(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  const auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return unfinished_ == 0;
  };
  return mu_.AwaitWithDeadline(absl::Condition(&idle), deadline);
}

int64_t Engine::unfinished() const {
  absl::MutexLock lock(&mu_);
  return unfinished_;
}

void Engine::End(Active& a, const absl::Status& status, Finish finish) {
  Outcome o;
  o.status = status;
  o.finish = finish;
  o.prompt_tokens = static_cast<int64_t>(a.request.prompt.size());
  o.completion_tokens = a.generated;
  const absl::Time now = absl::Now();
  o.total_seconds = absl::ToDoubleSeconds(now - a.arrival);
  if (a.generated > 0) {
    o.time_to_first_token_seconds =
        absl::ToDoubleSeconds(a.first_token - a.arrival);
  }
  if (options_.metrics != nullptr) {
    options_.metrics->RequestEnded(status.code(),
                                   status.ok() ? FinishName(finish) : "none");
    options_.metrics->RequestLatency(o.total_seconds);
  }
  Delta rest;
  if (status.ok()) rest.text = a.text.substr(a.sent);
  if (a.callbacks.on_done) a.callbacks.on_done(rest, o);
  absl::MutexLock lock(&mu_);  // after the callback: its answer is out
  --unfinished_;
}

void Engine::RequeueRunning(const absl::Status& why) {
  for (SeqId id : scheduler_->running_ids()) {
    auto it = active_.find(id);
    if (it == active_.end()) continue;
    if (++it->second->group_failures < options_.max_group_failures) {
      scheduler_->Requeue(id);  // resumes on the next group, as it was
      continue;
    }
    EndActive(id,
              absl::UnavailableError(absl::StrCat(
                  why.message(), " (the request was running in ",
                  it->second->group_failures, " worker groups that failed)")));
  }
}

void Engine::EndActive(uint64_t id, const absl::Status& status) {
  scheduler_->Finish(id);  // its blocks are free now
  End(*active_.at(id), status, Finish::kLength);
  active_.erase(id);
  FreeOnWorkers({id});
}

void Engine::FreeOnWorkers(std::vector<uint64_t> ids) {
  if (in_step_) {  // not while a step is in flight: after it
    free_after_step_.insert(free_after_step_.end(), ids.begin(), ids.end());
    return;
  }
  // (A failed group answers at once.)
  if (group_ != nullptr) group_->Free(ids).IgnoreError();
}

bool Engine::Deliver(Active& a, int32_t token, float logprob) {
  const absl::Time now = absl::Now();
  if (Metrics* m = options_.metrics; m != nullptr) {
    if (a.generated == 0) {
      m->TimeToFirstToken(absl::ToDoubleSeconds(now - a.arrival));
      m->PromptTokens(static_cast<int64_t>(a.request.prompt.size()));
    } else {
      m->InterTokenLatency(absl::ToDoubleSeconds(now - a.last_token));
    }
    m->GenerationTokens(1);
  }
  if (a.generated++ == 0) a.first_token = now;
  a.last_token = now;
  Delta d;
  d.token_ids.push_back(token);
  if (a.request.logprobs) d.logprobs.push_back(logprob);
  if (a.generated == 1) d.prompt_logprobs = std::move(a.prompt_logprobs);
  const ValidRequest& r = a.request;
  bool stopped = Contains(r.stop_token_ids, token);
  const bool eos = !stopped && Contains(r.eos_ids, token);
  bool stop_string = false;
  if (a.decoder.has_value()) {
    a.text += a.decoder->Add(token);
    // The earliest stop string in what was not sent (text already sent
    // never holds the start of one: see HoldBack).
    size_t cut = std::string::npos;
    for (const std::string& s : r.stop) {
      cut = std::min(cut, a.text.find(s, a.sent));
    }
    if (cut != std::string::npos) {
      a.text.resize(cut);
      stop_string = stopped = true;
    }
  }
  const bool done = stopped || eos || a.generated >= r.max_new_tokens;
  if (done) {
    if (a.decoder.has_value() && !stop_string) a.text += a.decoder->Finish();
    if (a.callbacks.on_delta) {
      d.text = a.text.substr(a.sent);
      a.sent = a.text.size();
      a.callbacks.on_delta(d);
    }
    End(a, absl::OkStatus(),
        stopped ? Finish::kStop
        : eos   ? Finish::kEos
                : Finish::kLength);
    return true;
  }
  const size_t hold = HoldBack(r);
  size_t safe = a.text.size() > hold ? a.text.size() - hold : 0;
  safe = CharStart(a.text, safe);
  if (safe > a.sent) {
    d.text = a.text.substr(a.sent, safe - a.sent);
    a.sent = safe;
  }
  if (a.callbacks.on_delta) a.callbacks.on_delta(d);
  return false;
}

void Engine::AskPromptLogprobs(Active& a, const ScheduledSeq& q,
                               rpc::SequenceStep& s) {
  const std::vector<int32_t>& prompt = a.request.prompt;
  const int64_t length = static_cast<int64_t>(prompt.size());
  // Scored once: a prompt fed again (after a preemption) was scored before.
  if (!a.request.prompt_logprobs || q.start >= length ||
      a.prompt_scored >= length - 1) {
    return;
  }
  a.prompt_logprobs.resize(length - 1);
  s.set_prompt_logprobs(true);
  const int64_t next = q.start + static_cast<int64_t>(q.tokens.size());
  if (next < length) s.set_next_token(prompt[next]);
}

void Engine::KeepPromptLogprobs(Active& a, const rpc::PromptLogprobs& p) {
  const int64_t length = static_cast<int64_t>(a.request.prompt.size());
  for (int k = 0; k < p.logprobs_size(); ++k) {
    const int64_t position = p.first_position() + k;
    if (position < 1 || position >= length) continue;  // a generated token's
    a.prompt_logprobs[position - 1] = p.logprobs(k);
    ++a.prompt_scored;
  }
}

void Engine::RunStep(const StepPlan& plan) {
  rpc::StepRequest request;
  request.set_step(++steps_);
  for (const ScheduledSeq& q : plan.seqs) {
    Active& a = *active_.at(q.id);
    rpc::SequenceStep* s = request.add_seqs();
    s->set_seq_id(q.id);
    s->set_start(q.start);
    s->mutable_tokens()->Add(q.tokens.begin(), q.tokens.end());
    s->mutable_block_table()->Add(q.block_table->begin(), q.block_table->end());
    s->set_sample(q.sample);
    s->mutable_cached_prefix()->Add(q.cached_prefix.begin(),
                                    q.cached_prefix.end());
    rpc::Sampling* p = s->mutable_sampling();
    p->set_temperature(a.request.temperature);
    p->set_top_p(a.request.top_p);
    p->set_top_k(static_cast<int32_t>(a.request.top_k));
    p->set_seed(a.seed);
    p->set_repetition_penalty(a.request.repetition_penalty);
    s->set_logprobs(a.request.logprobs);
    AskPromptLogprobs(a, q, *s);
  }
  in_step_ = true;
  absl::StatusOr<rpc::StepResponse> response =
      group_->Step(request, [&] { WhileStepRuns(plan); });
  in_step_ = false;
  std::vector<uint64_t> done;
  done.swap(free_after_step_);
  if (!response.ok()) {
    FreeOnWorkers(std::move(done));
    if (!group_->failed().ok()) return;  // replaced by the loop
    RefusedStep(plan, response.status());
    return;
  }
  scheduler_->Written(plan);
  for (const rpc::PromptLogprobs& p : response->prompt_logprobs()) {
    auto it = active_.find(p.seq_id());
    if (it != active_.end()) KeepPromptLogprobs(*it->second, p);
  }
  for (const rpc::SampledToken& t : response->tokens()) {
    auto it = active_.find(t.seq_id());
    if (it == active_.end()) continue;
    if (!scheduler_->Append(t.seq_id(), t.token()).ok()) continue;
    if (Deliver(*it->second, t.token(), t.logprob())) {
      scheduler_->Finish(t.seq_id());
      active_.erase(it);
      done.push_back(t.seq_id());
    }
  }
  FreeOnWorkers(std::move(done));  // a failed group shows at the next step
}

void Engine::WhileStepRuns(const StepPlan& plan) {
  Inbox inbox;
  {
    absl::MutexLock lock(&mu_);
    if (stop_) {
      group_->Abort(absl::UnavailableError("the server is stopping"));
      return;
    }
    TakeSubmitted(inbox);
    inbox.cancels.swap(cancelled_);
  }
  // A sequence of this step cannot end before the step does.
  std::erase_if(inbox.cancels, [&](uint64_t id) {
    const bool stepping =
        std::any_of(plan.seqs.begin(), plan.seqs.end(),
                    [id](const ScheduledSeq& q) { return q.id == id; });
    if (stepping) cancels_after_step_.push_back(id);
    return stepping;
  });
  ApplyCancels(inbox);
  Admit(inbox.fresh);
}

void Engine::RefusedStep(const StepPlan& plan, const absl::Status& why) {
  // Every rank checks a batch alike before any collective or KV write, so
  // a refused one changed nothing: each sequence runs again alone (a
  // sequence's numerics do not depend on its batch), and only the ones
  // refused on their own end.
  if (plan.seqs.size() > 1) {
    for (const ScheduledSeq& q : plan.seqs) {
      if (!active_.contains(q.id)) continue;  // ended meanwhile (cancelled)
      StepPlan alone;
      alone.seqs.push_back(q);
      RunStep(alone);
      if (!group_->failed().ok()) return;  // replaced by the loop
    }
    return;
  }
  // Refused on its own: a bug here, not the workers'. It ends, its state
  // on the workers is freed, the group serves on.
  EndActive(plan.seqs[0].id,
            absl::InternalError(absl::StrCat("step refused: ", why.message())));
}

void Engine::PublishLoad() {
  absl::MutexLock lock(&mu_);
  PublishLoadLocked();
}

void Engine::PublishLoadLocked() {
  if (options_.metrics == nullptr) return;
  options_.metrics->SetLoad(
      scheduler_->waiting() + static_cast<int64_t>(submitted_.size()),
      scheduler_->running(), scheduler_->used_blocks(),
      scheduler_->free_blocks(), scheduler_->cached_blocks());
}

// Each turn: drain the inbox → cancel → admit → replace a failed group →
// step.
void Engine::Loop() {
  for (;;) {
    Inbox inbox;
    if (!WaitForWork(inbox)) break;
    ApplyCancels(inbox);
    Admit(inbox.fresh);
    if (!EnsureGroup()) continue;
    if (!active_.empty()) StepOnce();
  }
  EndAll(absl::UnavailableError("the server is stopping"));
}

bool Engine::WaitForWork(Inbox& inbox) {
  inbox.cancels.swap(cancels_after_step_);
  absl::MutexLock lock(&mu_);
  PublishLoadLocked();
  // Sleep while there is nothing to do: no requests, and a group that
  // serves (a missing or failed one is replaced first).
  const bool group_ok = group_ != nullptr && group_->failed().ok();
  while (!stop_ && submitted_.empty() && cancelled_.empty() &&
         active_.empty() && group_ok) {
    wake_.WaitWithTimeout(&mu_, absl::Milliseconds(100));
    if (!group_->failed().ok()) break;
  }
  if (stop_) return false;
  TakeSubmitted(inbox);
  inbox.cancels.insert(inbox.cancels.end(), cancelled_.begin(),
                       cancelled_.end());
  cancelled_.clear();
  return true;
}

void Engine::ApplyCancels(Inbox& inbox) {
  for (uint64_t id : inbox.cancels) {
    auto f = std::find_if(inbox.fresh.begin(), inbox.fresh.end(),
                          [&](const auto& a) { return a->id == id; });
    if (f != inbox.fresh.end()) {
      End(**f, absl::CancelledError("cancelled"), Finish::kLength);
      inbox.fresh.erase(f);
      continue;
    }
    if (active_.contains(id)) EndActive(id, absl::CancelledError("cancelled"));
  }
}

void Engine::TakeSubmitted(Inbox& inbox) {
  inbox.fresh.swap(submitted_);
  // Still waiting until Admit hands them to the scheduler: counted, so
  // that Queue's limit holds while they are in neither place.
  queued_ += static_cast<int64_t>(inbox.fresh.size());
}

void Engine::Admit(std::deque<std::unique_ptr<Active>>& fresh) {
  for (auto& a : fresh) {
    const uint64_t id = a->id;
    // A prompt to score is fed whole: nothing of it from the prefix cache.
    absl::Status s =
        scheduler_->Add(id, a->request.prompt, a->request.max_new_tokens,
                        /*use_prefix_cache=*/!a->request.prompt_logprobs);
    if (!s.ok()) {
      End(*a, s, Finish::kLength);
      continue;
    }
    if (options_.tokenizer != nullptr) a->decoder.emplace(*options_.tokenizer);
    active_[id] = std::move(a);
  }
  absl::MutexLock lock(&mu_);
  queued_ = scheduler_->waiting();
}

bool Engine::EnsureGroup() {
  if (group_ != nullptr && group_->failed().ok()) return true;
  if (group_ != nullptr) RetireFailedGroup();
  absl::Status gave_up;
  {
    absl::MutexLock lock(&mu_);
    gave_up = gave_up_;
  }
  if (!gave_up.ok()) {  // (requests admitted since end at once)
    EndWaiting(gave_up);
    absl::MutexLock lock(&mu_);
    if (!stop_) wake_.WaitWithTimeout(&mu_, absl::Milliseconds(100));
    return false;
  }
  if (absl::Now() < next_start_) {
    // Backing off. Short sleeps (a request or a cancel also wakes it), so
    // that the loop keeps taking cancels meanwhile.
    absl::MutexLock lock(&mu_);
    if (!stop_) {
      wake_.WaitWithDeadline(
          &mu_, std::min(next_start_, absl::Now() + absl::Milliseconds(100)));
    }
    return false;
  }
  StartCancel cancel;  // for the destructor, while the group starts
  {
    absl::MutexLock lock(&mu_);
    if (stop_) return false;
    starting_ = &cancel;
  }
  absl::StatusOr<std::unique_ptr<WorkerGroup>> g = options_.start_group(cancel);
  {
    absl::MutexLock lock(&mu_);
    starting_ = nullptr;
    if (stop_) return false;  // (a group that started is stopped)
  }
  if (!g.ok()) {
    StartFailed(g.status());
    return false;
  }
  start_failures_ = same_failures_ = 0;
  {
    absl::MutexLock lock(&mu_);
    queued_ = scheduler_->waiting();
    group_ = *std::move(g);
    serving_ = true;
    activation_dtype_ = group_->activation_dtype();
  }
  if (options_.on_serving) options_.on_serving(true, absl::OkStatus());
  return true;
}

void Engine::StartFailed(const absl::Status& why) {
  const absl::Status previous = last_failure();
  same_failures_ = start_failures_ > 0 && SameFailure(why, previous)
                       ? same_failures_ + 1
                       : 1;
  // Each failure in a row doubles the wait (up to max_restart_backoff): a
  // one-off (a worker that died) heals at once, a load that fails the
  // same way every time ends after max_start_failures tries.
  const absl::Duration wait = std::min(
      options_.restart_backoff * (int64_t{1} << std::min(start_failures_, 30)),
      options_.max_restart_backoff);
  ++start_failures_;
  next_start_ = absl::Now() + wait;
  if (options_.metrics != nullptr) options_.metrics->WorkerGroupFailed();
  const bool give_up = options_.max_start_failures > 0 &&
                       same_failures_ >= options_.max_start_failures;
  const absl::Status gave_up =
      give_up ? absl::UnavailableError(absl::StrCat(
                    "the model cannot be served: its workers failed to start ",
                    same_failures_, " times in a row with: ", why.message()))
              : absl::OkStatus();
  {
    absl::MutexLock lock(&mu_);
    queued_ = scheduler_->waiting();
    last_failure_ = why;
    gave_up_ = gave_up;
  }
  if (!give_up) {
    if (options_.on_start_failed) options_.on_start_failed(why, wait);
    return;
  }
  if (options_.on_gave_up) options_.on_gave_up(gave_up);  // heard first
  EndWaiting(gave_up);
}

void Engine::EndWaiting(const absl::Status& why) {
  std::vector<uint64_t> ids;
  for (const auto& [id, a] : active_) ids.push_back(id);
  for (uint64_t id : ids) EndActive(id, why);
  PublishLoad();
}

void Engine::RetireFailedGroup() {
  // Not serving before the running requests hear why: a client that sees
  // UNAVAILABLE finds health NOT_SERVING.
  const absl::Status why = group_->failed();
  {
    absl::MutexLock lock(&mu_);
    serving_ = false;
    last_failure_ = why;
  }
  if (options_.on_serving) options_.on_serving(false, why);
  if (options_.metrics != nullptr) options_.metrics->WorkerGroupFailed();
  RequeueRunning(why);
  scheduler_->ClearCache();  // the keys and values went with the group
  PublishLoad();
  group_.reset();
}

void Engine::StepOnce() {
  const StepPlan plan = scheduler_->Schedule();
  if (Metrics* m = options_.metrics; m != nullptr) {
    m->Preemptions(static_cast<int64_t>(plan.preempted.size()));
    m->PrefixCacheLookups(plan.cache_queries, plan.cache_hits);
  }
  {
    absl::MutexLock lock(&mu_);
    queued_ = scheduler_->waiting();
  }
  if (plan.seqs.empty()) {  // not expected (Add checked that each fits)
    absl::MutexLock lock(&mu_);
    wake_.WaitWithTimeout(&mu_, absl::Milliseconds(10));
    return;
  }
  RunStep(plan);
}

void Engine::EndAll(const absl::Status& status) {
  for (auto& [id, a] : active_) End(*a, status, Finish::kLength);
  active_.clear();
  std::deque<std::unique_ptr<Active>> late;
  {
    absl::MutexLock lock(&mu_);
    late.swap(submitted_);
  }
  for (auto& a : late) End(*a, status, Finish::kLength);  // unlocked
}

}  // namespace octet
