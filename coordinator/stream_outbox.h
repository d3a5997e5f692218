// What a streaming call (GenerateStream) does next, decided from the
// engine's output and the completions of its writes. No gRPC inside, so
// that every order of events can be tested; the reactor in
// generation_service.cc only carries out the actions.
//
// The rule that matters: every path ends in exactly one Finish. The engine
// delivers output and then the end, from its thread; writes complete on
// gRPC's threads, one at a time; a write that fails (the client went away)
// drops what is still unsent, and the call finishes as soon as the engine's
// end is in -- whether that end came before the failure or after it.
//
// Thread-safe.
#pragma once

#include <deque>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/engine.h"
#include "octet/v1/generation.pb.h"

namespace octet {

class StreamOutbox {
 public:
  struct Action {
    enum Kind { kNone, kWrite, kFinish } kind = kNone;
    // kWrite: the message to write; it stays untouched until WriteDone.
    const v1::GenerateStreamResponse* message = nullptr;
    absl::Status status;  // kFinish: how the call ends
  };

  explicit StreamOutbox(std::string request_id)
      : request_id_(std::move(request_id)) {}

  // New output of the request; with `outcome`, the last (how it ended).
  // Output that comes while a message is being written joins the next one.
  // Returns what to do now, decided under the same lock: once the end is
  // in, another thread may finish the call (and so delete the reactor)
  // the moment the lock is released, so the caller must not come back.
  Action Add(const Delta& delta, const Outcome* outcome);
  // The write that was started has completed; false: the stream is
  // broken. Returns what to do now, as Add does.
  Action WriteDone(bool ok);
  // What to do now: start a write, finish the call (once), or nothing
  // (a write is in flight, or the engine has more to say).
  Action Next();

 private:
  void AddLocked(const Delta& delta, const Outcome* outcome)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Action NextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string request_id_;
  absl::Mutex mu_;
  std::deque<v1::GenerateStreamResponse> pending_ ABSL_GUARDED_BY(mu_);
  v1::GenerateStreamResponse current_;  // the message being written
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool broken_ ABSL_GUARDED_BY(mu_) = false;  // a write failed
  bool done_ ABSL_GUARDED_BY(mu_) = false;    // the engine's end is in
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);  // the engine's end
};

}  // namespace octet
