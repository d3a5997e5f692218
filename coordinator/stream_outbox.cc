#include "coordinator/stream_outbox.h"

#include <utility>

#include "coordinator/responses.h"

namespace octet {

StreamOutbox::Action StreamOutbox::Add(const Delta& delta,
                                       const Outcome* outcome) {
  absl::MutexLock lock(&mu_);
  AddLocked(delta, outcome);
  return NextLocked();
}

void StreamOutbox::AddLocked(const Delta& delta, const Outcome* outcome) {
  if (done_) return;  // nothing follows the end
  if (outcome != nullptr) {
    done_ = true;
    status_ = outcome->status;
  }
  if (broken_) return;  // nobody to send it to
  if (outcome != nullptr && !outcome->status.ok()) {
    pending_.clear();  // a failed request sends nothing more
    return;
  }
  if (pending_.empty() || outcome != nullptr) pending_.emplace_back();
  v1::GenerateStreamResponse& m = pending_.back();
  m.set_request_id(request_id_);
  AddDelta(delta, &m);
  if (outcome != nullptr) SetOutcome(*outcome, &m);
}

StreamOutbox::Action StreamOutbox::WriteDone(bool ok) {
  absl::MutexLock lock(&mu_);
  writing_ = false;
  if (!ok) {
    broken_ = true;
    pending_.clear();
  }
  return NextLocked();
}

StreamOutbox::Action StreamOutbox::Next() {
  absl::MutexLock lock(&mu_);
  return NextLocked();
}

StreamOutbox::Action StreamOutbox::NextLocked() {
  Action a;
  if (writing_ || finished_) return a;
  if (!pending_.empty()) {
    current_ = std::move(pending_.front());
    pending_.pop_front();
    writing_ = true;
    a.kind = Action::kWrite;
    a.message = &current_;
  } else if (done_) {
    finished_ = true;
    a.kind = Action::kFinish;
    // A broken stream whose request still ended OK: the client is gone.
    a.status = broken_ && status_.ok()
                   ? absl::CancelledError("the client stopped reading")
                   : status_;
  }
  return a;
}

}  // namespace octet
