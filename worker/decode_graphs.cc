// LlamaModel's decode graphs: a decode batch is padded to a bucket size
// (1, 2, 4, 8, then multiples of 8) with block tables as wide as the longest
// context, and its sampling rows to the same count, so that one capture of
// the backend's work, forward and sampling, serves every decode of that
// bucket that samples alike (nothing, argmax only, or draws). The first
// decode of a graph runs as usual, the second is captured, later ones
// replay it; a capture that fails leaves its graph to run as usual, said
// once.
#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "base/status_macros.h"
#include "worker/llama_model.h"

namespace octet {
int64_t DecodeGraphBucket(int64_t batch, int64_t max_batch) {
  if (batch < 1 || batch > max_batch) return 0;
  int64_t bucket = 1;
  while (bucket < batch && bucket < 8) bucket *= 2;
  if (bucket < batch) bucket = (batch + 7) / 8 * 8;
  return std::min(bucket, max_batch);
}

int64_t LlamaModel::GraphBucket(absl::Span<const SequenceStep> steps,
                                const ForwardTrace* trace) const {
  // Captures need collectives that are stream work (NCCL's), and no trace
  // (which copies to the host mid-forward).
  if (!backend_.can_capture() || trace != nullptr) return 0;
  if (plan_.size > 1 && !options_.comm->capturable()) return 0;
  for (const SequenceStep& s : steps) {
    if (s.tokens.size() != 1) return 0;  // a prefill: shapes vary
  }
  return DecodeGraphBucket(static_cast<int64_t>(steps.size()),
                           options_.graph_max_batch);
}

void LlamaModel::PadBatch(int64_t bucket, int64_t width, HostBatch& batch) {
  const int64_t n = batch.num_seqs();
  std::vector<int32_t> tables(bucket * width, 0);
  for (int64_t i = 0; i < n; ++i) {
    std::copy_n(batch.tables.begin() + i * batch.max_blocks, batch.max_blocks,
                tables.begin() + i * width);
  }
  batch.tables = std::move(tables);
  batch.max_blocks = width;
  for (int64_t i = n; i < bucket; ++i) {
    batch.ids.push_back(0);
    batch.positions.push_back(0);
    batch.slots.push_back(-1);  // writes no KV
    batch.token_seq.push_back(static_cast<int32_t>(i));
    batch.last_rows.push_back(static_cast<int32_t>(i));
    batch.logit_rows.push_back(static_cast<int32_t>(i));
  }
}

absl::Status LlamaModel::ComputeWithGraph(const GraphKey& key,
                                          const AttentionMetadata& meta,
                                          KvCache& cache) {
  const auto [bucket, sampling] = key;
  DecodeGraph& g = graphs_[key];
  if (g.failed || g.runs++ == 0) {
    if (!g.failed) ++graph_stats_.warmups;
    return ComputeAndSample(meta, bucket, bucket, sampling, cache, nullptr);
  }
  if (g.work == nullptr) {
    OCTET_RETURN_IF_ERROR(backend_.BeginCapture());
    const absl::Status computed =
        ComputeAndSample(meta, bucket, bucket, sampling, cache, nullptr);
    absl::StatusOr<std::unique_ptr<CapturedWork>> work = backend_.EndCapture();
    if (!computed.ok() || !work.ok()) {
      // Not worth failing a step for: this bucket runs as usual from now.
      g.failed = true;
      std::fprintf(stderr,
                   "octet: decode batch %lld runs without a graph: its "
                   "capture failed: %s\n",
                   static_cast<long long>(bucket),
                   std::string(computed.ok() ? work.status().message()
                                             : computed.message())
                       .c_str());
      return ComputeAndSample(meta, bucket, bucket, sampling, cache, nullptr);
    }
    g.work = *std::move(work);
    ++graph_stats_.captures;
  }
  ++graph_stats_.replays;
  return g.work->Replay();
}

void LlamaModel::InvalidateGraphs() {
  graphs_.clear();
  ++graph_stats_.invalidations;
}

}  // namespace octet
