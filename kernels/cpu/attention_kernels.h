// Internal: the CPU attention's per-instruction-set kernel, which the driver
// (attention.cc) calls once per (sequence, KV head) of a forward. One table
// per level, each in its own translation unit built with that level's
// flags; the scalar level is AttentionRef (ops.h) itself.
//
// Why a kernel beside the reference: AttentionRef takes one (token, head) at
// a time, a dot product with a horizontal sum per key and a scalar exp per
// score; on a 512-token prompt it was ~40% of a llama-1b prefill. The
// kernel takes all the sequence's tokens of one KV head at once:
//   1. the context's keys, transposed into a [head_dim][context] scratch
//      (once, for every query head of the KV head and every token), a
//      block of keys at a time in registers;
//   2. scores for up to four query heads at a time, up to four blocks of
//      sixteen keys per step, summed over head_dim in order: no
//      horizontal sums;
//   3. exp by a branch-free polynomial (vectorized), the denominator in
//      sixteen fixed lanes, then values weighted in key order, up to four
//      blocks of sixteen of head_dim at a time for up to four heads.
// Each (token, head)'s arithmetic depends only on its own query, its
// context and the cache, never on the other tokens or heads of the call:
// results do not change with the batch or the TP degree. They differ from
// AttentionRef's in the last bits (another summation order, another exp),
// within tests/kernels/backend_table_test.cc's attention tolerance.
#pragma once

#include <cstdint>

namespace octet::cpu_internal {

// One sequence's tokens in this forward, against one KV head.
struct AttentionItem {
  const float* q = nullptr;  // the forward's queries, row t at q + t * q_stride
  int64_t q_stride = 0;
  const int32_t* rows = nullptr;  // the sequence's rows (tokens) in this call
  int64_t num_rows = 0;
  const int32_t* positions = nullptr;  // position of each row of q
  // Cache slot of each context position j in [j0, context): slots[j - j0].
  const int32_t* slots = nullptr;
  int64_t j0 = 0, context = 0;
  int64_t sliding_window = 0;      // 0: the whole context
  int64_t kv_head = 0, group = 1;  // query heads kv_head * group + [0, group)
  int64_t head_dim = 0;
  int64_t kv_width = 0;  // kv_heads * head_dim: a cache slot's floats
  const float* k_cache = nullptr;
  const float* v_cache = nullptr;
  float* out = nullptr;  // row t, head h at out + t * out_stride + h * head_dim
  int64_t out_stride = 0;
  float scale = 1.0f;  // 1 / sqrt(head_dim)
  // Scratch: kt [head_dim][kt_stride] and scores [4][kt_stride], with
  // kt_stride >= context - j0 + 16 and a multiple of 16.
  float* kt = nullptr;
  float* scores = nullptr;
  int64_t kt_stride = 0;
};

struct AttentionKernels {
  void (*item)(const AttentionItem& item);
};

#if defined(OCTET_X86)
extern const AttentionKernels kAttentionAvx2;
extern const AttentionKernels kAttentionAvx512;
#endif

}  // namespace octet::cpu_internal
