// tp_rank: one tensor-parallel rank of a model, as its own process, for
// tensor_parallel_test (CPU ranks) and tensor_parallel_cuda_test (CUDA
// ranks, --device=cuda). Joins a Gloo or shared-memory group through the
// rendezvous store at
// --store, loads its slice of --model, runs the prefill of three prompts
// (recording the FP8 activation scales) and 64 greedy decode steps, and
// writes what it saw to --out:
//   [u64 n][n floats]  prefill logits, [prompts][vocab]
//   [u64 n][n floats]  FP8 activation scales, per projection call and prompt
//   [u64 n][n int32]   generated tokens, [prompts][steps]
// With --stream_collectives (CPU ranks) the collectives behave as NCCL's on
// a stream (tests/worker/stream_communicator.h): decode graphs capture
// them, and a host read without Await fails the run.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "model/checkpoint.h"
#include "parallel/communicator.h"
#include "rpc/store.h"
#include "tests/worker/capturing_backend.h"
#include "tests/worker/stream_communicator.h"
#include "tests/worker/tp_requests.h"
#include "worker/backends.h"
#include "worker/generator.h"
#include "worker/llama_model.h"
#include "worker/tp_group.h"

ABSL_FLAG(std::string, store, "", "rendezvous address host:port");
ABSL_FLAG(int32_t, rank, 0, "this rank");
ABSL_FLAG(int32_t, size, 1, "ranks in the group");
ABSL_FLAG(std::string, group, "tp", "group name");
ABSL_FLAG(std::string, model, "", "checkpoint directory");
ABSL_FLAG(std::string, method, "none", "none or fp8");
ABSL_FLAG(bool, global_scale, false, "FP8 weight scales of the whole weight");
ABSL_FLAG(bool, quantize_lm_head, false, "with --method=fp8: an FP8 lm_head");
ABSL_FLAG(std::string, out, "", "result file");
ABSL_FLAG(int32_t, victim, -1,
          "this rank leaves after the prefill: exits, or with --stall "
          "stops answering for three timeouts");
ABSL_FLAG(bool, stall, false, "the victim stalls instead of exiting");
ABSL_FLAG(int32_t, timeout_ms, 60000, "collective timeout");
ABSL_FLAG(std::string, transport, "gloo",
          "gloo or shm (staged through host memory for CUDA ranks), or nccl "
          "(CUDA ranks, one GPU each)");
ABSL_FLAG(std::string, device, "cpu",
          "cpu, or cuda: the rank computes on GPU --cuda_device and its "
          "collectives are staged through host memory (several ranks may "
          "share one GPU)");
ABSL_FLAG(int32_t, cuda_device, 0,
          "with --device=cuda: the GPU, or -1 for the one numbered as the "
          "rank");
ABSL_FLAG(bool, stream_collectives, false,
          "CPU ranks: collectives as stream work (captured by the decode "
          "graphs, results for the host only after Await); fails unless "
          "graphs replayed collectives");

namespace octet {
namespace {

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "tp_rank %d: %s\n", absl::GetFlag(FLAGS_rank),
               s.ToString().c_str());
  return 1;
}

template <typename T>
void WriteSection(std::ofstream& out, const std::vector<T>& v) {
  const uint64_t n = v.size();
  out.write(reinterpret_cast<const char*>(&n), sizeof(n));
  out.write(reinterpret_cast<const char*>(v.data()), n * sizeof(T));
}

// This rank's group as the flags name it.
absl::StatusOr<TpGroup> GroupFromFlags(int rank, int gpu,
                                       absl::Duration timeout) {
  TpGroup g{.rank = rank,
            .size = absl::GetFlag(FLAGS_size),
            .name = absl::GetFlag(FLAGS_group),
            .nccl = absl::GetFlag(FLAGS_transport) == "nccl",
            .cuda_device = gpu,
            .timeout = timeout};
  if (!g.nccl) {
    OCTET_ASSIGN_OR_RETURN(g.transport,
                           ParseCpuTransport(absl::GetFlag(FLAGS_transport)));
  }
  return g;
}

int Main() {
  GrpcStore store(absl::GetFlag(FLAGS_store));
  const absl::Duration timeout =
      absl::Milliseconds(absl::GetFlag(FLAGS_timeout_ms));
  const bool cuda = absl::GetFlag(FLAGS_device) == "cuda";
  const bool streamed = absl::GetFlag(FLAGS_stream_collectives);
  if (cuda && streamed) {
    return Fail(
        absl::InvalidArgumentError("--stream_collectives is for CPU ranks"));
  }
  const int rank = absl::GetFlag(FLAGS_rank);
  const int gpu = absl::GetFlag(FLAGS_cuda_device) == -1
                      ? rank
                      : absl::GetFlag(FLAGS_cuda_device);
  auto backend =
      NewBackend(cuda ? DeviceChoice::kCuda : DeviceChoice::kCpu, {}, gpu);
  if (!backend.ok()) return Fail(backend.status());
  testing::CapturingBackend* capturing = nullptr;
  if (streamed) {
    auto wrapped =
        std::make_unique<testing::CapturingBackend>(*std::move(backend));
    capturing = wrapped.get();
    *backend = std::move(wrapped);
  }
  auto group = GroupFromFlags(rank, gpu, timeout);
  if (!group.ok()) return Fail(group.status());
  auto comm = JoinTpGroup(store, **backend, *group);
  if (!comm.ok()) return Fail(comm.status());
  testing::StreamCommunicator* stream = nullptr;
  if (streamed) {
    auto wrapped = std::make_unique<testing::StreamCommunicator>(
        *capturing, *std::move(comm));
    stream = wrapped.get();
    *comm = std::move(wrapped);
  }
  auto ckpt = Checkpoint::Open(absl::GetFlag(FLAGS_model));
  if (!ckpt.ok()) return Fail(ckpt.status());
  ModelOptions options;
  options.method = absl::GetFlag(FLAGS_method) == "fp8" ? LinearMethod::kFp8
                                                        : LinearMethod::kNone;
  options.global_weight_scale = absl::GetFlag(FLAGS_global_scale);
  options.quantize_lm_head = absl::GetFlag(FLAGS_quantize_lm_head);
  options.comm = comm->get();
  TpResults results;
  const bool victim = absl::GetFlag(FLAGS_victim) == absl::GetFlag(FLAGS_rank);
  const absl::Time start = absl::Now();
  absl::Status s = RunTpRequests(**ckpt, **backend, options, &results, [&] {
    if (!victim) return;
    if (absl::GetFlag(FLAGS_stall)) absl::SleepFor(3 * timeout);
    _exit(0);
  });
  if (!s.ok()) {
    std::fprintf(stderr, "tp_rank %d: failed after %.2f s\n",
                 absl::GetFlag(FLAGS_rank),
                 absl::ToDoubleSeconds(absl::Now() - start));
    return Fail(s);
  }
  if (streamed) {
    std::fprintf(stderr,
                 "tp_rank %d: %lld captures, %lld replays, %lld collectives\n",
                 absl::GetFlag(FLAGS_rank),
                 static_cast<long long>(capturing->captures()),
                 static_cast<long long>(capturing->replays()),
                 static_cast<long long>(stream->collectives()));
    if (capturing->replays() == 0) {
      return Fail(absl::InternalError(
          "--stream_collectives: no decode graph was replayed"));
    }
  }
  std::ofstream out(absl::GetFlag(FLAGS_out), std::ios::binary);
  WriteSection(out, results.logits);
  WriteSection(out, results.scales);
  WriteSection(out, results.tokens);
  WriteSection(out, results.weight_codes);
  WriteSection(out, results.weight_scales);
  return out.good() ? 0 : 1;
}

}  // namespace
}  // namespace octet

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return octet::Main();
}
