// What FlashInfer's batch prefill kernels read (Params) and the launches
// octet builds of them: bfloat16, causal, octet's sliding window, no
// position encoding (RoPE is applied before the keys are cached), query
// tiles of 16, 64 or 128 rows as FlashInfer's planner picks, head_dim 64
// or 128. Shared by attention_flashinfer.cu, which plans and calls Launch,
// and attention_flashinfer_hd{64,128}.cu, which instantiate it from its
// definition (attention_flashinfer_launch.cuh), one file per head_dim so
// that two cores compile them side by side.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <flashinfer/attention/variants.cuh>
#include <flashinfer/fastdiv.cuh>
#include <flashinfer/page.cuh>

namespace octet::cuda::flashinfer_prefill {

using DType = __nv_bfloat16;
using IdType = int32_t;

// The fields FlashInfer's paged prefill kernel and DefaultAttention read,
// named as FlashInfer's own generated parameters are.
struct Params {
  using DTypeQ = DType;
  using DTypeKV = DType;
  using DTypeO = DType;
  using IdType = flashinfer_prefill::IdType;

  DTypeQ* q;
  flashinfer::paged_kv_t<DTypeKV, IdType> paged_kv;
  IdType* q_indptr;
  DTypeO* o;
  float* lse;
  flashinfer::uint_fastdiv group_size;

  // FlashInfer's optional inputs, all absent here.
  uint8_t* maybe_custom_mask;
  float* maybe_alibi_slopes;
  uint8_t* maybe_k_cache_sf;
  uint8_t* maybe_v_cache_sf;
  double logits_soft_cap;
  double sm_scale;
  double rope_rcp_scale;
  double rope_rcp_theta;

  uint32_t num_qo_heads;
  IdType q_stride_n;
  IdType q_stride_h;
  uint32_t k_sf_stride_page, k_sf_stride_n, k_sf_stride_h;
  uint32_t v_sf_stride_page, v_sf_stride_n, v_sf_stride_h;
  int32_t window_left;  // keys before the token's own; -1: all

  // The schedule (FlashInfer's PrefillPlan, in its int workspace).
  IdType* request_indices;
  IdType* qo_tile_indices;
  IdType* kv_tile_indices;
  IdType* merge_indptr;
  IdType* o_indptr;
  bool* block_valid_mask;
  IdType* kv_chunk_size_ptr;
  uint32_t max_total_num_rows;
  uint32_t* total_num_rows;
  uint32_t padded_batch_size;
  bool partition_kv;

  __host__ __device__ __forceinline__ uint32_t get_qo_len(uint32_t b) const {
    return q_indptr[b + 1] - q_indptr[b];
  }
  __host__ __device__ __forceinline__ uint32_t get_kv_len(uint32_t b) const {
    return paged_kv.get_length(b);
  }
};

// The sliding window always on: with window_left -1 its mask keeps every
// key, so one instantiation serves models with and without a window.
using Variant = flashinfer::DefaultAttention</*use_custom_mask=*/false,
                                             /*use_sliding_window=*/true,
                                             /*use_logits_soft_cap=*/false,
                                             /*use_alibi=*/false>;

// FlashInfer's BatchPrefillWithPagedKVCacheDispatched for query tiles of
// kTileQ rows and kHeadDim: tmp_v / tmp_s null, or its split keys' partial
// outputs (then it merges them). Instantiated for kTileQ 16, 64, 128 and
// kHeadDim 64, 128. FlashInfer's host checks throw; the caller catches.
template <uint32_t kTileQ, uint32_t kHeadDim>
cudaError_t Launch(Params params, DType* tmp_v, float* tmp_s,
                   cudaStream_t stream);

}  // namespace octet::cuda::flashinfer_prefill
