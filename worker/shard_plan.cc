#include "worker/shard_plan.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace octet {

absl::StatusOr<ShardPlan> MakeShardPlan(const ModelConfig& c, int rank,
                                        int size) {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor parallelism: rank ", rank, " is not in [0, ", size, ")"));
  }
  OCTET_RETURN_IF_ERROR(CheckTensorParallelSplit(c, size));
  ShardPlan p;
  p.rank = rank;
  p.size = size;
  p.heads = c.num_heads / size;
  p.head_begin = rank * p.heads;
  if (c.num_kv_heads >= size) {
    p.kv_heads = c.num_kv_heads / size;
    p.kv_head_begin = rank * p.kv_heads;
  } else {
    // Fewer KV heads than ranks: this rank's q heads all share one KV head
    // (heads / kv_heads q heads per KV head, a multiple of p.heads).
    p.kv_heads = 1;
    p.kv_head_begin = p.head_begin / (c.num_heads / c.num_kv_heads);
  }
  p.intermediate = c.intermediate_size / size;
  p.intermediate_begin = rank * p.intermediate;
  p.vocab = c.vocab_size / size;
  p.vocab_begin = rank * p.vocab;
  return p;
}

}  // namespace octet
