// FlashInfer's batch prefill kernels for head_dim 128: Launch
// (attention_flashinfer_launch.cuh) for each query tile.
#include "kernels/cuda/attention_flashinfer_launch.cuh"

namespace octet::cuda::flashinfer_prefill {

template cudaError_t Launch<16, 128>(Params, DType*, float*, cudaStream_t);
template cudaError_t Launch<64, 128>(Params, DType*, float*, cudaStream_t);
template cudaError_t Launch<128, 128>(Params, DType*, float*, cudaStream_t);

}  // namespace octet::cuda::flashinfer_prefill
