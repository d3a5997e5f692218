#include "parallel/communicator.h"

#include <gloo/allgather.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <exception>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/bf16.h"
#include "base/status_macros.h"
#include "kernels/tree_sum.h"
#include "parallel/gather_reduce.h"
#include "parallel/shm_communicator.h"

namespace octet {
namespace parallel_internal {

absl::Status GatherReduceCommunicator::Gather(const float* in, int64_t count,
                                              float* out, const char* what) {
  if (count < 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": count < 0"));
  }
  if (count == 0) return absl::OkStatus();
  return GatherFloats(in, count, out, what);
}

absl::Status GatherReduceCommunicator::AllReduceSum(float* data,
                                                    int64_t count) {
  if (count > 0) gathered_.resize(count * size());
  absl::Status s = Gather(data, count, gathered_.data(), "AllReduceSum");
  if (!s.ok() || count == 0) return s;
  TreeSum(gathered_.data(), size(), count, count);
  std::copy(gathered_.begin(), gathered_.begin() + count, data);
  return absl::OkStatus();
}

absl::Status GatherReduceCommunicator::AllReduceMax(float* data,
                                                    int64_t count) {
  if (count > 0) gathered_.resize(count * size());
  absl::Status s = Gather(data, count, gathered_.data(), "AllReduceMax");
  if (!s.ok() || count == 0) return s;
  for (int r = 0; r < size(); ++r) {
    const float* part = gathered_.data() + r * count;
    for (int64_t i = 0; i < count; ++i) data[i] = std::fmax(data[i], part[i]);
  }
  return absl::OkStatus();
}

}  // namespace parallel_internal

namespace {

class SingleRankCommunicator : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string Describe() const override { return "single rank"; }
  absl::Status AllReduceSum(float*, int64_t count) override {
    return CheckCount(count);
  }
  absl::Status AllReduceMax(float*, int64_t count) override {
    return CheckCount(count);
  }
  absl::Status AllGather(const float* in, int64_t count, float* out) override {
    absl::Status s = CheckCount(count);
    if (s.ok() && in != out) std::copy(in, in + count, out);
    return s;
  }
  absl::Status Broadcast(void*, int64_t bytes, int root) override {
    if (root != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("Broadcast: root ", root, " is not a rank of 1"));
    }
    return CheckCount(bytes);
  }
  absl::Status Barrier() override { return absl::OkStatus(); }

 private:
  static absl::Status CheckCount(int64_t count) {
    if (count < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("collective: count ", count, " < 0"));
    }
    return absl::OkStatus();
  }
};

// Gloo's store interface over ours. Gloo reports failures by throwing, so
// errors become gloo::IoException here and a Status again in Run below.
class GlooStore : public gloo::rendezvous::Store {
 public:
  GlooStore(KeyValueStore& store, std::string prefix, absl::Duration timeout)
      : store_(store), prefix_(std::move(prefix)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    absl::Status s =
        store_.Set(prefix_ + key, std::string(data.begin(), data.end()));
    if (!s.ok()) throw gloo::IoException(std::string(s.message()));
  }
  std::vector<char> get(const std::string& key) override {
    absl::StatusOr<std::string> v =
        store_.Get(prefix_ + key, absl::Now() + timeout_);
    if (!v.ok()) throw gloo::IoException(std::string(v.status().message()));
    return std::vector<char>(v->begin(), v->end());
  }
  void wait(const std::vector<std::string>& keys) override {
    wait(keys, absl::ToChronoMilliseconds(timeout_));
  }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    const absl::Time deadline = absl::Now() + absl::FromChrono(timeout);
    for (const std::string& key : keys) {
      absl::StatusOr<std::string> v = store_.Get(prefix_ + key, deadline);
      if (!v.ok()) throw gloo::IoException(std::string(v.status().message()));
    }
  }

 private:
  KeyValueStore& store_;
  const std::string prefix_;
  const absl::Duration timeout_;
};

// Runs a Gloo call, turning its exceptions into a Status that says which
// collective failed on which rank.
template <typename F>
absl::Status Run(const char* what, int rank, F&& f) {
  try {
    f();
    return absl::OkStatus();
  } catch (const gloo::IoException& e) {
    const std::string msg = e.what();
    const std::string lower = absl::AsciiStrToLower(msg);
    const bool timeout = absl::StrContains(lower, "timed out") ||
                         absl::StrContains(lower, "timeout") ||
                         absl::StrContains(lower, "not set in time");
    const std::string text =
        absl::StrCat(what, " on rank ", rank, " failed: ", msg);
    return timeout ? absl::DeadlineExceededError(text)
                   : absl::UnavailableError(text);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat(what, " on rank ", rank, " failed: ", e.what()));
  }
}

class GlooCommunicator : public parallel_internal::GatherReduceCommunicator {
 public:
  GlooCommunicator(std::shared_ptr<gloo::Context> context,
                   absl::Duration timeout)
      : context_(std::move(context)),
        timeout_(absl::ToChronoMilliseconds(timeout)) {}

  int rank() const override { return context_->rank; }
  int size() const override { return context_->size; }
  std::string Describe() const override {
    return absl::StrCat("gloo tcp, rank ", rank(), " of ", size());
  }

  absl::Status Broadcast(void* data, int64_t bytes, int root) override {
    if (bytes < 0 || root < 0 || root >= size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Broadcast: ", bytes, " bytes from root ", root, " of ", size()));
    }
    if (bytes == 0) return absl::OkStatus();
    return Call("Broadcast", [&] {
      gloo::BroadcastOptions opts(context_);
      opts.setOutput(static_cast<uint8_t*>(data), bytes);
      opts.setRoot(root);
      opts.setTag(next_tag_++);
      opts.setTimeout(timeout_);
      gloo::broadcast(opts);
    });
  }
  absl::Status Barrier() override {
    return Call("Barrier", [&] {
      gloo::BarrierOptions opts(context_);
      opts.setTag(next_tag_++);
      opts.setTimeout(timeout_);
      gloo::barrier(opts);
    });
  }

 private:
  absl::Status GatherFloats(const float* in, int64_t count, float* out,
                            const char* what) override {
    return Call(what, [&] {
      gloo::AllgatherOptions opts(context_);
      opts.setInput(const_cast<float*>(in), count);
      opts.setOutput(out, count * size());
      opts.setTag(next_tag_++);
      opts.setTimeout(timeout_);
      gloo::allgather(opts);
    });
  }

  // Runs a Gloo call; after a failure the group is broken (peers may be gone
  // or out of step), so later calls fail at once instead of waiting out
  // another timeout.
  template <typename F>
  absl::Status Call(const char* what, F&& f) {
    if (broken_) {
      return absl::FailedPreconditionError(absl::StrCat(
          what, " on rank ", rank(), ": the group failed earlier"));
    }
    absl::Status s = Run(what, rank(), std::forward<F>(f));
    if (!s.ok()) broken_ = true;
    return s;
  }

  std::shared_ptr<gloo::Context> context_;
  const std::chrono::milliseconds timeout_;
  uint32_t next_tag_ = 0;
  bool broken_ = false;
};

}  // namespace

absl::Status Communicator::AllReduceSumBf16(void* data, int64_t count) {
  if (count < 0)
    return absl::InvalidArgumentError("AllReduceSumBf16: count < 0");
  Bf16* values = static_cast<Bf16*>(data);
  std::vector<float> wide(count);
  for (int64_t i = 0; i < count; ++i) wide[i] = Bf16ToFloat(values[i]);
  absl::Status s = AllReduceSum(wide.data(), count);
  if (!s.ok()) return s;
  for (int64_t i = 0; i < count; ++i) values[i] = FloatToBf16(wide[i]);
  return absl::OkStatus();
}

std::unique_ptr<Communicator> NewSingleRankCommunicator() {
  return std::make_unique<SingleRankCommunicator>();
}

absl::StatusOr<std::unique_ptr<Communicator>> NewGlooCommunicator(
    KeyValueStore& store, int rank, int size, const GlooOptions& options) {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat("Gloo: rank ", rank, " is not in [0, ", size, ")"));
  }
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("Gloo: timeout must be positive");
  }
  // A peer that dies while this rank writes to it must be an error
  // (Unavailable), not a SIGPIPE that kills this rank too, as it would when
  // Gloo's send hits the closed socket: ignore SIGPIPE, process-wide (as
  // servers do; write errors then come back as EPIPE).
  std::signal(SIGPIPE, SIG_IGN);
  std::shared_ptr<gloo::Context> context;
  absl::Status s = Run("connecting", rank, [&] {
    gloo::transport::tcp::attr attr;
    attr.hostname = options.hostname;
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
    ctx->setTimeout(absl::ToChronoMilliseconds(options.timeout));
    GlooStore gloo_store(store, options.group + "/", options.timeout);
    ctx->connectFullMesh(gloo_store, device);
    context = std::move(ctx);
  });
  if (!s.ok()) return s;
  return std::unique_ptr<Communicator>(
      new GlooCommunicator(std::move(context), options.timeout));
}

absl::StatusOr<CpuTransport> ParseCpuTransport(absl::string_view name) {
  if (name == "gloo") return CpuTransport::kGloo;
  if (name == "shm") return CpuTransport::kShm;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown CPU transport '", name, "' (gloo or shm)"));
}

absl::StatusOr<std::unique_ptr<Communicator>> NewCpuCommunicator(
    KeyValueStore& store, int rank, int size, CpuTransport transport,
    const std::string& group, absl::Duration timeout,
    const std::string& hostname) {
  switch (transport) {
    case CpuTransport::kGloo:
      return NewGlooCommunicator(
          store, rank, size,
          GlooOptions{
              .group = group, .hostname = hostname, .timeout = timeout});
    case CpuTransport::kShm:
      break;
  }
  return NewShmCommunicator(store, rank, size,
                            ShmOptions{.group = group, .timeout = timeout});
}

absl::StatusOr<std::unique_ptr<Communicator>> NewCpuCommunicator(
    KeyValueStore& store, int rank, int size, absl::string_view transport,
    const std::string& group, absl::Duration timeout,
    const std::string& hostname) {
  OCTET_ASSIGN_OR_RETURN(const CpuTransport t, ParseCpuTransport(transport));
  return NewCpuCommunicator(store, rank, size, t, group, timeout, hostname);
}

}  // namespace octet
