// How a Llama-family model splits across `size` tensor-parallel ranks
// (Megatron layout, docs/design.md), and which slice rank `rank` holds:
//
//   q/k/v, gate/up  column-parallel: each rank holds whole heads (q heads
//                   size-th of them; KV heads likewise, or, with fewer KV
//                   heads than ranks, the one its q heads attend with,
//                   replicated) and a size-th of the MLP's rows
//   o, down         row-parallel: a size-th of the input columns, followed
//                   by an all-reduce (sum) of the output
//   embedding,      vocabulary-parallel: a size-th of the rows; embedding
//   lm_head         outputs are all-reduced, logits all-gathered
#pragma once

#include <cstdint>
#include <utility>

#include "absl/status/statusor.h"
#include "model/model_config.h"

namespace octet {

struct ShardPlan {
  int rank = 0;
  int size = 1;
  int64_t heads = 0, head_begin = 0;        // q heads held
  int64_t kv_heads = 0, kv_head_begin = 0;  // KV heads held
  int64_t intermediate = 0, intermediate_begin = 0;
  int64_t vocab = 0, vocab_begin = 0;
};

// The plan for rank `rank` of `size`; a dimension that does not divide gives
// InvalidArgument naming it (CheckTensorParallelSplit, model/).
absl::StatusOr<ShardPlan> MakeShardPlan(const ModelConfig& config, int rank,
                                        int size);

}  // namespace octet
