#include "coordinator/work_queue.h"

#include <pthread.h>

#include <algorithm>
#include <utility>

namespace octet {

WorkQueue::WorkQueue(int threads, int max_pending, const std::string& name)
    : max_pending_(max_pending) {
  for (int i = 0; i < std::max(1, threads); ++i) {
    threads_.emplace_back(&WorkQueue::Run, this);
    pthread_setname_np(threads_.back().native_handle(),
                       name.substr(0, 15).c_str());
  }
}

WorkQueue::~WorkQueue() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

bool WorkQueue::Schedule(std::function<void()> work) {
  absl::MutexLock lock(&mu_);
  if (static_cast<int>(pending_.size()) >= max_pending_) return false;
  pending_.push_back(std::move(work));
  return true;
}

void WorkQueue::Run() {
  for (;;) {
    std::function<void()> work;
    {
      absl::MutexLock lock(&mu_);
      const auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || !pending_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (pending_.empty()) return;  // stopping, and nothing left
      work = std::move(pending_.front());
      pending_.pop_front();
    }
    work();
  }
}

}  // namespace octet
