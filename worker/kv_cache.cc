#include "worker/kv_cache.h"

#include <atomic>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace octet {

absl::StatusOr<std::unique_ptr<KvCache>> KvCache::Create(
    Backend& backend, int64_t layers, int64_t kv_heads, int64_t head_dim,
    const KvCacheOptions& options) {
  if (options.block_size <= 0 || options.num_blocks <= 0 ||
      options.num_blocks > (int64_t{1} << 30) / options.block_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KV cache: block_size and num_blocks must be positive (and the pool "
        "below 2^30 slots), got ",
        options.block_size, " and ", options.num_blocks));
  }
  static std::atomic<uint64_t> next_id{1};
  std::unique_ptr<KvCache> cache(new KvCache());
  cache->id_ = next_id.fetch_add(1);
  cache->options_ = options;
  const uint64_t dims[] = {static_cast<uint64_t>(options.num_blocks),
                           static_cast<uint64_t>(options.block_size),
                           static_cast<uint64_t>(kv_heads),
                           static_cast<uint64_t>(head_dim),
                           DTypeSize(backend.activation_dtype())};
  uint64_t bytes = 1;
  for (uint64_t d : dims) {
    if (__builtin_mul_overflow(bytes, d, &bytes)) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "KV cache: ", options.num_blocks, " blocks of ", options.block_size,
          " slots x ", kv_heads, " kv heads x ", head_dim,
          " dims overflow 64-bit sizes"));
    }
  }
  cache->bytes_per_pool_ = bytes;
  for (int64_t l = 0; l < layers; ++l) {
    for (auto* pools : {&cache->k_, &cache->v_}) {
      OCTET_ASSIGN_OR_RETURN(DeviceBuffer b,
                             backend.Allocate(cache->bytes_per_pool_));
      pools->push_back(std::move(b));
    }
  }
  cache->in_use_.assign(options.num_blocks, false);
  for (int64_t b = options.num_blocks - 1; b >= 0; --b) {
    cache->free_.push_back(static_cast<int32_t>(b));
  }
  return cache;
}

uint64_t KvCache::bytes() const { return 2 * bytes_per_pool_ * k_.size(); }

absl::Status KvCache::Reserve(int64_t tokens, std::vector<int32_t>* table) {
  const int64_t need = BlocksFor(tokens) - static_cast<int64_t>(table->size());
  if (need <= 0) return absl::OkStatus();
  if (need > free_blocks()) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "KV cache: ", need, " more blocks needed, ", free_blocks(), " free"));
  }
  for (int64_t i = 0; i < need; ++i) {
    table->push_back(free_.back());
    in_use_[free_.back()] = true;
    free_.pop_back();
  }
  return absl::OkStatus();
}

absl::Status KvCache::Release(std::vector<int32_t>* table) {
  int64_t bad = 0;
  for (auto it = table->rbegin(); it != table->rend(); ++it) {
    if (*it < 0 || *it >= num_blocks() || !in_use_[*it]) {
      ++bad;
      continue;
    }
    in_use_[*it] = false;
    free_.push_back(*it);
  }
  table->clear();
  if (bad > 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "KV cache: released ", bad, " blocks that were not handed out"));
  }
  return absl::OkStatus();
}

}  // namespace octet
