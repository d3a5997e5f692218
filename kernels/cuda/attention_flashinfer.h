// FlashInfer's batch prefill attention over octet's paged KV cache: the
// CUDA backend's attention for a forward with a prompt chunk in it, where
// tensor cores pay (FA2-style kernels: mma.sync on sm_89 and sm_90). A
// decode keeps octet's own kernel (attention_plan.h): its plan depends on
// shapes only, so a captured decode graph holds it, and it stays the
// reference the backend table checks both against.
//
// FlashInfer's schedule is made on the host, once per forward, from each
// sequence's new tokens and context (Plan): which query tiles and parts of
// the keys each block takes, copied to the device with the page table in
// FlashInfer's layout (CSR: each sequence's blocks, its last block's
// fill). Each layer's call (Run) then launches its kernels, and a merge
// where the keys were split. The schedule follows TP = 1's head counts,
// so a head's keys are split the same way at every TP degree.
//
// The caches are octet's: [slots][kv_heads][head_dim] bfloat16, a slot
// block * block_size + offset, which is FlashInfer's NHD page layout.
// Causal, right-aligned (a sequence's new tokens are its last positions),
// with octet's sliding window (window - 1 keys before the token's own).
//
// Built only where FlashInfer's headers are (the pinned flashinfer-python
// wheel, scripts/fetch-flashinfer.sh) and for sm_89 / sm_90a; the caller
// asks Serves() before planning.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "kernels/backend.h"

namespace octet::cuda {

class FlashInferPrefill {
 public:
  // Whether this build holds the kernels, and the FlashInfer they came from
  // ("0.7.4"; empty when not built).
  static bool Built();
  static const char* Version();
  // Whether they serve attention of these shapes on a device of compute
  // capability `cc` (major * 10 + minor): built for it (sm_89 or sm_90a in
  // CMAKE_CUDA_ARCHITECTURES), head_dim 64 or 128, whole groups of query
  // heads. A rank's heads must also be grouped as TP = 1's (the caller's
  // check).
  static bool Serves(int64_t heads, int64_t kv_heads, int64_t head_dim, int cc);

  FlashInferPrefill();
  ~FlashInferPrefill();
  FlashInferPrefill(const FlashInferPrefill&) = delete;
  FlashInferPrefill& operator=(const FlashInferPrefill&) = delete;

  // Plans one forward: its sequences (`batch`), `block_size`, the sliding
  // window (0: none), TP = 1's head counts and head_dim. Grows its
  // workspaces where needed (waiting for `stream` first) and copies the
  // schedule up on `stream`. Not capturable. After an error nothing is
  // planned.
  absl::Status Plan(const AttentionBatch& batch, int64_t block_size,
                    int64_t sliding_window, int64_t full_heads,
                    int64_t full_kv_heads, int64_t head_dim,
                    cudaStream_t stream);
  // One layer's attention under the last plan: q rows at q + t * q_stride
  // (bfloat16), out [tokens][heads * head_dim]. FailedPrecondition when
  // nothing is planned or the shapes are not the plan's.
  absl::Status Run(const void* q, int64_t q_stride, int64_t heads,
                   int64_t kv_heads, int64_t head_dim, const void* k_cache,
                   const void* v_cache, void* out, cudaStream_t stream);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace octet::cuda
