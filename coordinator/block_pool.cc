#include "coordinator/block_pool.h"

#include <algorithm>

#include "absl/hash/hash.h"

namespace octet {

BlockPool::BlockPool(int64_t num_blocks, int64_t block_size, bool caching)
    : block_size_(block_size),
      caching_(caching),
      blocks_(static_cast<size_t>(num_blocks)) {
  for (int64_t b = num_blocks - 1; b >= 0; --b) {
    free_.push_back(static_cast<int32_t>(b));
  }
}

uint64_t BlockPool::Key(uint64_t parent_key, std::span<const int32_t> tokens) {
  return absl::HashOf(parent_key, absl::MakeConstSpan(tokens));
}

int32_t BlockPool::Find(uint64_t key, int32_t parent,
                        std::span<const int32_t> tokens) const {
  auto it = by_key_.find(key);
  if (it == by_key_.end()) return -1;
  const Block& b = blocks_[it->second];
  const bool same_parent =
      b.parent == parent &&
      (parent < 0 || b.parent_generation == blocks_[parent].generation);
  return same_parent && std::equal(tokens.begin(), tokens.end(),
                                   b.tokens.begin(), b.tokens.end())
             ? it->second
             : -1;
}

int32_t BlockPool::Take() {
  int32_t b;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else {
    b = unused_.front();
    unused_.pop_front();
    Forget(b);
  }
  blocks_[b].refs = 1;
  return b;
}

std::vector<int32_t> BlockPool::Match(std::span<const int32_t> tokens,
                                      int64_t max_blocks) {
  std::vector<int32_t> found;
  if (!caching_) return found;
  uint64_t key = 0;
  int32_t parent = -1;
  const int64_t whole = static_cast<int64_t>(tokens.size()) / block_size_;
  for (int64_t i = 0; i < std::min(max_blocks, whole); ++i) {
    const auto block = tokens.subspan(i * block_size_, block_size_);
    key = Key(key, block);
    const int32_t b = Find(key, parent, block);
    if (b < 0) break;
    if (blocks_[b].refs++ == 0) unused_.erase(blocks_[b].unused);
    found.push_back(b);
    parent = b;
  }
  return found;
}

void BlockPool::Cache(const std::vector<int32_t>& blocks, size_t index,
                      std::span<const int32_t> tokens) {
  Block& b = blocks_[blocks[index]];
  if (!caching_ || b.cached) return;
  const int32_t parent = index == 0 ? -1 : blocks[index - 1];
  if (parent >= 0 && !blocks_[parent].cached) return;  // a chain with a gap
  const uint64_t key = Key(parent < 0 ? 0 : blocks_[parent].key, tokens);
  if (auto held = by_key_.find(key); held != by_key_.end()) {
    // The same content cached already, or what is left of a chain whose
    // parent was evicted (or, rarely, another content with the same key),
    // which no match can reach any more: it gives way.
    if (Find(key, parent, tokens) >= 0) return;
    Drop(held->second);
  }
  by_key_[key] = blocks[index];
  b.cached = true;
  b.key = key;
  b.generation = ++generations_;
  b.parent = parent;
  b.parent_generation = parent < 0 ? 0 : blocks_[parent].generation;
  b.tokens.assign(tokens.begin(), tokens.end());
  ++cached_;
}

void BlockPool::Release(int32_t block) {
  Block& b = blocks_[block];
  if (--b.refs > 0) return;
  if (b.cached) {
    b.unused = unused_.insert(unused_.end(), block);
  } else {
    free_.push_back(block);
  }
}

void BlockPool::Forget(int32_t block) {
  Block& b = blocks_[block];
  if (!b.cached) return;
  by_key_.erase(b.key);
  b.cached = false;
  b.tokens.clear();
  --cached_;
}

void BlockPool::Drop(int32_t block) {
  Forget(block);
  if (blocks_[block].refs == 0) {
    unused_.erase(blocks_[block].unused);
    free_.push_back(block);
  }
}

void BlockPool::Clear() {
  // Those in use are freed when released.
  for (size_t b = 0; b < blocks_.size(); ++b) {
    if (blocks_[b].cached) Drop(static_cast<int32_t>(b));
  }
}

}  // namespace octet
