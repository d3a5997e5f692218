// The KV cache's blocks as the coordinator accounts for them, and the
// automatic prefix cache that lives in them.
//
// A block is in one of three states:
//   - in use: referenced by one or more sequences (a cached block can be
//     shared by every sequence whose tokens begin with its prefix);
//   - cached and unused: it holds a full block of tokens whose keys and
//     values no sequence needs now but a later one may; kept in least-
//     recently-used order and forgotten (evicted) only when a block is
//     needed and no plain free one is left;
//   - free: holds nothing anyone can find.
// A cached block is found by a hash chain: its key mixes its parent's key
// (the block before it in the sequence) with its own tokens, so a key
// stands for every token from position 0 to the block's end. A hit is
// checked, not trusted: the block's tokens are compared, and its parent
// must be the block matched just before it, still holding what it held
// when the child was cached (a generation number), so a hash collision or
// a recycled parent never hands out wrong keys and values.
//
// The key holds no model: the pool belongs to one engine, which serves one
// model and quantization, and is cleared when its worker group (and so the
// workers' cache) is replaced.
// Not thread-safe: the scheduler's.
#pragma once

#include <cstdint>
#include <list>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace octet {

class BlockPool {
 public:
  // Blocks 0 .. num_blocks - 1 of block_size tokens; without `caching`
  // Match finds nothing and Cache keeps nothing.
  BlockPool(int64_t num_blocks, int64_t block_size, bool caching);

  // Blocks Take can hand out: free and cached-unused ones.
  int64_t available() const {
    return static_cast<int64_t>(free_.size() + unused_.size());
  }
  // Blocks a sequence could find (in use or not).
  int64_t cached() const { return cached_; }

  // A block to write in, referenced once: a free one (lowest ids first), or
  // else the least recently used cached one, forgotten. Needs available().
  int32_t Take();
  // The cached blocks holding `tokens`' first full blocks, as many in a row
  // as are cached, at most max_blocks; each referenced once more (the caller
  // gives them back with Release).
  std::vector<int32_t> Match(std::span<const int32_t> tokens,
                             int64_t max_blocks);
  // `blocks`[index] now holds `tokens` (block_size of them: the sequence's
  // tokens of that block, whose keys and values the workers wrote), the
  // blocks before it having been cached or matched: it can be found. A block
  // whose content is cached elsewhere already stays uncached.
  void Cache(const std::vector<int32_t>& blocks, size_t index,
             std::span<const int32_t> tokens);
  // One reference fewer; unreferenced, a cached block joins the unused
  // ones as the most recently used, another the free ones (taken next).
  void Release(int32_t block);
  // Forgets every cached block (the workers' cache was lost).
  void Clear();

 private:
  struct Block {
    int32_t refs = 0;
    bool cached = false;
    uint64_t key = 0;         // the hash chain's, when cached
    uint64_t generation = 0;  // which caching of this block, when cached
    int32_t parent = -1;      // the block before it (-1: the first)
    uint64_t parent_generation = 0;
    std::vector<int32_t> tokens;  // what it holds, when cached
    std::list<int32_t>::iterator unused;  // its place, cached and unused
  };

  // The key of a block holding `tokens` after a block keyed `parent_key`.
  static uint64_t Key(uint64_t parent_key, std::span<const int32_t> tokens);
  // The cached block keyed `key` holding `tokens` after `parent`, or -1.
  int32_t Find(uint64_t key, int32_t parent,
               std::span<const int32_t> tokens) const;
  // No longer findable; Drop also moves an unused block to the free ones.
  void Forget(int32_t block);
  void Drop(int32_t block);

  const int64_t block_size_;
  const bool caching_;
  std::vector<Block> blocks_;
  std::vector<int32_t> free_;   // a stack: the next taken at the back
  std::list<int32_t> unused_;   // cached, unreferenced: least recent first
  absl::flat_hash_map<uint64_t, int32_t> by_key_;
  int64_t cached_ = 0;
  uint64_t generations_ = 0;
};

}  // namespace octet
