#include "parallel/shm_communicator.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "parallel/gather_reduce.h"

namespace octet {
namespace {

constexpr uint64_t kMagic = 0x31'6d'73'74'65'74'63'6full;  // "octetsm1"
constexpr int kMaxRanks = 64;
constexpr size_t kLine = 64;

// The segment: a Header, one Control line per rank, then each rank's two
// data slots ([rank][exchange parity][slot_bytes]).
struct Header {
  uint64_t magic;
  int32_t size;
  int64_t slot_bytes;
  std::atomic<int32_t> attached;  // ranks that have mapped the segment
  int32_t pid[kMaxRanks];         // each rank's, written before attaching
};

struct alignas(kLine) Control {
  std::atomic<uint64_t> seq;  // the last exchange this rank has published
};

static_assert(std::atomic<uint64_t>::is_always_lock_free &&
              std::atomic<int32_t>::is_always_lock_free);

constexpr size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }
constexpr size_t kControlOffset = RoundUp(sizeof(Header), kLine);
size_t DataOffset(int size) { return kControlOffset + size * sizeof(Control); }
size_t SegmentBytes(int size, int64_t slot_bytes) {
  return DataOffset(size) + static_cast<size_t>(size) * 2 * slot_bytes;
}

// Whether process `pid` exists and has not exited (a zombie has).
bool ProcessRuns(int pid) {
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  if (!std::getline(stat, line)) return false;
  // "pid (command) S ...": the state letter follows the last ')'.
  const size_t p = line.rfind(')');
  if (p == std::string::npos || p + 2 >= line.size()) return true;
  return line[p + 2] != 'Z' && line[p + 2] != 'X';
}

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// How a rank waits for another: spin (the peer is usually microseconds
// away during decoding), then yield the core, then sleep in growing steps
// so that an idle group does not burn its cores.
constexpr auto kSpinFor = std::chrono::microseconds(50);
constexpr auto kYieldFor = std::chrono::milliseconds(2);
constexpr auto kMaxSleep = std::chrono::microseconds(500);
// How often a waiting rank checks the clock against the timeout and
// whether the peer's process still runs.
constexpr auto kCheckEvery = std::chrono::milliseconds(10);

class ShmCommunicator : public parallel_internal::GatherReduceCommunicator {
 public:
  ShmCommunicator(char* base, size_t bytes, int rank, int size,
                  int64_t slot_bytes, absl::Duration timeout)
      : base_(base),
        bytes_(bytes),
        rank_(rank),
        size_(size),
        slot_bytes_(slot_bytes),
        timeout_(absl::ToChronoMilliseconds(timeout)) {
    // A peer is watched only if this process can see it (one PID
    // namespace); otherwise its death shows as a timeout.
    for (int q = 0; q < size_; ++q) {
      watched_.push_back(q != rank_ && ProcessRuns(header().pid[q]));
    }
  }
  ~ShmCommunicator() override { munmap(base_, bytes_); }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string Describe() const override {
    return absl::StrCat("shared memory, rank ", rank_, " of ", size_);
  }

  absl::Status Broadcast(void* data, int64_t bytes, int root) override {
    if (bytes < 0 || root < 0 || root >= size_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Broadcast: ", bytes, " bytes from root ", root, " of ", size_));
    }
    char* out = static_cast<char*>(data);
    for (int64_t at = 0; at < bytes; at += slot_bytes_) {
      const int64_t n = std::min(slot_bytes_, bytes - at);
      absl::Status s =
          Exchange(rank_ == root ? out + at : nullptr, rank_ == root ? n : 0,
                   "Broadcast", [&](int q, const char* slot) {
                     if (q == root && q != rank_) {
                       std::memcpy(out + at, slot, n);
                     }
                   });
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }

  absl::Status Barrier() override {
    return Exchange(nullptr, 0, "Barrier", [](int, const char*) {});
  }

 private:
  absl::Status GatherFloats(const float* in, int64_t count, float* out,
                            const char* what) override {
    const int64_t per = slot_bytes_ / static_cast<int64_t>(sizeof(float));
    for (int64_t at = 0; at < count; at += per) {
      const int64_t n = std::min(per, count - at);
      absl::Status s = Exchange(
          in + at, n * sizeof(float), what, [&](int q, const char* slot) {
            std::memcpy(out + q * count + at, slot, n * sizeof(float));
          });
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }

  Header& header() const { return *reinterpret_cast<Header*>(base_); }
  Control& control(int q) const {
    return reinterpret_cast<Control*>(base_ + kControlOffset)[q];
  }
  char* slot(int q, uint64_t exchange) const {
    return base_ + DataOffset(size_) + (2 * q + (exchange & 1)) * slot_bytes_;
  }

  // One exchange: `bytes` (at most slot_bytes_) from `mine` into this rank's
  // slot, published; then, once every rank has published, read(q, slot) for
  // each rank q. A rank writes exchange n + 2 into the slot of exchange n
  // only after every rank has published n + 1, which each does only after
  // reading exchange n: two slots per rank are enough.
  template <typename Read>
  absl::Status Exchange(const void* mine, int64_t bytes, const char* what,
                        Read&& read) {
    if (broken_) {
      return absl::FailedPreconditionError(
          absl::StrCat(what, " on rank ", rank_, ": the group failed earlier"));
    }
    const uint64_t n = ++exchanges_;
    if (bytes > 0) std::memcpy(slot(rank_, n), mine, bytes);
    control(rank_).seq.store(n, std::memory_order_release);
    for (int q = 0; q < size_; ++q) {
      if (q == rank_) continue;
      absl::Status s = WaitFor(q, n, what);
      if (!s.ok()) {
        broken_ = true;
        return s;
      }
    }
    for (int q = 0; q < size_; ++q) read(q, slot(q, n));
    return absl::OkStatus();
  }

  absl::Status WaitFor(int q, uint64_t n, const char* what) {
    const std::atomic<uint64_t>& seq = control(q).seq;
    auto arrived = [&] { return seq.load(std::memory_order_acquire) >= n; };
    if (arrived()) return absl::OkStatus();
    using Clock = std::chrono::steady_clock;
    const Clock::time_point start = Clock::now();
    const Clock::time_point deadline = start + timeout_;
    Clock::time_point next_check = start + kCheckEvery;
    auto sleep = std::chrono::microseconds(20);
    for (uint64_t i = 1;; ++i) {
      if (arrived()) return absl::OkStatus();
      if (i % 64 != 0) {
        CpuRelax();
        continue;
      }
      const Clock::time_point now = Clock::now();
      if (now >= next_check) {
        if (arrived()) return absl::OkStatus();
        if (now >= deadline) {
          return absl::DeadlineExceededError(absl::StrCat(
              what, " on rank ", rank_, ": rank ", q, " did not answer within ",
              absl::FormatDuration(absl::FromChrono(timeout_))));
        }
        if (watched_[q] && !ProcessRuns(header().pid[q])) {
          return absl::UnavailableError(
              absl::StrCat(what, " on rank ", rank_, ": rank ", q, " (pid ",
                           header().pid[q], ") exited"));
        }
        next_check = now + kCheckEvery;
      }
      if (now - start < kSpinFor) continue;
      if (now - start < kYieldFor) {
        sched_yield();
      } else {
        std::this_thread::sleep_for(sleep);
        sleep = std::min(kMaxSleep, sleep * 2);
      }
    }
  }

  char* const base_;
  const size_t bytes_;
  const int rank_, size_;
  const int64_t slot_bytes_;
  const std::chrono::milliseconds timeout_;
  std::vector<bool> watched_;
  uint64_t exchanges_ = 0;
  bool broken_ = false;
};

std::string SegmentName(const std::string& group) {
  std::string safe;
  for (char c : group.substr(0, 100)) {
    safe += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  }
  std::random_device random;
  return absl::StrCat("/octet-", safe, "-", getpid(), "-", random());
}

// Maps the segment `name`, creating it (rank 0) or opening it.
absl::StatusOr<char*> MapSegment(const std::string& name, size_t bytes,
                                 bool create) {
  const int fd =
      shm_open(name.c_str(), create ? O_CREAT | O_EXCL | O_RDWR : O_RDWR, 0600);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat(
        "shared memory ", name, ": shm_open: ", std::strerror(errno)));
  }
  if (create && ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const int err = errno;
    close(fd);
    return absl::ResourceExhaustedError(
        absl::StrCat("shared memory ", name, ": cannot size it to ", bytes,
                     " bytes: ", std::strerror(err)));
  }
  struct stat st;
  if (!create &&
      (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) < bytes)) {
    close(fd);
    return absl::FailedPreconditionError(
        absl::StrCat("shared memory ", name, " is smaller than the ", bytes,
                     " bytes this group needs (another group's segment?)"));
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int err = errno;
  close(fd);
  if (p == MAP_FAILED) {
    return absl::UnavailableError(
        absl::StrCat("shared memory ", name, ": mmap: ", std::strerror(err)));
  }
  return static_cast<char*>(p);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Communicator>> NewShmCommunicator(
    KeyValueStore& store, int rank, int size, const ShmOptions& options) {
  if (size < 1 || size > kMaxRanks || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat("shared memory: rank ", rank,
                                                   " of ", size, " (at most ",
                                                   kMaxRanks, " ranks)"));
  }
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "shared memory: timeout must be positive");
  }
  if (options.slot_bytes < 64 || options.slot_bytes % 64 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared memory: slot_bytes ", options.slot_bytes,
                     " is not a positive multiple of 64"));
  }
  const size_t bytes = SegmentBytes(size, options.slot_bytes);
  const std::string key = options.group + "/shm_segment";
  const absl::Time deadline = absl::Now() + options.timeout;
  std::string name;
  if (rank == 0) {
    name = SegmentName(options.group);
  } else {
    absl::StatusOr<std::string> v = store.Get(key, deadline);
    if (!v.ok()) return v.status();
    name = *v;
  }
  absl::StatusOr<char*> base = MapSegment(name, bytes, rank == 0);
  if (!base.ok()) return base.status();
  Header& h = *reinterpret_cast<Header*>(*base);
  // Unmaps (and for rank 0 unlinks) on every error path below.
  auto fail = [&](absl::Status s) {
    munmap(*base, bytes);
    if (rank == 0) shm_unlink(name.c_str());
    return s;
  };
  if (rank == 0) {
    h.magic = kMagic;  // the rest is zero (ftruncate)
    h.size = size;
    h.slot_bytes = options.slot_bytes;
    h.pid[0] = getpid();
    h.attached.store(1, std::memory_order_release);
    absl::Status s = store.Set(key, name);
    if (!s.ok()) return fail(s);
  } else {
    if (h.magic != kMagic || h.size != size ||
        h.slot_bytes != options.slot_bytes) {
      return fail(absl::FailedPreconditionError(absl::StrCat(
          "shared memory ", name, " is not a segment of this group (", size,
          " ranks, ", options.slot_bytes, "-byte slots)")));
    }
    h.pid[rank] = getpid();
    h.attached.fetch_add(1, std::memory_order_acq_rel);
  }
  // Every rank waits for the others (their pids are then known); rank 0
  // then unlinks the name, and the memory lives while any rank maps it.
  while (h.attached.load(std::memory_order_acquire) < size) {
    if (absl::Now() >= deadline) {
      std::vector<int> missing;
      for (int q = 0; q < size; ++q) {
        if (h.pid[q] == 0) missing.push_back(q);
      }
      return fail(absl::DeadlineExceededError(
          absl::StrCat("shared memory: rank(s) ", absl::StrJoin(missing, ", "),
                       " of group '", options.group, "' did not attach within ",
                       absl::FormatDuration(options.timeout))));
    }
    absl::SleepFor(absl::Microseconds(200));
  }
  if (rank == 0) shm_unlink(name.c_str());
  return std::unique_ptr<Communicator>(new ShmCommunicator(
      *base, bytes, rank, size, options.slot_bytes, options.timeout));
}

}  // namespace octet
