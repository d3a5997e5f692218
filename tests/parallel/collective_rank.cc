// collective_rank: one rank of a group (--transport gloo or shm, or either
// with "+staged": the collectives go through NewStagedCommunicator over the
// CPU backend, whose "device" memory is host memory), as its own
// process, for communicator_test. Connects through the rendezvous store at
// --store, runs
// --scenario and exits 0 when every check holds (1 otherwise, 2 on bad
// flags), printing what it found.
//
//   collectives  all-reduce sum and max, all-gather, broadcast and barrier
//                on inputs whose results are exact, checked exactly; the
//                sum's order (TreeSum) checked bit for bit
//   die          rank --victim exits in the middle of the run (as a crashed
//                worker would); the others must see an error, not hang
//   stall        rank --victim stops answering (sleeps for 3 timeouts); the
//                others must fail within the timeout
//   absent       expects connecting to fail with DeadlineExceeded (a rank
//                of the group is never started)
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/bf16.h"
#include "kernels/cpu/backend.h"
#include "kernels/tree_sum.h"
#include "parallel/communicator.h"
#include "parallel/shm_communicator.h"
#include "parallel/staged_communicator.h"
#include "rpc/store.h"

ABSL_FLAG(std::string, store, "", "rendezvous address host:port");
ABSL_FLAG(int32_t, rank, -1, "this rank");
ABSL_FLAG(int32_t, size, 0, "ranks in the group");
ABSL_FLAG(std::string, group, "test", "group name");
ABSL_FLAG(int32_t, timeout_ms, 10000, "collective timeout");
ABSL_FLAG(std::string, scenario, "collectives", "collectives, die or absent");
ABSL_FLAG(int32_t, victim, 1, "die: the rank that exits");
ABSL_FLAG(std::string, transport, "gloo",
          "gloo or shm, optionally with +staged");
ABSL_FLAG(int32_t, slot_bytes, 256,
          "shm: bytes per exchange (small, so that collectives take several)");

namespace octet {
namespace {

int failures = 0;

void Check(bool ok, const std::string& what) {
  if (!ok) {
    ++failures;
    std::fprintf(stderr, "rank %d: FAILED %s\n", absl::GetFlag(FLAGS_rank),
                 what.c_str());
  }
}

void CheckOk(const absl::Status& s, const std::string& what) {
  Check(s.ok(), absl::StrCat(what, ": ", s.ToString()));
}

int Collectives(Communicator& comm) {
  const int r = comm.rank(), n = comm.size();
  // Sums of small integers are exact in binary32, in any order.
  std::vector<float> sum(1000);
  for (size_t i = 0; i < sum.size(); ++i) sum[i] = float(i % 97) * (r + 1);
  CheckOk(comm.AllReduceSum(sum.data(), sum.size()), "AllReduceSum");
  const float ranks_sum = n * (n + 1) / 2.0f;
  for (size_t i = 0; i < sum.size(); ++i) {
    if (sum[i] != float(i % 97) * ranks_sum) {
      Check(false, absl::StrCat("sum[", i, "] = ", sum[i]));
      break;
    }
  }
  // The order of the sum: TreeSum over the ranks, bit for bit. With four
  // ranks (1 + 2^-24) + (2^-24 - 1) = 2^-24, where adding in rank order
  // gives 0.
  const float parts[4] = {1.0f, 0x1p-24f, 0x1p-24f, -1.0f};
  std::vector<float> expected(n);
  for (int q = 0; q < n; ++q) expected[q] = parts[q % 4];
  TreeSum(expected.data(), n, 1, 1);
  float ordered = parts[r % 4];
  CheckOk(comm.AllReduceSum(&ordered, 1), "AllReduceSum (order)");
  Check(ordered == expected[0] && (n != 4 || ordered == 0x1p-24f),
        absl::StrCat("sum order: got ", ordered, ", TreeSum gives ",
                     expected[0]));
  // Max: the largest rank's value wins, and NaN loses to any number.
  std::vector<float> max = {float(r), -float(r), r == 0 ? NAN : 1.0f, 0.5f};
  CheckOk(comm.AllReduceMax(max.data(), max.size()), "AllReduceMax");
  Check(max[0] == float(n - 1) && max[1] == 0.0f &&
            max[2] == (n > 1 ? 1.0f : max[2]) && max[3] == 0.5f,
        absl::StrCat("max = ", max[0], " ", max[1], " ", max[2], " ", max[3]));
  // A single float, as the FP8 absmax all-reduce sends.
  float absmax = 10.0f + r;
  CheckOk(comm.AllReduceMax(&absmax, 1), "AllReduceMax(1)");
  Check(absmax == 10.0f + (n - 1), absl::StrCat("absmax = ", absmax));

  std::vector<float> mine = {float(r), float(100 + r), float(-r)};
  std::vector<float> all(3 * n, -1.0f);
  CheckOk(comm.AllGather(mine.data(), 3, all.data()), "AllGather");
  for (int q = 0; q < n; ++q) {
    Check(all[3 * q] == q && all[3 * q + 1] == 100 + q && all[3 * q + 2] == -q,
          absl::StrCat("all-gather slot ", q));
  }
  std::string bytes = r == n - 1 ? "from the last rank" : std::string(18, '?');
  CheckOk(comm.Broadcast(bytes.data(), bytes.size(), n - 1), "Broadcast");
  Check(bytes == "from the last rank", "broadcast payload: " + bytes);
  CheckOk(comm.Barrier(), "Barrier");
  // bfloat16 sums: small integers, exact in bfloat16 and in any order.
  std::vector<Bf16> half(300);
  for (size_t i = 0; i < half.size(); ++i) {
    half[i] = FloatToBf16(float(i % 7) * (r + 1));
  }
  CheckOk(comm.AllReduceSumBf16(half.data(), half.size()), "AllReduceSumBf16");
  for (size_t i = 0; i < half.size(); ++i) {
    if (Bf16ToFloat(half[i]) != float(i % 7) * ranks_sum) {
      Check(false, absl::StrCat("bf16 sum[", i, "] = ", Bf16ToFloat(half[i])));
      break;
    }
  }
  return failures == 0 ? 0 : 1;
}

int Die(Communicator& comm, bool stall) {
  const int victim = absl::GetFlag(FLAGS_victim);
  float x = 1.0f;
  CheckOk(comm.AllReduceSum(&x, 1), "first all-reduce");
  if (comm.rank() == victim) {
    if (stall) {
      absl::SleepFor(absl::Milliseconds(3 * absl::GetFlag(FLAGS_timeout_ms)));
    }
    _exit(0);  // gone without a word
  }
  const absl::Time start = absl::Now();
  absl::Status s;
  for (int i = 0; i < 10 && s.ok(); ++i) s = comm.AllReduceSum(&x, 1);
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  std::printf("rank %d: after the peer died: %s (%.2f s)\n", comm.rank(),
              s.ToString().c_str(), seconds);
  Check(!s.ok(), "a collective with a dead peer succeeded");
  // Silence is a timeout; a closed connection is an unavailable peer.
  const absl::StatusCode want = stall ? absl::StatusCode::kDeadlineExceeded
                                      : absl::StatusCode::kUnavailable;
  Check(s.code() == want, "wrong error code");
  // The group is broken now: the next collective fails at once.
  const absl::Time again = absl::Now();
  const absl::Status after = comm.AllReduceSum(&x, 1);
  Check(after.code() == absl::StatusCode::kFailedPrecondition &&
            absl::Now() - again < absl::Seconds(1),
        "a collective after the failure: " + after.ToString());
  Check(seconds < absl::GetFlag(FLAGS_timeout_ms) / 1000.0 + 5,
        "the error took longer than the timeout");
  return failures == 0 ? 0 : 1;
}

int Main() {
  const std::string address = absl::GetFlag(FLAGS_store);
  const int rank = absl::GetFlag(FLAGS_rank), size = absl::GetFlag(FLAGS_size);
  const std::string scenario = absl::GetFlag(FLAGS_scenario);
  if (address.empty() || rank < 0 || size < 1) {
    std::fprintf(stderr, "collective_rank: need --store, --rank, --size\n");
    return 2;
  }
  GrpcStore store(address);
  const std::string group = absl::GetFlag(FLAGS_group);
  const absl::Duration timeout =
      absl::Milliseconds(absl::GetFlag(FLAGS_timeout_ms));
  std::string transport = absl::GetFlag(FLAGS_transport);
  const bool staged = absl::EndsWith(transport, "+staged");
  if (staged) transport.resize(transport.size() - 7);
  const absl::Time start = absl::Now();
  // shm with small slots, so that collectives take several exchanges.
  auto comm =
      transport == "shm"
          ? NewShmCommunicator(store, rank, size,
                               {.group = group,
                                .timeout = timeout,
                                .slot_bytes = absl::GetFlag(FLAGS_slot_bytes)})
          : NewCpuCommunicator(store, rank, size, transport, group, timeout);
  if (scenario == "absent") {
    const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
    std::printf("rank %d: connecting without all ranks: %s (%.2f s)\n", rank,
                comm.status().ToString().c_str(), seconds);
    Check(comm.status().code() == absl::StatusCode::kDeadlineExceeded,
          "expected DeadlineExceeded");
    Check(seconds < absl::ToDoubleSeconds(timeout) + 5,
          "connecting took longer than the timeout");
    return failures == 0 ? 0 : 1;
  }
  if (!comm.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank,
                 comm.status().ToString().c_str());
    return 1;
  }
  std::unique_ptr<Backend> backend = NewCpuBackend();
  if (staged) *comm = NewStagedCommunicator(*backend, *std::move(comm));
  if (scenario == "collectives") return Collectives(**comm);
  if (scenario == "die" || scenario == "stall") {
    return Die(**comm, scenario == "stall");
  }
  std::fprintf(stderr, "collective_rank: unknown --scenario %s\n",
               scenario.c_str());
  return 2;
}

}  // namespace
}  // namespace octet

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return octet::Main();
}
