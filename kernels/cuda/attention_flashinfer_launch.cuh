// The definition of flashinfer_prefill::Launch
// (attention_flashinfer_kernels.cuh): FlashInfer's paged batch prefill with
// octet's template arguments. Included only by the files that instantiate
// it, one per head_dim, since it pulls in all of FlashInfer's kernels.
#pragma once

#include <flashinfer/attention/prefill.cuh>

#include "kernels/cuda/attention_flashinfer_kernels.cuh"

namespace octet::cuda::flashinfer_prefill {

template <uint32_t kTileQ, uint32_t kHeadDim>
cudaError_t Launch(Params params, DType* tmp_v, float* tmp_s,
                   cudaStream_t stream) {
  return flashinfer::BatchPrefillWithPagedKVCacheDispatched<
      /*SAME_KV_STRIDES=*/true, kTileQ, kHeadDim, kHeadDim,
      flashinfer::PosEncodingMode::kNone, /*USE_FP16_QK_REDUCTION=*/false,
      flashinfer::MaskMode::kCausal, /*USE_TOKEN_HEAD_SF=*/false, Variant,
      Params>(params, tmp_v, tmp_s, /*enable_pdl=*/false, stream);
}

}  // namespace octet::cuda::flashinfer_prefill
