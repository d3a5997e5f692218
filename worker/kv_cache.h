// The paged KV cache: for every layer a K pool and a V pool of fixed-size
// blocks ([num_blocks * block_size slots][kv_heads][head_dim] in the
// backend's activation dtype), and the allocator that hands blocks to
// sequences. A sequence's block table lists its blocks in order; token at
// position p lives in slot table[p / block_size] * block_size + p % block_size,
// so sequences of any lengths share one pool without fragmentation.
// Not thread-safe: one worker thread owns it.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/backend.h"

namespace octet {

struct KvCacheOptions {
  int64_t block_size = 16;  // tokens per block
  int64_t num_blocks = 0;   // blocks in each pool; must be > 0
};

class KvCache {
 public:
  static absl::StatusOr<std::unique_ptr<KvCache>> Create(
      Backend& backend, int64_t layers, int64_t kv_heads, int64_t head_dim,
      const KvCacheOptions& options);

  void* k(int64_t layer) const { return k_[layer].data(); }
  void* v(int64_t layer) const { return v_[layer].data(); }
  int64_t block_size() const { return options_.block_size; }
  int64_t num_blocks() const { return options_.num_blocks; }
  int64_t free_blocks() const { return static_cast<int64_t>(free_.size()); }
  uint64_t bytes() const;
  // Unique to this cache in the process: work captured against its pools
  // (LlamaModel's decode graphs) is replayed only on the same cache.
  uint64_t id() const { return id_; }

  // Blocks needed to hold `tokens` tokens.
  int64_t BlocksFor(int64_t tokens) const {
    return (tokens + options_.block_size - 1) / options_.block_size;
  }

  // Appends blocks to `table` until it holds `tokens` tokens;
  // ResourceExhausted (and `table` unchanged) when the pool cannot.
  absl::Status Reserve(int64_t tokens, std::vector<int32_t>* table);
  // Returns a sequence's blocks to the pool and clears `table`. Ids that
  // are not currently handed out (foreign, or released twice) are not
  // returned, so the pool never holds a block twice; they make the result
  // FailedPrecondition, which means a caller's bookkeeping is wrong.
  absl::Status Release(std::vector<int32_t>* table);

 private:
  KvCache() = default;
  KvCacheOptions options_;
  uint64_t id_ = 0;
  uint64_t bytes_per_pool_ = 0;
  std::vector<DeviceBuffer> k_, v_;
  std::vector<int32_t> free_;  // a stack; lowest ids handed out first
  std::vector<bool> in_use_;   // by block id
};

}  // namespace octet
