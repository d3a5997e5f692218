// The inputs of one Attention call held on the host: queries, a paged K/V
// cache and the arrays AttentionMetadata points at. Shared by the CPU
// attention's test and its benchmark, which fill them their own ways.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/backend.h"

namespace octet::testing {

struct AttentionInputs {
  int64_t heads = 0, kv_heads = 0, head_dim = 0;
  int64_t block_size = 16, window = 0;
  std::vector<float> q, k, v;  // q [tokens][heads * head_dim]
  std::vector<int32_t> positions, slots, token_seq, tables;
  int64_t max_blocks = 0;  // of each row of `tables`

  int64_t q_stride() const { return heads * head_dim; }
  AttentionMetadata Meta() const {
    AttentionMetadata m;
    m.num_tokens = static_cast<int64_t>(positions.size());
    m.positions = positions.data();
    m.slots = slots.data();
    m.token_seq = token_seq.data();
    m.block_tables = tables.data();
    m.max_blocks = max_blocks;
    m.block_size = block_size;
    m.sliding_window = window;
    return m;
  }
};

}  // namespace octet::testing
