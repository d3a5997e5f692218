// Continuous batching with chunked prefill and automatic prefix caching:
// which sequences run in the next forward pass, with which of their tokens,
// and where their keys and values live in the workers' paged KV cache.
//
// The scheduler owns the block accounting (the workers only store blocks at
// the slots they are told; block_pool.h): a sequence holds ceil(cached
// tokens / block size) blocks, taken as it grows and all given back when it
// finishes or is cancelled. Each step spends a token budget
// (max_tokens_per_step), in this order:
//   1. decodes: running sequences whose prompt is in the cache feed their
//      last sampled token, oldest first. When blocks run out the youngest
//      running sequence is preempted: it gives back its blocks and goes
//      back to the front of the queue with the tokens it has, to be
//      prefilled again later;
//   2. prompts under way: running sequences whose prompt is partly in the
//      cache feed their next chunk, oldest first, as much as the budget
//      left allows (preempting the youngest as decodes do);
//   3. admissions: waiting sequences in arrival order (first come, first
//      served: a later request never overtakes one that does not fit yet),
//      each with a first chunk of its prompt as the budget left and the free
//      blocks allow. None in a step that had to preempt.
// So a long prompt never holds running streams up for more than one
// budgeted step. Where chunks fall depends on the load, and a sequence's
// tokens must not: the workers scale FP8 activations per token and sum
// attention over cached keys as over a chunk's own, so a chunk boundary
// changes no bit (tests/coordinator/chunked_prefill_test).
//
// Prefix caching: once a step has written a sequence's full block, the
// block is cached (block_pool.h), and it stays cached after the sequence
// ends, until its room is needed. An admission first takes the longest run
// of cached blocks that begins its tokens (whole blocks, never its last
// token, which must be fed to give logits) and starts its prompt after
// them: a hit is one more chunk boundary, so it changes no bit either (the
// same test). A sequence that asks for its prompt's logprobs looks nothing
// up (every prompt token must be fed to be scored); a preempted one finds
// its own blocks if they are still there. Forget the cache (ClearCache)
// when the workers' cache is lost.
//
// With chunked_prefill off (the workers' --activation_scales sequence: a
// scale per sequence's rows in one call), each prompt runs whole in the
// step that admits it, one longer than the budget left runs as the step's
// only admission, and nothing is cached.
// Not thread-safe: the coordinator's step loop owns it.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "coordinator/block_pool.h"

namespace octet {

struct SchedulerOptions {
  int64_t num_blocks = 0;   // KV blocks the workers hold
  int64_t block_size = 16;  // tokens per block
  // The token budget of one step (without chunked prefill one prompt
  // longer than it may still run alone in a step).
  int64_t max_tokens_per_step = 2048;
  // Prompts cut into chunks to fit the budget (see above); off: whole.
  bool chunked_prefill = true;
  // Full blocks kept and shared (see above); only with chunked_prefill.
  bool prefix_caching = true;
  int64_t max_running = 64;    // sequences in one forward at most
  int64_t max_waiting = 1024;  // queued sequences; more: RESOURCE_EXHAUSTED
};

using SeqId = uint64_t;

// One sequence's share of a step.
struct ScheduledSeq {
  SeqId id = 0;
  int64_t start = 0;            // position of the first fed token
  std::vector<int32_t> tokens;  // the tokens fed this step
  // The sequence's blocks, covering start + tokens.size() tokens; valid
  // until the next call that changes the scheduler.
  const std::vector<int32_t>* block_table = nullptr;
  bool sample = false;  // this step gives the sequence's next token
  // In the step that admits it after a prefix-cache hit: its tokens before
  // `start`, found in the cache and so never fed (the sampler's penalties
  // need them).
  std::vector<int32_t> cached_prefix;
};

struct StepPlan {
  std::vector<ScheduledSeq> seqs;
  // Sequences that lost their KV blocks in this step (recomputed later).
  std::vector<SeqId> preempted;
  // Tokens this step's admissions looked up in the prefix cache, and found.
  int64_t cache_queries = 0, cache_hits = 0;
  int64_t tokens() const;
};

class Scheduler {
 public:
  // InvalidArgument naming the option when one is out of range.
  static absl::StatusOr<std::unique_ptr<Scheduler>> Create(
      const SchedulerOptions& options);

  // Queues a new sequence, which starts from the prefix cache if
  // `use_prefix_cache`. ResourceExhausted when the queue is full;
  // InvalidArgument when prompt plus max_new_tokens could never fit in the
  // whole cache; AlreadyExists for an id in use.
  absl::Status Add(SeqId id, std::vector<int32_t> prompt,
                   int64_t max_new_tokens, bool use_prefix_cache = true);

  // Whether a sequence of prompt_tokens + max_new_tokens fits in the whole
  // cache at all (what Add checks): InvalidArgument saying what it needs.
  // Thread-safe (reads the options only).
  absl::Status CheckFits(int64_t prompt_tokens, int64_t max_new_tokens) const;

  // The next step; empty when nothing can run.
  StepPlan Schedule();

  // The workers ran `plan` (or a part of it): the full blocks it wrote are
  // cached.
  void Written(const StepPlan& plan);
  // The workers' cache is lost (a new group): nothing cached is kept.
  void ClearCache() { pool_.Clear(); }

  // The token a step sampled for `id` (a sequence with sample = true).
  // FailedPrecondition if `id` is not running or did not sample.
  absl::Status Append(SeqId id, int32_t token);

  // Ends a sequence, finished or cancelled, waiting or running: its blocks
  // are free at once. Unknown ids are ignored.
  void Finish(SeqId id);

  // A running sequence whose KV cache was lost (its worker group failed)
  // goes back to the queue, in arrival order, with every token it has. It
  // is then replayed as it first ran: its prompt (in chunks, or whole
  // without chunked prefill), then each generated token in a step of its
  // own, sampling only after the last; so its logits -- FP8 scales
  // included -- and its next tokens are those it would have had without
  // the failure. (A preemption instead recomputes all tokens as one
  // prompt: the same bits with per-token scales.) Waiting or unknown ids
  // are ignored.
  void Requeue(SeqId id);

  int64_t waiting() const { return static_cast<int64_t>(waiting_.size()); }
  int64_t running() const { return static_cast<int64_t>(running_.size()); }
  // Blocks not in use (free, or cached and kept for later).
  int64_t free_blocks() const { return pool_.available(); }
  int64_t used_blocks() const { return options_.num_blocks - free_blocks(); }
  int64_t cached_blocks() const { return pool_.cached(); }
  // The sequences in the running batch (not the waiting ones).
  std::vector<SeqId> running_ids() const;
  // Every token of `id` so far: prompt, then generated (empty if unknown).
  std::vector<int32_t> tokens(SeqId id) const;

 private:
  struct Seq {
    SeqId id = 0;
    uint64_t arrival = 0;         // order of Add
    std::vector<int32_t> tokens;  // prompt, then generated
    int64_t computed = 0;         // tokens whose KV is in the cache
    std::vector<int32_t> blocks;
    bool awaiting_token = false;  // sampled in the last step, not appended
    int64_t prompt_size = 0;
    bool replay = false;  // requeued: replays its generated tokens one a step
    uint64_t planned = 0;  // the last step (steps_) it was planned in
    bool use_prefix_cache = true;
    size_t cached_blocks = 0;  // of `blocks`, those cached (or found)
  };

  explicit Scheduler(const SchedulerOptions& options);
  int64_t BlocksFor(int64_t tokens) const {
    return (tokens + options_.block_size - 1) / options_.block_size;
  }
  // Grows `seq`'s blocks to cover `tokens`; false (nothing taken) if there
  // are not enough free.
  bool Grow(Seq& seq, int64_t tokens);
  // Preempts the youngest running sequence unless it is in this step's plan
  // already: false when it was.
  bool PreemptYoungest(StepPlan& plan);
  // The tokens `seq` feeds next, all at once if the budget allowed: its
  // prompt's rest, or one (a decode, or a replayed generated token).
  int64_t Wanted(const Seq& seq) const;
  // The steps' three parts (see the top of this file).
  void ScheduleDecodes(StepPlan& plan, int64_t& budget);
  void SchedulePrompts(StepPlan& plan, int64_t& budget);
  void Admit(StepPlan& plan, int64_t& budget);
  void Release(Seq& seq);
  // Puts a sequence that holds no blocks back in the queue, by arrival.
  void ToWaiting(Seq* seq);
  // Plans `n` tokens of `seq` from its computed ones.
  void Plan(Seq& seq, int64_t n, StepPlan& plan);
  // A waiting `seq` takes the cached blocks that begin its tokens.
  void FindPrefix(Seq& seq);

  const SchedulerOptions options_;
  absl::flat_hash_map<SeqId, std::unique_ptr<Seq>> seqs_;
  std::deque<Seq*> waiting_;   // arrival order (preempted ones in front)
  std::vector<Seq*> running_;  // arrival order
  BlockPool pool_;
  uint64_t arrivals_ = 0;
  uint64_t steps_ = 0;  // Schedule calls
};

}  // namespace octet
