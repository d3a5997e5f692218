// LlamaModel's batch metadata: a forward's steps checked against the model
// and the cache, laid out on the host (ids, positions, KV slots, each
// token's sequence, last rows, block tables, query tiles), copied to the
// device in one copy, and described to attention (AttentionMetadata, and
// for a backend that plans attention on the host, AttentionBatch).
#include <algorithm>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "worker/llama_model.h"

namespace octet {
namespace {

// Checks one step's positions, block table and token ids against the model
// and the cache.
absl::Status ValidateStep(const SequenceStep& s, const ModelConfig& c,
                          const KvCache& cache) {
  if (s.tokens.empty()) {
    return absl::InvalidArgumentError("Forward: a step has no new tokens");
  }
  const int64_t num_new = static_cast<int64_t>(s.tokens.size());
  // Checked before `end` is formed, so a huge start_position cannot wrap.
  if (s.start_position < 0 ||
      s.start_position > c.max_position_embeddings - num_new) {
    return absl::InvalidArgumentError(
        absl::StrCat("Forward: positions [", s.start_position, ", +", num_new,
                     ") are outside [0, max_position_embeddings ",
                     c.max_position_embeddings, ")"));
  }
  const int64_t end = s.start_position + num_new;
  const int64_t needed_blocks = cache.BlocksFor(end);
  if (needed_blocks > static_cast<int64_t>(s.block_table->size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("Forward: block table of ", s.block_table->size(),
                     " blocks cannot hold ", end, " tokens"));
  }
  // Attention reads every block up to `end`, not only the new tokens' ones.
  for (int64_t b = 0; b < needed_blocks; ++b) {
    const int32_t block = (*s.block_table)[b];
    if (block < 0 || block >= cache.num_blocks()) {
      return absl::InvalidArgumentError(
          absl::StrCat("Forward: block ", block, " is not in the cache"));
    }
  }
  for (const int32_t id : s.tokens) {
    if (id < 0 || id >= c.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Forward: token id ", id, " outside [0, ", c.vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<LlamaModel::HostBatch> LlamaModel::BuildBatch(
    absl::Span<const SequenceStep> steps, const KvCache& cache) const {
  const int64_t num_seqs = static_cast<int64_t>(steps.size());
  if (num_seqs == 0) return absl::InvalidArgumentError("Forward: no sequences");
  HostBatch batch;
  for (const SequenceStep& s : steps) {
    if (s.block_table == nullptr) {
      return absl::InvalidArgumentError("Forward: a step has no block table");
    }
    batch.max_blocks =
        std::max<int64_t>(batch.max_blocks, s.block_table->size());
  }
  batch.tables.assign(num_seqs * batch.max_blocks, 0);
  for (int64_t i = 0; i < num_seqs; ++i) {
    const SequenceStep& s = steps[i];
    OCTET_RETURN_IF_ERROR(ValidateStep(s, config_, cache));
    std::copy(s.block_table->begin(), s.block_table->end(),
              batch.tables.begin() + i * batch.max_blocks);
    for (size_t j = 0; j < s.tokens.size(); ++j) {
      const int64_t pos = s.start_position + static_cast<int64_t>(j);
      const int32_t block = (*s.block_table)[pos / cache.block_size()];
      batch.ids.push_back(s.tokens[j]);
      batch.positions.push_back(static_cast<int32_t>(pos));
      batch.slots.push_back(static_cast<int32_t>(block * cache.block_size() +
                                                 pos % cache.block_size()));
      batch.token_seq.push_back(static_cast<int32_t>(i));
    }
    const int32_t last = static_cast<int32_t>(batch.ids.size() - 1);
    batch.last_rows.push_back(last);
    for (int32_t row = s.all_logits ? last - static_cast<int32_t>(
                                                 s.tokens.size() - 1)
                                    : last;
         row <= last; ++row) {
      batch.logit_rows.push_back(row);
    }
  }
  // Query tiles only where a prompt chunk makes them pay; a decode batch's
  // shapes stay fixed for its graph.
  const int64_t tile = backend_.attention_query_tile();
  const bool prefill =
      std::any_of(steps.begin(), steps.end(),
                  [](const SequenceStep& s) { return s.tokens.size() > 1; });
  if (tile > 0 && prefill) {
    std::vector<int32_t> first, count;
    for (int64_t i = 0; i < num_seqs; ++i) {
      const int32_t n = static_cast<int32_t>(steps[i].tokens.size());
      first.push_back(batch.last_rows[i] - n + 1);
      count.push_back(n);
    }
    batch.query_tiles = QueryTiles(first, count, static_cast<int32_t>(tile));
  }
  return batch;
}

absl::Status LlamaModel::UploadBatch(const HostBatch& batch) {
  OCTET_RETURN_IF_ERROR(Reserve(batch.num_tokens(), batch.num_logit_rows(),
                                batch.num_seqs() * batch.max_blocks));
  // One copy: the arrays at their places in the metadata buffer (where
  // Reserve laid them out).
  const Scratch& s = scratch_;
  const int32_t* base = s.metadata.as<int32_t>();
  std::vector<int32_t> host((s.tables - base) + batch.tables.size());
  for (auto [src, at] :
       {std::pair{&batch.ids, s.ids}, std::pair{&batch.positions, s.positions},
        std::pair{&batch.slots, s.slots},
        std::pair{&batch.token_seq, s.token_seq},
        std::pair{&batch.query_tiles, s.query_tiles},
        std::pair{&batch.logit_rows, s.logit_rows},
        std::pair{&batch.tables, s.tables}}) {
    std::copy(src->begin(), src->end(), host.begin() + (at - base));
  }
  return backend_.CopyToDevice(s.metadata.data(), host.data(),
                               host.size() * sizeof(int32_t));
}

AttentionMetadata LlamaModel::BatchMetadata(const HostBatch& batch,
                                            const KvCache& cache) const {
  const Scratch& s = scratch_;
  AttentionMetadata meta;
  meta.num_tokens = batch.num_tokens();
  meta.positions = s.positions;
  meta.slots = s.slots;
  meta.token_seq = s.token_seq;
  meta.block_tables = s.tables;
  meta.query_tiles = batch.query_tiles.empty() ? nullptr : s.query_tiles;
  meta.num_query_tiles = static_cast<int64_t>(batch.query_tiles.size() / 2);
  meta.max_blocks = batch.max_blocks;
  meta.block_size = cache.block_size();
  meta.sliding_window = config_.sliding_window.value_or(0);
  meta.full_heads = config_.num_heads;  // TP = 1's, for attention plans
  meta.full_kv_heads = config_.num_kv_heads;
  return meta;
}

absl::StatusOr<bool> LlamaModel::PlanAttention(const HostBatch& batch,
                                               const AttentionMetadata& meta) {
  std::vector<int32_t> query_start = {0}, context;
  for (const int32_t last : batch.last_rows) {
    query_start.push_back(last + 1);
    context.push_back(batch.positions[last] + 1);
  }
  return backend_.PlanAttention(AttentionBatch{.query_start = query_start,
                                               .context = context,
                                               .block_tables = batch.tables},
                                meta, plan_.heads, plan_.kv_heads,
                                config_.head_dim);
}

}  // namespace octet
