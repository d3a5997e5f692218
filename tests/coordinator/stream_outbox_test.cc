// StreamOutbox: every order of the engine's output, its end and the
// completions of writes leads to exactly one Finish, with nothing written
// after a failed write. The cases where the write fails are the leak the
// reactor had: its OnWriteDone(false) returned without ever finishing when
// the engine's end was already in, so the call (and grpc::Server::Shutdown)
// waited forever.
#include "coordinator/stream_outbox.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace octet {
namespace {

using Kind = StreamOutbox::Action::Kind;

Delta Tokens(std::vector<int32_t> ids, std::string text = "") {
  Delta d;
  d.token_ids = std::move(ids);
  d.text = std::move(text);
  return d;
}

Outcome Ended(absl::Status status) {
  Outcome o;
  o.status = std::move(status);
  o.finish = Finish::kLength;
  return o;
}

// Drives an outbox like the reactor: does what each event returns;
// records what it was told to do. Writes stay in flight until
// Complete().
struct Driver {
  StreamOutbox outbox{"r1"};
  std::vector<std::vector<int32_t>> written;  // token ids per write
  int finishes = 0;
  absl::Status finish_status;
  bool in_flight = false;

  // Carries out `a`; false when it was nothing to do.
  bool Do(const StreamOutbox::Action& a) {
    if (a.kind == Kind::kNone) return false;
    if (a.kind == Kind::kWrite) {
      EXPECT_FALSE(in_flight) << "two writes at once";
      EXPECT_EQ(finishes, 0) << "a write after Finish";
      EXPECT_EQ(a.message->request_id(), "r1");
      written.emplace_back(a.message->token_ids().begin(),
                           a.message->token_ids().end());
      in_flight = true;
      return true;
    }
    ++finishes;
    finish_status = a.status;
    return true;
  }
  // After the action an event returned: Next() until it says nothing (it
  // must, since that action was decided under the same lock).
  void Pump(const StreamOutbox::Action& first) {
    Do(first);
    EXPECT_FALSE(Do(outbox.Next())) << "the event's action was not the next";
  }
  void Add(const Delta& d) { Pump(outbox.Add(d, nullptr)); }
  void End(const absl::Status& s, const Delta& d = {}) {
    const Outcome o = Ended(s);
    Pump(outbox.Add(d, &o));
  }
  void Complete(bool ok) {
    ASSERT_TRUE(in_flight);
    in_flight = false;
    Pump(outbox.WriteDone(ok));
  }
};

TEST(StreamOutbox, WritesInOrderThenFinishesWithTheEnd) {
  Driver d;
  d.Add(Tokens({1}));
  d.Complete(true);
  d.Add(Tokens({2}));
  d.Complete(true);
  d.End(absl::OkStatus(), Tokens({3}));
  EXPECT_EQ(d.finishes, 0);  // the last message first
  d.Complete(true);
  EXPECT_EQ(d.written, (std::vector<std::vector<int32_t>>{{1}, {2}, {3}}));
  EXPECT_EQ(d.finishes, 1);
  EXPECT_TRUE(d.finish_status.ok());
}

TEST(StreamOutbox, OutputDuringAWriteJoinsTheNextMessage) {
  Driver d;
  d.Add(Tokens({1}));
  d.Add(Tokens({2}));
  d.Add(Tokens({3}));
  d.Complete(true);
  d.End(absl::OkStatus());
  d.Complete(true);
  d.Complete(true);
  EXPECT_EQ(d.written, (std::vector<std::vector<int32_t>>{{1}, {2, 3}, {}}));
  EXPECT_EQ(d.finishes, 1);
}

TEST(StreamOutbox, AWriteFailingAfterTheEndStillFinishes) {
  // The leak: the end is in, its message is being written, the client is
  // gone. Nothing else will ever call in; the write's completion must
  // finish the call.
  Driver d;
  d.Add(Tokens({1}));
  d.End(absl::OkStatus(), Tokens({2}));
  d.Complete(false);
  EXPECT_EQ(d.finishes, 1);
  EXPECT_EQ(d.finish_status.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(d.written.size(), 1u);  // {2} was dropped, never written
}

TEST(StreamOutbox, AWriteFailingBeforeTheEndFinishesWhenTheEndComes) {
  for (const absl::Status& end :
       {absl::CancelledError("cancelled"), absl::OkStatus(),
        absl::UnavailableError("worker gone")}) {
    Driver d;
    d.Add(Tokens({1}));
    d.Complete(false);
    EXPECT_EQ(d.finishes, 0) << "the engine still holds the request";
    d.Add(Tokens({2}));  // output after the failure is dropped
    d.End(end, Tokens({3}));
    EXPECT_EQ(d.written.size(), 1u) << end;
    EXPECT_EQ(d.finishes, 1) << end;
    EXPECT_EQ(d.finish_status.code(),
              end.ok() ? absl::StatusCode::kCancelled : end.code())
        << end;
  }
}

TEST(StreamOutbox, AFailedRequestDropsWhatIsUnsentAndFinishesWithItsError) {
  Driver d;
  d.Add(Tokens({1}));  // in flight
  d.Add(Tokens({2}));  // pending
  d.End(absl::UnavailableError("worker gone"));
  EXPECT_EQ(d.finishes, 0);  // the write in flight first
  d.Complete(true);
  EXPECT_EQ(d.written.size(), 1u);
  EXPECT_EQ(d.finishes, 1);
  EXPECT_EQ(d.finish_status.code(), absl::StatusCode::kUnavailable);
}

TEST(StreamOutbox, AnEndWithNothingInFlightFinishesAtOnce) {
  Driver d;
  d.End(absl::CancelledError("cancelled"));
  EXPECT_EQ(d.finishes, 1);
  EXPECT_TRUE(d.written.empty());
}

TEST(StreamOutbox, FinishesOnceWhateverCallsNext) {
  Driver d;
  d.End(absl::OkStatus(), Tokens({1}));
  d.Complete(true);
  EXPECT_EQ(d.finishes, 1);
  // Late events (a second end, a stray pump) change nothing.
  d.End(absl::CancelledError("late"));
  d.Add(Tokens({9}));
  d.Do(d.outbox.Next());
  EXPECT_EQ(d.finishes, 1);
  EXPECT_TRUE(d.finish_status.ok());
  EXPECT_EQ(d.written.size(), 1u);
}

}  // namespace
}  // namespace octet
