// A few named threads that run queued work: the public service tokenizes
// prompts here, not on gRPC's threads (a long text takes a tokenizer tenths
// of a second, which gRPC's callback threads must never block for).
//
// Bounded: Schedule refuses work beyond max_pending (the caller answers
// RESOURCE_EXHAUSTED). Thread-safe. The destructor runs what is queued,
// then joins the threads.
#pragma once

#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace octet {

class WorkQueue {
 public:
  // `threads` (>= 1) named `name` (at most 15 characters shown by ps/top).
  WorkQueue(int threads, int max_pending, const std::string& name);
  ~WorkQueue();
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  // Queues `work` for one of the threads; false (and `work` dropped) when
  // max_pending items are already waiting.
  bool Schedule(std::function<void()> work);

 private:
  void Run();

  const int max_pending_;
  absl::Mutex mu_;
  std::deque<std::function<void()>> pending_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace octet
