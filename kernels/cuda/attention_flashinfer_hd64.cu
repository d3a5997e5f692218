// FlashInfer's batch prefill kernels for head_dim 64 (the launches of
// attention_flashinfer_kernels.cuh), one instantiation per query tile.
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

template cudaError_t Launch<16, 64>(Params, DType*, float*, cudaStream_t);
template cudaError_t Launch<64, 64>(Params, DType*, float*, cudaStream_t);
template cudaError_t Launch<128, 64>(Params, DType*, float*, cudaStream_t);

}  // namespace octet::cuda::flashinfer_prefill
