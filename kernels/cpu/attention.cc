// Attention's driver (attention.h): the forward's tokens grouped by
// sequence, each sequence's rows cut into pieces when there are too few
// (sequence, KV head) pairs to keep the threads busy, one work item per
// (piece, KV head), items shared out over OpenMP threads, each thread with
// its own scratch.
#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/attention_kernels.h"
#include "kernels/cpu/ops.h"

namespace octet::cpu {
namespace {

using cpu_internal::AttentionItem;
using cpu_internal::AttentionKernels;

const AttentionKernels* KernelsFor(CpuIsa isa) {
#if defined(OCTET_X86)
  if (isa == CpuIsa::kAvx512) return &cpu_internal::kAttentionAvx512;
  if (isa == CpuIsa::kAvx2) return &cpu_internal::kAttentionAvx2;
#endif
  (void)isa;
  return nullptr;
}

// The first context position token t attends.
int64_t FirstPosition(const AttentionMetadata& meta, int64_t t) {
  const int64_t pos = meta.positions[t];
  return meta.sliding_window > 0
             ? std::max<int64_t>(0, pos - meta.sliding_window + 1)
             : 0;
}

// Consecutive rows of one sequence and the context they attend, [j0,
// context), with the cache slot of each of those positions.
struct Piece {
  std::vector<int32_t> rows;
  int64_t j0 = 0, context = 0;
  std::vector<int32_t> slots;
};

// The forward's rows by sequence (in first-appearance order), each cut into
// `pieces` runs of about equal length.
std::vector<Piece> Pieces(const AttentionMetadata& meta, int64_t pieces) {
  std::vector<std::vector<int32_t>> by_seq;
  std::vector<int64_t> index;  // token_seq -> position in by_seq, or -1
  for (int64_t t = 0; t < meta.num_tokens; ++t) {
    const int32_t s = meta.token_seq[t];
    if (s >= static_cast<int64_t>(index.size())) index.resize(s + 1, -1);
    if (index[s] < 0) {
      index[s] = static_cast<int64_t>(by_seq.size());
      by_seq.emplace_back();
    }
    by_seq[index[s]].push_back(static_cast<int32_t>(t));
  }
  std::vector<Piece> out;
  for (const std::vector<int32_t>& rows : by_seq) {
    const int64_t n = static_cast<int64_t>(rows.size());
    const int64_t cut = std::min(n, pieces);
    for (int64_t p = 0; p < cut; ++p) {
      Piece piece;
      piece.rows.assign(rows.begin() + p * n / cut,
                        rows.begin() + (p + 1) * n / cut);
      piece.j0 = FirstPosition(meta, piece.rows[0]);
      for (int32_t t : piece.rows) {
        piece.j0 = std::min(piece.j0, FirstPosition(meta, t));
        piece.context = std::max<int64_t>(piece.context, meta.positions[t] + 1);
      }
      const int32_t* table =
          meta.block_tables + meta.token_seq[piece.rows[0]] * meta.max_blocks;
      for (int64_t j = piece.j0; j < piece.context; ++j) {
        piece.slots.push_back(static_cast<int32_t>(
            static_cast<int64_t>(table[j / meta.block_size]) * meta.block_size +
            j % meta.block_size));
      }
      out.push_back(std::move(piece));
    }
  }
  return out;
}

// Scratch columns for a context of n positions: room for a last block of
// sixteen keys starting anywhere in it.
int64_t KtStride(int64_t n) { return (n + 16 + 15) / 16 * 16; }

}  // namespace

absl::Status Attention(const float* q, int64_t q_stride, int64_t heads,
                       int64_t kv_heads, int64_t head_dim,
                       const AttentionMetadata& meta, const float* k_cache,
                       const float* v_cache, float* out,
                       const CpuKernelOptions& options) {
  absl::StatusOr<CpuIsa> isa =
      cpu_internal::CheckOptions(options, "cpu::Attention");
  if (!isa.ok()) return isa.status();
  const int threads = cpu_internal::ThreadCount(options);
  const AttentionKernels* kernels = KernelsFor(*isa);
  if (kernels == nullptr) {
    AttentionRef(q, q_stride, heads, kv_heads, head_dim, meta, k_cache, v_cache,
                 out, threads);
    return absl::OkStatus();
  }
  // At least two items per thread: a long prompt's rows are cut when the
  // model has few KV heads.
  const int64_t pieces =
      std::max<int64_t>(1, (2 * threads + kv_heads - 1) / kv_heads);
  const std::vector<Piece> work = Pieces(meta, pieces);
  int64_t max_context = 0;
  for (const Piece& p : work) {
    max_context = std::max(max_context, p.context - p.j0);
  }
  const int64_t kt_stride = KtStride(max_context);
  const int64_t items = static_cast<int64_t>(work.size()) * kv_heads;
#pragma omp parallel num_threads(threads) if (threads > 1 && items > 1)
  {
    std::vector<float> kt(head_dim * kt_stride), scores(4 * kt_stride);
#pragma omp for schedule(dynamic)
    for (int64_t i = 0; i < items; ++i) {
      const Piece& p = work[i / kv_heads];
      AttentionItem it;
      it.q = q;
      it.q_stride = q_stride;
      it.rows = p.rows.data();
      it.num_rows = static_cast<int64_t>(p.rows.size());
      it.positions = meta.positions;
      it.slots = p.slots.data();
      it.j0 = p.j0;
      it.context = p.context;
      it.sliding_window = meta.sliding_window;
      it.kv_head = i % kv_heads;
      it.group = heads / kv_heads;
      it.head_dim = head_dim;
      it.kv_width = kv_heads * head_dim;
      it.k_cache = k_cache;
      it.v_cache = v_cache;
      it.out = out;
      it.out_stride = heads * head_dim;
      it.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
      it.kt = kt.data();
      it.scores = scores.data();
      it.kt_stride = KtStride(p.context - p.j0);
      kernels->item(it);
    }
  }
  return absl::OkStatus();
}

}  // namespace octet::cpu
