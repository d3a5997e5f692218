#include "coordinator/scheduler.h"

#include <algorithm>
#include <span>

#include "absl/strings/str_cat.h"

namespace octet {

int64_t StepPlan::tokens() const {
  int64_t n = 0;
  for (const ScheduledSeq& s : seqs) n += static_cast<int64_t>(s.tokens.size());
  return n;
}

absl::StatusOr<std::unique_ptr<Scheduler>> Scheduler::Create(
    const SchedulerOptions& o) {
  for (auto [name, value] : {std::pair{"num_blocks", o.num_blocks},
                             {"block_size", o.block_size},
                             {"max_tokens_per_step", o.max_tokens_per_step},
                             {"max_running", o.max_running},
                             {"max_waiting", o.max_waiting}}) {
    if (value < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "scheduler: ", name, " must be at least 1, got ", value));
    }
  }
  return std::unique_ptr<Scheduler>(new Scheduler(o));
}

Scheduler::Scheduler(const SchedulerOptions& options)
    : options_(options),
      pool_(options.num_blocks, options.block_size,
            options.prefix_caching && options.chunked_prefill) {}

absl::Status Scheduler::Add(SeqId id, std::vector<int32_t> prompt,
                            int64_t max_new_tokens, bool use_prefix_cache) {
  if (seqs_.contains(id)) {
    return absl::AlreadyExistsError(absl::StrCat("sequence ", id, " exists"));
  }
  if (prompt.empty() || max_new_tokens < 1) {
    return absl::InvalidArgumentError(
        "a sequence needs a prompt and at least one new token");
  }
  if (absl::Status s =
          CheckFits(static_cast<int64_t>(prompt.size()), max_new_tokens);
      !s.ok()) {
    return s;
  }
  if (waiting() >= options_.max_waiting) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "the queue is full (", options_.max_waiting, " waiting requests)"));
  }
  auto seq = std::make_unique<Seq>();
  seq->id = id;
  seq->arrival = arrivals_++;
  seq->prompt_size = static_cast<int64_t>(prompt.size());
  seq->tokens = std::move(prompt);
  seq->use_prefix_cache = use_prefix_cache;
  waiting_.push_back(seq.get());
  seqs_[id] = std::move(seq);
  return absl::OkStatus();
}

absl::Status Scheduler::CheckFits(int64_t prompt_tokens,
                                  int64_t max_new_tokens) const {
  const int64_t need = BlocksFor(prompt_tokens + max_new_tokens);
  if (need > options_.num_blocks) {
    return absl::InvalidArgumentError(
        absl::StrCat("the prompt (", prompt_tokens, " tokens) and ",
                     max_new_tokens, " new tokens need ", need,
                     " KV-cache blocks; the server has ", options_.num_blocks));
  }
  return absl::OkStatus();
}

bool Scheduler::Grow(Seq& seq, int64_t tokens) {
  const int64_t more =
      BlocksFor(tokens) - static_cast<int64_t>(seq.blocks.size());
  if (more > free_blocks()) return false;
  for (int64_t i = 0; i < more; ++i) seq.blocks.push_back(pool_.Take());
  return true;
}

void Scheduler::Release(Seq& seq) {
  // Back in reverse: the next taker gets free ones in the same order, and
  // cached ones are evicted from the sequence's end, its prefix last.
  for (auto b = seq.blocks.rbegin(); b != seq.blocks.rend(); ++b) {
    pool_.Release(*b);
  }
  seq.blocks.clear();
  seq.cached_blocks = 0;
  seq.computed = 0;
  seq.awaiting_token = false;
}

void Scheduler::ToWaiting(Seq* seq) {
  waiting_.insert(std::upper_bound(waiting_.begin(), waiting_.end(), seq,
                                   [](const Seq* a, const Seq* b) {
                                     return a->arrival < b->arrival;
                                   }),
                  seq);
}

void Scheduler::Plan(Seq& seq, int64_t n, StepPlan& plan) {
  ScheduledSeq s;
  s.id = seq.id;
  s.start = seq.computed;
  s.tokens.assign(seq.tokens.begin() + seq.computed,
                  seq.tokens.begin() + seq.computed + n);
  s.block_table = &seq.blocks;
  seq.computed += n;
  s.sample = seq.computed == static_cast<int64_t>(seq.tokens.size());
  seq.awaiting_token = s.sample;
  seq.planned = steps_;
  plan.seqs.push_back(std::move(s));
}

int64_t Scheduler::Wanted(const Seq& seq) const {
  if (seq.replay) {
    return seq.computed < seq.prompt_size ? seq.prompt_size - seq.computed : 1;
  }
  return static_cast<int64_t>(seq.tokens.size()) - seq.computed;
}

bool Scheduler::PreemptYoungest(StepPlan& plan) {
  Seq* victim = running_.back();
  if (victim->planned == steps_) return false;
  running_.pop_back();
  Release(*victim);
  ToWaiting(victim);
  plan.preempted.push_back(victim->id);
  return true;
}

StepPlan Scheduler::Schedule() {
  StepPlan plan;
  ++steps_;
  int64_t budget = options_.max_tokens_per_step;
  ScheduleDecodes(plan, budget);
  SchedulePrompts(plan, budget);
  Admit(plan, budget);
  return plan;
}

void Scheduler::ScheduleDecodes(StepPlan& plan, int64_t& budget) {
  // Oldest first. Short of a block, the youngest running sequence (maybe
  // this one) is preempted: it comes after this one, so it is not in the
  // plan yet.
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Seq& seq = *running_[i];
    if (seq.awaiting_token || Wanted(seq) != 1) continue;
    while (!Grow(seq, seq.computed + 1)) {
      const bool itself = running_.back() == &seq;
      // Gone itself, the youngest: none come after it. (The youngest is
      // never in the plan here, so PreemptYoungest cannot refuse.)
      if (!PreemptYoungest(plan) || itself) return;
    }
    Plan(seq, 1, plan);
    budget -= 1;
  }
}

void Scheduler::SchedulePrompts(StepPlan& plan, int64_t& budget) {
  // Oldest first, each as much of its prompt as the budget left allows, or
  // as the blocks allow once younger sequences that are not in the plan
  // are preempted.
  const int64_t block = options_.block_size;
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Seq& seq = *running_[i];
    if (seq.awaiting_token || seq.planned == steps_ || Wanted(seq) < 2) {
      continue;
    }
    int64_t n = std::min(Wanted(seq), budget);
    while (n > 0 && !Grow(seq, seq.computed + n)) {
      const int64_t fit =
          (static_cast<int64_t>(seq.blocks.size()) + free_blocks()) * block -
          seq.computed;
      if (fit > 0) {
        n = std::min(n, fit);  // what the free blocks hold
      } else if (running_.back() == &seq || !PreemptYoungest(plan)) {
        n = 0;  // nothing to take room from: later
      }
    }
    if (n == 0) continue;
    Plan(seq, n, plan);
    budget -= n;
  }
}

void Scheduler::Admit(StepPlan& plan, int64_t& budget) {
  // In arrival order; the first that does not fit stops them. None in a
  // step that had to preempt: memory is short, and a sequence just
  // preempted would come straight back in. Without chunked prefill a
  // prompt runs whole, and the first admission of a step may exceed the
  // budget (a prompt longer than it runs as the step's only prefill).
  bool admitted = false;
  auto by_arrival = [](const Seq* a, const Seq* b) {
    return a->arrival < b->arrival;
  };
  while (plan.preempted.empty() && !waiting_.empty() &&
         (budget > 0 || !options_.chunked_prefill) &&
         running() < options_.max_running) {
    Seq* seq = waiting_.front();
    FindPrefix(*seq);
    int64_t n = Wanted(*seq);
    if (options_.chunked_prefill) {
      n = std::min(n, budget);
    } else if (admitted && n > budget) {
      break;
    }
    if (!Grow(*seq, seq->computed + n)) {
      Release(*seq);  // what it found goes back to the cache
      break;
    }
    waiting_.pop_front();
    running_.insert(
        std::upper_bound(running_.begin(), running_.end(), seq, by_arrival),
        seq);
    const int64_t hit = seq->computed;
    Plan(*seq, n, plan);
    if (seq->use_prefix_cache) {
      plan.cache_queries += static_cast<int64_t>(seq->tokens.size());
      plan.cache_hits += hit;
    }
    if (hit > 0) {
      plan.seqs.back().cached_prefix.assign(seq->tokens.begin(),
                                            seq->tokens.begin() + hit);
    }
    budget -= n;
    admitted = true;
  }
}

void Scheduler::FindPrefix(Seq& seq) {
  if (!seq.use_prefix_cache) return;
  // Whole blocks, short of the last token.
  const int64_t most =
      (static_cast<int64_t>(seq.tokens.size()) - 1) / options_.block_size;
  seq.blocks = pool_.Match(seq.tokens, most);
  seq.cached_blocks = seq.blocks.size();
  seq.computed = static_cast<int64_t>(seq.blocks.size()) * options_.block_size;
}

void Scheduler::Written(const StepPlan& plan) {
  const int64_t block = options_.block_size;
  for (const ScheduledSeq& q : plan.seqs) {
    auto it = seqs_.find(q.id);
    if (it == seqs_.end()) continue;
    Seq& seq = *it->second;
    const size_t full = std::min(
        seq.blocks.size(),
        static_cast<size_t>((q.start + static_cast<int64_t>(q.tokens.size())) /
                            block));
    for (; seq.cached_blocks < full; ++seq.cached_blocks) {
      pool_.Cache(seq.blocks, seq.cached_blocks,
                  std::span<const int32_t>(seq.tokens)
                      .subspan(seq.cached_blocks * block, block));
    }
  }
}

absl::Status Scheduler::Append(SeqId id, int32_t token) {
  auto it = seqs_.find(id);
  if (it == seqs_.end() || !it->second->awaiting_token) {
    return absl::FailedPreconditionError(
        absl::StrCat("sequence ", id, " did not sample in the last step"));
  }
  it->second->tokens.push_back(token);
  it->second->awaiting_token = false;
  it->second->replay = false;  // caught up: it sampled again
  return absl::OkStatus();
}

void Scheduler::Requeue(SeqId id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  Seq* seq = it->second.get();
  auto r = std::find(running_.begin(), running_.end(), seq);
  if (r == running_.end()) return;
  running_.erase(r);
  Release(*seq);
  seq->replay = true;
  ToWaiting(seq);
}

void Scheduler::Finish(SeqId id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  Seq* seq = it->second.get();
  Release(*seq);
  std::erase(running_, seq);
  std::erase(waiting_, seq);
  seqs_.erase(it);
}

std::vector<SeqId> Scheduler::running_ids() const {
  std::vector<SeqId> ids;
  for (const Seq* s : running_) ids.push_back(s->id);
  return ids;
}

std::vector<int32_t> Scheduler::tokens(SeqId id) const {
  auto it = seqs_.find(id);
  return it == seqs_.end() ? std::vector<int32_t>{} : it->second->tokens;
}

}  // namespace octet
