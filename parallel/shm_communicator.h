// Collectives for the CPU ranks of one host through a shared-memory segment:
// what tensor parallelism on one machine uses instead of Gloo's loopback TCP
// (docs/design.md, "Decisions"). Decoding runs four collectives per layer, two
// of them the one-float FP8 absmax sync, so their latency is the price of TP on
// a CPU: a Gloo all-gather over loopback takes 130-340 us on the 2-core VM (a
// kernel round trip plus wake-ups of Gloo's I/O thread and of the waiting
// rank); here a rank writes its part into its slot of the segment and polls the
// others' sequence numbers, spinning briefly and then yielding.
//
// Every Communicator rule holds (communicator.h): results in TreeSum order,
// the same on every rank; a rank that exits is Unavailable within about
// 10 ms (its process is watched), one that stops answering or never attaches
// is DeadlineExceeded after the timeout, and the group is broken after any
// error. Ranks must run on one host (one /dev/shm); across hosts use Gloo.
// The segment is unlinked as soon as every rank has attached, so nothing is
// left behind when processes die.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "parallel/communicator.h"
#include "rpc/store.h"

namespace octet {

struct ShmOptions {
  // Name of the group: the prefix of its keys in the store.
  std::string group = "octet";
  // Bound on attaching and on every collective.
  absl::Duration timeout = absl::Seconds(60);
  // Bytes a rank publishes per exchange; larger collectives take several.
  // The segment holds 2 * slot_bytes per rank.
  int64_t slot_bytes = int64_t{1} << 20;
};

// Rank 0 creates the segment and publishes its name through `store` (which
// need only live until this returns); the others attach. DeadlineExceeded
// naming the missing ranks when they do not all attach within the timeout.
absl::StatusOr<std::unique_ptr<Communicator>> NewShmCommunicator(
    KeyValueStore& store, int rank, int size, const ShmOptions& options);

}  // namespace octet
