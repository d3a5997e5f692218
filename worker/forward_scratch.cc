// LlamaModel's scratch: the device buffers a forward works in, grown to
// the largest forward seen and never shrunk, with its metadata arrays in one
// buffer so that a batch goes up in one copy. Growing drops the decode
// graphs, which name the buffers they were captured with.
#include <algorithm>
#include <numeric>
#include <vector>

#include "absl/status/status.h"
#include "base/status_macros.h"
#include "worker/llama_model.h"

namespace octet {
namespace {

// Where each array of a forward's metadata sits in Scratch::metadata, in
// int32 elements, for capacities of `tokens`, `rows` (logit rows) and
// `table_entries`.
struct MetadataLayout {
  MetadataLayout(int64_t tokens, int64_t rows, int64_t table_entries)
      : positions(tokens),
        slots(2 * tokens),
        token_seq(3 * tokens),
        query_tiles(4 * tokens),  // at most one tile per token
        logit_rows(6 * tokens),
        tables(6 * tokens + rows),
        end(tables + table_entries) {}
  size_t bytes() const { return end * sizeof(int32_t); }

  int64_t ids = 0, positions, slots, token_seq, query_tiles, logit_rows, tables,
          end;
};

// Grows `buf` to at least `bytes`.
absl::Status Grow(Backend& backend, DeviceBuffer& buf, size_t bytes) {
  if (buf.bytes() >= bytes && buf.data() != nullptr) return absl::OkStatus();
  OCTET_ASSIGN_OR_RETURN(buf, backend.Allocate(std::max<size_t>(bytes, 64)));
  return absl::OkStatus();
}

}  // namespace

absl::Status LlamaModel::Reserve(int64_t tokens, int64_t rows,
                                 int64_t table_entries) {
  Scratch& s = scratch_;
  const ModelConfig& c = config_;
  const size_t act = DTypeSize(backend_.activation_dtype());
  bool grew = tokens > s.tokens || rows > s.rows;
  if (tokens > s.tokens) {
    const int64_t qkv = (plan_.heads + 2 * plan_.kv_heads) * c.head_dim;
    const int64_t widest_in =
        std::max({c.hidden_size, plan_.heads * c.head_dim, plan_.intermediate});
    OCTET_RETURN_IF_ERROR(Grow(backend_, s.h, tokens * c.hidden_size * act));
    OCTET_RETURN_IF_ERROR(Grow(backend_, s.x, tokens * c.hidden_size * act));
    OCTET_RETURN_IF_ERROR(Grow(backend_, s.qkv, tokens * qkv * act));
    OCTET_RETURN_IF_ERROR(
        Grow(backend_, s.attn, tokens * plan_.heads * c.head_dim * act));
    OCTET_RETURN_IF_ERROR(Grow(backend_, s.proj, tokens * c.hidden_size * act));
    OCTET_RETURN_IF_ERROR(
        Grow(backend_, s.gate_up, tokens * 2 * plan_.intermediate * act));
    OCTET_RETURN_IF_ERROR(
        Grow(backend_, s.act, tokens * plan_.intermediate * act));
    OCTET_RETURN_IF_ERROR(Grow(backend_, s.codes, tokens * widest_in));
    if (act != sizeof(float) && backend_.has_block_sums()) {
      OCTET_RETURN_IF_ERROR(
          Grow(backend_, s.sums, tokens * c.hidden_size * sizeof(float)));
    }
    s.tokens = tokens;
  }
  if (rows > s.rows) {  // logit rows: one per sequence, or more
    OCTET_RETURN_IF_ERROR(
        Grow(backend_, s.last_hidden, rows * c.hidden_size * act));
    OCTET_RETURN_IF_ERROR(
        Grow(backend_, s.logits, rows * c.vocab_size * sizeof(float)));
    if (plan_.size > 1) {
      OCTET_RETURN_IF_ERROR(
          Grow(backend_, s.local_logits, rows * plan_.vocab * sizeof(float)));
      OCTET_RETURN_IF_ERROR(
          Grow(backend_, s.gathered, rows * c.vocab_size * sizeof(float)));
    }
    s.rows = rows;
  }
  // FP8 scales: one per sequence, or per token (row_ids: each row its own
  // group).
  if (const int64_t scaled = std::max(s.tokens, s.rows);
      scaled > s.scale_rows) {
    OCTET_RETURN_IF_ERROR(Grow(backend_, s.absmax, scaled * sizeof(float)));
    OCTET_RETURN_IF_ERROR(Grow(backend_, s.act_scale, scaled * sizeof(float)));
    std::vector<int32_t> ids(scaled);
    std::iota(ids.begin(), ids.end(), 0);
    OCTET_RETURN_IF_ERROR(Grow(backend_, s.row_ids, scaled * sizeof(int32_t)));
    OCTET_RETURN_IF_ERROR(backend_.CopyToDevice(s.row_ids.data(), ids.data(),
                                                scaled * sizeof(int32_t)));
    s.scale_rows = scaled;
  }
  if (table_entries > s.table_entries) s.table_entries = table_entries;
  const MetadataLayout layout(s.tokens, s.rows, s.table_entries);
  if (s.metadata.bytes() < layout.bytes()) {
    OCTET_RETURN_IF_ERROR(Grow(backend_, s.metadata, layout.bytes()));
    grew = true;
  }
  int32_t* base = s.metadata.as<int32_t>();
  s.ids = base + layout.ids;
  s.positions = base + layout.positions;
  s.slots = base + layout.slots;
  s.token_seq = base + layout.token_seq;
  s.query_tiles = base + layout.query_tiles;
  s.logit_rows = base + layout.logit_rows;
  s.tables = base + layout.tables;
  // Captures name the buffers they were captured with.
  if (grew && !graphs_.empty()) InvalidateGraphs();
  return absl::OkStatus();
}

}  // namespace octet
