#include "worker/shard_plan.h"

#include "absl/strings/str_cat.h"
#include "kernels/status_macros.h"

namespace octet {
namespace {

absl::Status Divides(int64_t value, const char* name, int size) {
  if (value % size != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " = ", value, " does not divide by the ", size,
                     " tensor-parallel ranks"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ShardPlan> MakeShardPlan(const ModelConfig& c, int rank,
                                        int size) {
  if (size < 1 || rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor parallelism: rank ", rank, " is not in [0, ", size, ")"));
  }
  OCTET_RETURN_IF_ERROR(Divides(c.num_heads, "num_attention_heads", size));
  OCTET_RETURN_IF_ERROR(
      Divides(c.intermediate_size, "intermediate_size", size));
  OCTET_RETURN_IF_ERROR(Divides(c.vocab_size, "vocab_size", size));
  if (c.num_kv_heads % size != 0 && size % c.num_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_key_value_heads = ", c.num_kv_heads, " and the ", size,
        " tensor-parallel ranks: one must divide the other"));
  }
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
