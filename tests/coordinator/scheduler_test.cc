// The continuous-batching scheduler (coordinator/scheduler.h): token budget,
// chunked prefill (and whole prompts without it), first-come-first-served
// admission, block accounting, preemption with recompute, cancellation, the
// queue limit, prefix caching; and random runs, chunked and not, with
// shared prefixes, checked against the invariants at every step (with
// caching, against a model of what the workers' blocks hold).
#include "coordinator/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <random>
#include <set>

namespace octet {
namespace {

constexpr bool kWhole = false;  // chunked_prefill off

std::unique_ptr<Scheduler> Make(int64_t blocks, int64_t block_size,
                                int64_t budget, int64_t max_running = 64,
                                int64_t max_waiting = 1024,
                                bool chunked = true) {
  auto s = Scheduler::Create({.num_blocks = blocks,
                              .block_size = block_size,
                              .max_tokens_per_step = budget,
                              .chunked_prefill = chunked,
                              .max_running = max_running,
                              .max_waiting = max_waiting});
  EXPECT_TRUE(s.ok()) << s.status();
  return *std::move(s);
}

std::vector<int32_t> Prompt(int64_t n, int32_t first = 100) {
  std::vector<int32_t> p(n);
  std::iota(p.begin(), p.end(), first);
  return p;
}

// Appends a token to every sequence of `plan` that sampled.
void AppendSampled(Scheduler& s, const StepPlan& plan, int32_t token = 7) {
  for (const ScheduledSeq& q : plan.seqs) {
    if (q.sample) {
      ASSERT_TRUE(s.Append(q.id, token).ok());
    }
  }
}

TEST(SchedulerTest, BadOptionsAreErrorsNamingThem) {
  auto s = Scheduler::Create({.num_blocks = 0});
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("num_blocks"), std::string::npos);
  s = Scheduler::Create({.num_blocks = 4, .block_size = 0});
  EXPECT_NE(s.status().message().find("block_size"), std::string::npos);
}

TEST(SchedulerTest, PrefillsThenDecodesTogether) {
  auto s = Make(100, 4, 64);
  for (SeqId id : {1, 2, 3}) ASSERT_TRUE(s->Add(id, Prompt(5), 8).ok());
  StepPlan p = s->Schedule();
  ASSERT_EQ(p.seqs.size(), 3u);
  for (const ScheduledSeq& q : p.seqs) {
    EXPECT_EQ(q.start, 0);
    EXPECT_EQ(q.tokens, Prompt(5));
    EXPECT_TRUE(q.sample);
    EXPECT_EQ(q.block_table->size(), 2u);  // 5 tokens, 4 per block
  }
  EXPECT_EQ(s->used_blocks(), 6);
  // Nothing more until the sampled tokens are appended.
  EXPECT_TRUE(s->Schedule().seqs.empty());
  AppendSampled(*s, p, 9);
  p = s->Schedule();
  ASSERT_EQ(p.seqs.size(), 3u);
  for (const ScheduledSeq& q : p.seqs) {
    EXPECT_EQ(q.start, 5);
    EXPECT_EQ(q.tokens, (std::vector<int32_t>{9}));
    EXPECT_TRUE(q.sample);
  }
  EXPECT_EQ(s->Append(1, 3).code(), absl::StatusCode::kOk);
  EXPECT_EQ(s->Append(1, 3).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(SchedulerTest, UnchunkedAPromptIsWholeAndALongOneRunsAloneOverBudget) {
  auto s = Make(100, 4, 16, 64, 1024, kWhole);
  ASSERT_TRUE(s->Add(1, Prompt(6), 8).ok());
  StepPlan p = s->Schedule();
  AppendSampled(*s, p);
  ASSERT_TRUE(s->Add(2, Prompt(40), 4).ok());
  ASSERT_TRUE(s->Add(3, Prompt(5), 4).ok());
  p = s->Schedule();  // 1 decodes; 2 is the step's one admission, 40 tokens
  ASSERT_EQ(p.seqs.size(), 2u);
  EXPECT_EQ(p.seqs[1].id, 2u);
  EXPECT_EQ(p.seqs[1].tokens, Prompt(40));
  EXPECT_TRUE(p.seqs[1].sample);
  EXPECT_EQ(p.seqs[1].block_table->size(), 10u);
  EXPECT_EQ(s->waiting(), 1);  // 3 waits for a step with room
  AppendSampled(*s, p);
  p = s->Schedule();
  ASSERT_EQ(p.seqs.size(), 3u);
  EXPECT_EQ(p.seqs[2].id, 3u);
  EXPECT_EQ(p.tokens(), 2 + 5);
}

TEST(SchedulerTest, UnchunkedDecodesGoFirstAndNewcomersShareTheRest) {
  auto s = Make(100, 4, 10, 64, 1024, kWhole);
  ASSERT_TRUE(s->Add(1, Prompt(6), 8).ok());
  StepPlan p = s->Schedule();
  AppendSampled(*s, p);
  ASSERT_TRUE(s->Add(2, Prompt(5), 8).ok());
  ASSERT_TRUE(s->Add(3, Prompt(5), 8).ok());
  p = s->Schedule();
  ASSERT_EQ(p.seqs.size(), 2u);
  EXPECT_EQ(p.seqs[0].id, 1u);  // the decode
  EXPECT_EQ(p.seqs[0].tokens.size(), 1u);
  EXPECT_EQ(p.seqs[1].id, 2u);  // 5 of the 9 tokens left
  EXPECT_EQ(p.tokens(), 6);
  EXPECT_EQ(s->waiting(), 1);  // 3 would exceed the budget
}

TEST(SchedulerTest, AdmissionIsFirstComeFirstServed) {
  // 4 blocks of 4 tokens. Sequence 1 holds 2 and takes a third for its
  // 9th token; sequence 2 needs 3 for its prompt and must wait; sequence 3
  // (1 block) arrives later and must not overtake it.
  auto s = Make(4, 4, 12);
  ASSERT_TRUE(s->Add(1, Prompt(8), 8).ok());
  StepPlan p = s->Schedule();
  AppendSampled(*s, p);
  ASSERT_TRUE(s->Add(2, Prompt(12), 4).ok());
  ASSERT_TRUE(s->Add(3, Prompt(2), 2).ok());
  p = s->Schedule();
  ASSERT_EQ(p.seqs.size(), 1u);
  EXPECT_EQ(p.seqs[0].id, 1u);
  EXPECT_EQ(s->waiting(), 2);
  EXPECT_EQ(s->free_blocks(), 1);
  ASSERT_TRUE(s->Append(1, 5).ok());
  s->Finish(1);  // done: its blocks are free at once
  EXPECT_EQ(s->free_blocks(), 4);
  p = s->Schedule();  // 2 takes the whole budget; 3 waits one more step
  ASSERT_EQ(p.seqs.size(), 1u);
  EXPECT_EQ(p.seqs[0].id, 2u);
  EXPECT_EQ(p.seqs[0].tokens.size(), 12u);
  AppendSampled(*s, p);
  p = s->Schedule();  // 2's 13th token takes the last block: 3 still waits
  ASSERT_EQ(p.seqs.size(), 1u);
  EXPECT_EQ(s->waiting(), 1);
  AppendSampled(*s, p);
  s->Finish(2);
  p = s->Schedule();
  ASSERT_EQ(p.seqs.size(), 1u);
  EXPECT_EQ(p.seqs[0].id, 3u);
}

TEST(SchedulerTest, OutOfBlocksTheYoungestIsPreemptedAndRecomputed) {
  // 3 blocks of 2 tokens: two sequences of 2-token prompts fill 2 blocks;
  // when both need a second block, the younger gives its block back and
  // later prefills its prompt and generated token again.
  auto s = Make(3, 2, 16);
  ASSERT_TRUE(s->Add(1, Prompt(2, 10), 4).ok());
  ASSERT_TRUE(s->Add(2, Prompt(2, 20), 4).ok());
  StepPlan p = s->Schedule();
  ASSERT_EQ(p.seqs.size(), 2u);
  ASSERT_TRUE(s->Append(1, 11).ok());
  ASSERT_TRUE(s->Append(2, 21).ok());
  p = s->Schedule();  // 1 takes the third block; 2 has none: preempted
  ASSERT_EQ(p.seqs.size(), 1u);
  EXPECT_EQ(p.seqs[0].id, 1u);
  EXPECT_EQ(p.preempted, (std::vector<SeqId>{2}));
  EXPECT_EQ(s->waiting(), 1);
  EXPECT_EQ(s->used_blocks(), 2);
  ASSERT_TRUE(s->Append(1, 12).ok());
  s->Finish(1);
  p = s->Schedule();
  ASSERT_EQ(p.seqs.size(), 1u);
  EXPECT_EQ(p.seqs[0].id, 2u);
  EXPECT_EQ(p.seqs[0].start, 0);
  EXPECT_EQ(p.seqs[0].tokens, (std::vector<int32_t>{20, 21, 21}));
  EXPECT_TRUE(p.seqs[0].sample);
}

// A sequence whose worker group failed is replayed as it first ran: its
// prompt alone, then each generated token in a step of its own without
// sampling, and it samples again only after the last -- so every call it
// makes matches one it made before, and its numerics (per-call FP8 scales)
// with them.
TEST(SchedulerTest, ARequeuedSequenceReplaysExactlyAsItRan) {
  auto s = Make(100, 4, 64);
  ASSERT_TRUE(s->Add(1, Prompt(5), 8).ok());
  ASSERT_TRUE(s->Add(2, Prompt(3, 50), 8).ok());
  StepPlan p = s->Schedule();
  AppendSampled(*s, p, 7);
  for (int32_t t : {8, 9}) {
    p = s->Schedule();
    AppendSampled(*s, p, t);
  }
  // 1 has 5 + 3 tokens, 2 has 3 + 3; one more step is in flight when the
  // group fails: its tokens never come back.
  p = s->Schedule();
  ASSERT_EQ(p.seqs.size(), 2u);
  for (SeqId id : s->running_ids()) s->Requeue(id);
  EXPECT_EQ(s->running(), 0);
  EXPECT_EQ(s->waiting(), 2);
  EXPECT_EQ(s->used_blocks(), 0);
  const std::vector<int32_t> generated = {7, 8, 9};
  p = s->Schedule();  // both prompts, no sampling
  ASSERT_EQ(p.seqs.size(), 2u);
  EXPECT_EQ(p.seqs[0].id, 1u);  // arrival order
  EXPECT_EQ(p.seqs[0].tokens, Prompt(5));
  EXPECT_EQ(p.seqs[1].tokens, Prompt(3, 50));
  for (const ScheduledSeq& q : p.seqs) EXPECT_FALSE(q.sample);
  for (size_t i = 0; i < generated.size(); ++i) {
    p = s->Schedule();  // one generated token each
    ASSERT_EQ(p.seqs.size(), 2u);
    for (const ScheduledSeq& q : p.seqs) {
      EXPECT_EQ(q.tokens, (std::vector<int32_t>{generated[i]}));
      EXPECT_EQ(q.start, (q.id == 1 ? 5 : 3) + static_cast<int64_t>(i));
      // Only the last one samples: the token that never came back.
      EXPECT_EQ(q.sample, i + 1 == generated.size());
    }
  }
  AppendSampled(*s, p, 10);
  EXPECT_EQ(s->tokens(1),
            (std::vector<int32_t>{100, 101, 102, 103, 104, 7, 8, 9, 10}));
  // Caught up, it decodes as before.
  p = s->Schedule();
  ASSERT_EQ(p.seqs.size(), 2u);
  EXPECT_EQ(p.seqs[0].tokens, (std::vector<int32_t>{10}));
  EXPECT_TRUE(p.seqs[0].sample);
  // Waiting or unknown ids are ignored.
  ASSERT_TRUE(s->Add(3, Prompt(2), 4).ok());
  s->Requeue(3);
  s->Requeue(99);
  EXPECT_EQ(s->waiting(), 1);
}

TEST(SchedulerTest, CancellingFreesBlocksWaitingOrRunning) {
  auto s = Make(10, 4, 8, 64, 1024, kWhole);
  ASSERT_TRUE(s->Add(1, Prompt(12), 4).ok());
  ASSERT_TRUE(s->Add(2, Prompt(4), 4).ok());
  StepPlan p = s->Schedule();  // 1's 12 tokens; 2 waits
  EXPECT_EQ(s->used_blocks(), 3);
  EXPECT_EQ(s->waiting(), 1);
  s->Finish(2);  // still waiting
  s->Finish(1);  // running, its sampled token not yet back
  EXPECT_EQ(s->used_blocks(), 0);
  EXPECT_EQ(s->running() + s->waiting(), 0);
  EXPECT_TRUE(s->Schedule().seqs.empty());
  s->Finish(99);  // unknown: ignored
}

TEST(SchedulerTest, QueueLimitsAndImpossibleRequestsAreErrors) {
  auto s = Make(4, 4, 16, 64, 2);
  EXPECT_EQ(s->Add(1, Prompt(10), 7).code(),  // 17 tokens: 5 blocks
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(s->Add(1, Prompt(10), 6).ok());
  EXPECT_EQ(s->Add(1, Prompt(2), 1).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_TRUE(s->Add(2, Prompt(2), 1).ok());
  EXPECT_EQ(s->Add(3, Prompt(2), 1).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(s->Add(4, {}, 1).code(), absl::StatusCode::kInvalidArgument);
}

TEST(SchedulerTest, UnchunkedRandomRunsKeepTheInvariants) {
  std::mt19937 rng(7);
  auto s = Make(24, 4, 20, 6, 1000, kWhole);
  std::set<SeqId> live;
  SeqId next = 1;
  size_t preempted = 0;
  for (int step = 0; step < 3000; ++step) {
    if (rng() % 3 == 0) {
      const int64_t prompt = 1 + rng() % 30, max_new = 1 + rng() % 40;
      if (s->Add(next, Prompt(prompt), max_new).ok()) live.insert(next);
      ++next;
    }
    if (!live.empty() && rng() % 7 == 0) {  // a cancel or a finish
      auto it = live.begin();
      std::advance(it, rng() % live.size());
      s->Finish(*it);
      live.erase(it);
    }
    const StepPlan p = s->Schedule();
    preempted += p.preempted.size();
    // Over the budget only with the step's one (long) admission.
    const auto admissions =
        std::count_if(p.seqs.begin(), p.seqs.end(),
                      [](const ScheduledSeq& q) { return q.start == 0; });
    ASSERT_TRUE(p.tokens() <= 20 || admissions == 1) << p.tokens();
    ASSERT_LE(s->running(), 6);
    std::set<int32_t> blocks;
    size_t held = 0;
    for (const ScheduledSeq& q : p.seqs) {
      const int64_t end = q.start + static_cast<int64_t>(q.tokens.size());
      ASSERT_GE(static_cast<int64_t>(q.block_table->size()) * 4, end);
      for (int32_t b : *q.block_table) {
        ASSERT_TRUE(b >= 0 && b < 24);
        ASSERT_TRUE(blocks.insert(b).second) << "block " << b << " shared";
      }
      held += q.block_table->size();
    }
    ASSERT_LE(static_cast<int64_t>(held), s->used_blocks());
    ASSERT_EQ(s->used_blocks() + s->free_blocks(), 24);
    // Finish sequences that reached 24 tokens (as max_new_tokens would).
    for (const ScheduledSeq& q : p.seqs) {
      if (!q.sample) continue;
      ASSERT_TRUE(s->Append(q.id, 1).ok());
      if (s->tokens(q.id).size() >= 24) {
        s->Finish(q.id);
        live.erase(q.id);
      }
    }
  }
  // No more arrivals: everything left must finish (no sequence starves or
  // deadlocks), and the run must have been tight enough to preempt.
  for (int step = 0; step < 10000 && !live.empty(); ++step) {
    const StepPlan p = s->Schedule();
    preempted += p.preempted.size();
    for (const ScheduledSeq& q : p.seqs) {
      if (!q.sample) continue;
      ASSERT_TRUE(s->Append(q.id, 1).ok());
      if (s->tokens(q.id).size() >= 24) {
        s->Finish(q.id);
        live.erase(q.id);
      }
    }
  }
  EXPECT_TRUE(live.empty()) << live.size() << " sequences never finished";
  EXPECT_GT(preempted, 0u);
  EXPECT_EQ(s->used_blocks(), 0);
  EXPECT_EQ(s->running() + s->waiting(), 0);
}

TEST(SchedulerTest, APromptIsCutIntoChunksOfTheBudgetLeft) {
  auto s = Make(100, 4, 16);
  ASSERT_TRUE(s->Add(1, Prompt(6), 8).ok());
  StepPlan p = s->Schedule();
  AppendSampled(*s, p);
  ASSERT_TRUE(s->Add(2, Prompt(40), 4).ok());
  ASSERT_TRUE(s->Add(3, Prompt(5), 4).ok());
  // 1 decodes; 2 takes the 15 tokens left, without sampling; 3 waits.
  p = s->Schedule();
  ASSERT_EQ(p.seqs.size(), 2u);
  EXPECT_EQ(p.seqs[1].id, 2u);
  EXPECT_EQ(p.seqs[1].start, 0);
  EXPECT_EQ(p.seqs[1].tokens, Prompt(15));
  EXPECT_FALSE(p.seqs[1].sample);
  EXPECT_EQ(p.seqs[1].block_table->size(), 4u);
  EXPECT_EQ(p.tokens(), 16);
  EXPECT_EQ(s->waiting(), 1);
  AppendSampled(*s, p);
  // 1 decodes, 2 goes on where it stopped, before 3 is admitted.
  p = s->Schedule();
  ASSERT_EQ(p.seqs.size(), 2u);
  EXPECT_EQ(p.seqs[1].id, 2u);
  EXPECT_EQ(p.seqs[1].start, 15);
  EXPECT_EQ(p.seqs[1].tokens, Prompt(15, 115));
  AppendSampled(*s, p);
  // 2's last 10 tokens, sampling; 3 admitted with the 5 left.
  p = s->Schedule();
  ASSERT_EQ(p.seqs.size(), 3u);
  EXPECT_EQ(p.seqs[1].start, 30);
  EXPECT_EQ(p.seqs[1].tokens, Prompt(10, 130));
  EXPECT_TRUE(p.seqs[1].sample);
  EXPECT_EQ(p.seqs[2].id, 3u);
  EXPECT_EQ(p.seqs[2].tokens, Prompt(5));
  EXPECT_TRUE(p.seqs[2].sample);
  EXPECT_EQ(p.tokens(), 16);
}

// Decodes first even when an older sequence's prompt is under way, so a
// long prompt holds running streams up for at most one budgeted step.
TEST(SchedulerTest, DecodesGoBeforeAnOlderPromptsNextChunk) {
  auto s = Make(100, 4, 8);
  ASSERT_TRUE(s->Add(1, Prompt(30), 4).ok());
  ASSERT_TRUE(s->Add(2, Prompt(2), 4).ok());
  StepPlan p = s->Schedule();  // 1's first 8 tokens; 2 waits
  ASSERT_EQ(p.seqs.size(), 1u);
  EXPECT_EQ(p.tokens(), 8);
  p = s->Schedule();  // 1's next 8
  ASSERT_EQ(p.seqs.size(), 1u);
  EXPECT_EQ(p.seqs[0].start, 8);
  s->Finish(1);
  p = s->Schedule();  // 2, whole
  ASSERT_EQ(p.seqs.size(), 1u);
  AppendSampled(*s, p);
  ASSERT_TRUE(s->Add(3, Prompt(30), 4).ok());
  for (int step = 0; step < 4; ++step) {
    p = s->Schedule();
    ASSERT_EQ(p.seqs.size(), 2u);
    EXPECT_EQ(p.seqs[0].id, 2u);  // the decode first, every step
    EXPECT_EQ(p.seqs[0].tokens.size(), 1u);
    EXPECT_EQ(p.seqs[1].id, 3u);
    EXPECT_EQ(p.seqs[1].start, 7 * step);
    EXPECT_LE(p.tokens(), 8);
    AppendSampled(*s, p);
  }
}

// Short of blocks, a prompt under way takes the tokens the free blocks hold
// and otherwise waits: as the youngest it preempts nobody, and never a
// sequence already in the plan. (Admission takes a chunk only whole.)
TEST(SchedulerTest, AChunkTakesWhatTheFreeBlocksHold) {
  auto s = Make(5, 4, 8);
  ASSERT_TRUE(s->Add(1, Prompt(4), 8).ok());
  StepPlan p = s->Schedule();  // 1 block
  AppendSampled(*s, p);
  ASSERT_TRUE(s->Add(2, Prompt(16), 1).ok());  // 5 blocks with its token
  p = s->Schedule();  // 1 decodes into a second block; 2's first 7 tokens
  ASSERT_EQ(p.seqs.size(), 2u);
  EXPECT_EQ(p.seqs[1].tokens.size(), 7u);
  AppendSampled(*s, p);
  EXPECT_EQ(s->free_blocks(), 1);
  p = s->Schedule();  // 2 wants 7 more; the last free block holds 5
  ASSERT_EQ(p.seqs.size(), 2u);
  EXPECT_EQ(p.seqs[1].start, 7);
  EXPECT_EQ(p.seqs[1].tokens, Prompt(5, 107));
  EXPECT_EQ(s->free_blocks(), 0);
  AppendSampled(*s, p);
  p = s->Schedule();  // no room, nobody younger: 2 waits, 1 decodes
  ASSERT_EQ(p.seqs.size(), 1u);
  EXPECT_EQ(p.seqs[0].id, 1u);
  EXPECT_TRUE(p.preempted.empty());
}

// A requeued sequence replays its prompt in chunks without sampling, then
// each generated token in a step of its own.
TEST(SchedulerTest, ARequeuedSequenceReplaysItsPromptInChunks) {
  auto s = Make(100, 4, 6);
  ASSERT_TRUE(s->Add(1, Prompt(10), 8).ok());
  StepPlan p = s->Schedule();
  p = s->Schedule();
  ASSERT_TRUE(p.seqs[0].sample);
  AppendSampled(*s, p, 7);
  p = s->Schedule();
  AppendSampled(*s, p, 8);
  s->Requeue(1);
  std::vector<std::pair<int64_t, size_t>> fed;  // start, count
  for (int step = 0; step < 4; ++step) {
    p = s->Schedule();
    ASSERT_EQ(p.seqs.size(), 1u);
    fed.emplace_back(p.seqs[0].start, p.seqs[0].tokens.size());
    EXPECT_EQ(p.seqs[0].sample, step == 3);
  }
  EXPECT_EQ(fed, (std::vector<std::pair<int64_t, size_t>>{
                     {0, 6}, {6, 4}, {10, 1}, {11, 1}}));
}

// The random runs' loop: 3000 steps in which `arrive` adds requests now
// and then and one step in seven a live sequence finishes (or is
// cancelled), then steps without arrivals until none is left (or 10000).
template <typename Arrive, typename Step>
void RunRandomly(std::mt19937& rng, Scheduler& s, std::set<SeqId>& live,
                 Arrive arrive, Step step) {
  for (int i = 0; i < 3000; ++i) {
    arrive();
    if (!live.empty() && rng() % 7 == 0) {
      auto it = live.begin();
      std::advance(it, rng() % live.size());
      s.Finish(*it);
      live.erase(it);
    }
    step();
    if (::testing::Test::HasFatalFailure()) return;
  }
  for (int i = 0; i < 10000 && !live.empty(); ++i) {
    step();
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST(SchedulerTest, ChunkedRandomRunsKeepTheInvariants) {
  std::mt19937 rng(11);
  auto s = Make(24, 4, 20, 6, 1000);
  std::set<SeqId> live;
  std::map<SeqId, int64_t> fed;  // each sequence's next position to feed
  SeqId next = 1;
  size_t preempted = 0, chunks = 0;
  auto step_once = [&]() {
    const StepPlan p = s->Schedule();
    preempted += p.preempted.size();
    for (SeqId id : p.preempted) fed[id] = 0;
    ASSERT_LE(p.tokens(), 20);  // never over the budget
    std::set<int32_t> blocks;
    for (const ScheduledSeq& q : p.seqs) {
      ASSERT_EQ(q.start, fed[q.id]) << "a gap or overlap in " << q.id;
      fed[q.id] = q.start + static_cast<int64_t>(q.tokens.size());
      chunks += q.tokens.size() > 1 && !q.sample;
      ASSERT_GE(static_cast<int64_t>(q.block_table->size()) * 4, fed[q.id]);
      for (int32_t b : *q.block_table) {
        ASSERT_TRUE(blocks.insert(b).second) << "block " << b << " shared";
      }
    }
    ASSERT_EQ(s->used_blocks() + s->free_blocks(), 24);
    for (const ScheduledSeq& q : p.seqs) {
      if (!q.sample) continue;
      ASSERT_TRUE(s->Append(q.id, 1).ok());
      if (s->tokens(q.id).size() >= 40) {
        s->Finish(q.id);
        live.erase(q.id);
      }
    }
  };
  RunRandomly(rng, *s, live, [&] {
    if (rng() % 3 == 0) {
      const int64_t prompt = 1 + rng() % 35, max_new = 1 + rng() % 40;
      if (s->Add(next, Prompt(prompt), max_new).ok()) live.insert(next);
      ++next;
    }
  }, step_once);
  if (HasFatalFailure()) return;
  EXPECT_TRUE(live.empty()) << live.size() << " sequences never finished";
  EXPECT_GT(preempted, 0u);
  EXPECT_GT(chunks, 0u);
  EXPECT_EQ(s->used_blocks(), 0);
}

// Written after each step, as the engine does, and the sampled tokens.
void StepDone(Scheduler& s, const StepPlan& plan, int32_t token = 7) {
  s.Written(plan);
  AppendSampled(s, plan, token);
}

TEST(SchedulerTest, ARepeatedPromptStartsAfterItsCachedBlocks) {
  auto s = Make(100, 4, 64);
  ASSERT_TRUE(s->Add(1, Prompt(10), 1).ok());
  StepPlan p = s->Schedule();
  EXPECT_EQ(p.cache_queries, 10);
  EXPECT_EQ(p.cache_hits, 0);
  StepDone(*s, p);
  const std::vector<int32_t> first = *p.seqs[0].block_table;
  s->Finish(1);
  EXPECT_EQ(s->cached_blocks(), 2);  // the two full blocks
  EXPECT_EQ(s->used_blocks(), 0);

  // The same prompt: its first 8 tokens are found, 2 are fed.
  ASSERT_TRUE(s->Add(2, Prompt(10), 4).ok());
  p = s->Schedule();
  ASSERT_EQ(p.seqs.size(), 1u);
  EXPECT_EQ(p.seqs[0].start, 8);
  EXPECT_EQ(p.seqs[0].tokens, (std::vector<int32_t>{108, 109}));
  EXPECT_EQ(p.seqs[0].cached_prefix, Prompt(8));
  EXPECT_TRUE(p.seqs[0].sample);
  ASSERT_EQ(p.seqs[0].block_table->size(), 3u);
  EXPECT_EQ((*p.seqs[0].block_table)[0], first[0]);
  EXPECT_EQ((*p.seqs[0].block_table)[1], first[1]);
  EXPECT_EQ(p.cache_queries, 10);
  EXPECT_EQ(p.cache_hits, 8);
  StepDone(*s, p);
  p = s->Schedule();  // then it decodes
  EXPECT_TRUE(p.seqs[0].cached_prefix.empty());
  EXPECT_EQ(p.seqs[0].start, 10);
  StepDone(*s, p);

  // Exactly two blocks long: the last token is fed, so one block is found.
  // Shared with the running sequence 2.
  ASSERT_TRUE(s->Add(3, Prompt(8), 1).ok());
  p = s->Schedule();
  ASSERT_EQ(p.seqs.size(), 2u);
  EXPECT_EQ(p.seqs[1].start, 4);
  EXPECT_EQ((*p.seqs[1].block_table)[0], first[0]);
  EXPECT_EQ(p.seqs[1].tokens, (std::vector<int32_t>{104, 105, 106, 107}));
}

TEST(SchedulerTest, APromptToScoreOrCachingOffFindsNothing) {
  for (bool caching : {true, false}) {
    auto s = Scheduler::Create({.num_blocks = 100,
                                .block_size = 4,
                                .max_tokens_per_step = 64,
                                .prefix_caching = caching});
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE((*s)->Add(1, Prompt(9), 1).ok());
    StepPlan p = (*s)->Schedule();
    StepDone(**s, p);
    (*s)->Finish(1);
    EXPECT_EQ((*s)->cached_blocks(), caching ? 2 : 0);
    ASSERT_TRUE((*s)->Add(2, Prompt(9), 1, /*use_prefix_cache=*/false).ok());
    ASSERT_TRUE((*s)->Add(3, Prompt(9), 1).ok());
    p = (*s)->Schedule();
    ASSERT_EQ(p.seqs.size(), 2u);
    EXPECT_EQ(p.seqs[0].start, 0);
    EXPECT_EQ(p.seqs[1].start, caching ? 8 : 0);
    EXPECT_EQ(p.cache_queries, 9);  // 2 looked nothing up
  }
}

TEST(SchedulerTest, APreemptedSequenceFindsItsOwnBlocks) {
  // As OutOfBlocksTheYoungestIsPreemptedAndRecomputed, with caching: 2's
  // first block (its prompt) is still cached when it comes back.
  auto s = Make(3, 2, 16);
  ASSERT_TRUE(s->Add(1, Prompt(2, 10), 4).ok());
  ASSERT_TRUE(s->Add(2, Prompt(2, 20), 4).ok());
  StepPlan p = s->Schedule();
  s->Written(p);
  ASSERT_TRUE(s->Append(1, 11).ok());
  ASSERT_TRUE(s->Append(2, 21).ok());
  p = s->Schedule();
  EXPECT_EQ(p.preempted, (std::vector<SeqId>{2}));
  StepDone(*s, p, 12);
  s->Finish(1);
  p = s->Schedule();
  ASSERT_EQ(p.seqs.size(), 1u);
  EXPECT_EQ(p.seqs[0].id, 2u);
  EXPECT_EQ(p.seqs[0].start, 2);
  EXPECT_EQ(p.seqs[0].cached_prefix, (std::vector<int32_t>{20, 21}));
  EXPECT_EQ(p.seqs[0].tokens, (std::vector<int32_t>{21}));
}

TEST(SchedulerTest, ClearedCacheFindsNothing) {
  auto s = Make(100, 4, 64);
  ASSERT_TRUE(s->Add(1, Prompt(9), 1).ok());
  StepDone(*s, s->Schedule());
  s->Finish(1);
  s->ClearCache();
  EXPECT_EQ(s->cached_blocks(), 0);
  ASSERT_TRUE(s->Add(2, Prompt(9), 1).ok());
  EXPECT_EQ(s->Schedule().seqs[0].start, 0);
}

// What the workers' KV blocks hold, slot by slot: the identity of the whole
// prefix that ends at the slot's position (so a slot holds the right keys
// only if every token up to it is the same).
class KvModel {
 public:
  KvModel(int64_t blocks, int64_t block_size)
      : block_size_(block_size), slots_(blocks * block_size, 0) {}
  // Checks that the blocks hold `tokens`' first q.start positions, or with
  // `write`, writes the fed ones. A step reads before it writes (so that no
  // sequence counts on another's writes of the same step).
  void Step(const ScheduledSeq& q, const std::vector<int32_t>& tokens,
            bool write) {
    uint64_t prefix = 0;
    const int64_t end = q.start + static_cast<int64_t>(q.tokens.size());
    for (int64_t pos = 0; pos < end; ++pos) {
      prefix = prefix * 1000003 + static_cast<uint64_t>(tokens[pos]) + 1;
      uint64_t& slot = slots_[(*q.block_table)[pos / block_size_] *
                                  block_size_ +
                              pos % block_size_];
      if (pos >= q.start && write) {
        slot = prefix;
      } else if (pos < q.start && !write) {
        ASSERT_EQ(slot, prefix) << "sequence " << q.id << " position " << pos;
      }
    }
  }

 private:
  const int64_t block_size_;
  std::vector<uint64_t> slots_;
};

TEST(SchedulerTest, CachedRandomRunsReadOnlyWhatWasWritten) {
  // Prompts from three families sharing prefixes, chunked under a small
  // budget, sequences finishing, cancelled and preempted: every position a
  // sequence does not feed must hold its own prefix's keys.
  std::mt19937 rng(5);
  constexpr int64_t kBlocks = 24;
  auto s = Make(kBlocks, 4, 20, 6, 1000);
  KvModel kv(kBlocks, 4);
  std::set<SeqId> live;
  SeqId next = 1;
  int64_t hits = 0;
  size_t preempted = 0;
  auto step_once = [&]() {
    const StepPlan p = s->Schedule();
    preempted += p.preempted.size();
    hits += p.cache_hits;
    ASSERT_LE(p.tokens(), 20);
    for (const ScheduledSeq& q : p.seqs) {
      const std::vector<int32_t> tokens = s->tokens(q.id);
      ASSERT_TRUE(std::equal(q.tokens.begin(), q.tokens.end(),
                             tokens.begin() + q.start));
      if (!q.cached_prefix.empty()) {
        ASSERT_TRUE(std::equal(q.cached_prefix.begin(), q.cached_prefix.end(),
                               tokens.begin(), tokens.begin() + q.start));
      }
      kv.Step(q, tokens, /*write=*/false);
      if (HasFatalFailure()) return;
    }
    for (const ScheduledSeq& q : p.seqs) kv.Step(q, s->tokens(q.id), true);
    ASSERT_EQ(s->used_blocks() + s->free_blocks(), kBlocks);
    ASSERT_LE(s->cached_blocks(), kBlocks);
    s->Written(p);
    for (const ScheduledSeq& q : p.seqs) {
      if (!q.sample) continue;
      ASSERT_TRUE(s->Append(q.id, static_cast<int32_t>(rng() % 3)).ok());
      if (s->tokens(q.id).size() >= 40) {
        s->Finish(q.id);
        live.erase(q.id);
      }
    }
  };
  RunRandomly(rng, *s, live, [&] {
    // Now and then one or two prompts of a family; the second may come
    // while the first is still prefilling.
    for (int n = rng() % 3 == 0 ? 1 + rng() % 2 : 0; n > 0; --n) {
      const int32_t family = static_cast<int32_t>(rng() % 3) * 1000;
      std::vector<int32_t> prompt = Prompt(1 + rng() % 36, family);
      // A different tail now and then, past a shared head.
      if (rng() % 2 == 0) prompt.back() = static_cast<int32_t>(rng() % 50);
      if (s->Add(next, prompt, 1 + rng() % 20).ok()) live.insert(next);
      ++next;
    }
  }, step_once);
  if (HasFatalFailure()) return;
  EXPECT_TRUE(live.empty()) << live.size() << " sequences never finished";
  EXPECT_GT(hits, 0);
  EXPECT_GT(preempted, 0u);
  EXPECT_EQ(s->used_blocks() + s->free_blocks(), kBlocks);
}

}  // namespace
}  // namespace octet
