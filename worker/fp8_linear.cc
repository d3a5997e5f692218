// LlamaModel's projections at forward time: y = x·Wᵀ unquantized or in FP8
// (the input quantized with a dynamic scale per sequence or token, its
// absmax all-reduced across the ranks for row-parallel inputs, or the
// checkpoint's static scale), and the row-parallel sum: block sums in
// binary32, all-reduced in TreeSum order, scaled and rounded once
// (docs/design.md, "TP invariance").
#include "absl/status/status.h"
#include "base/status_macros.h"
#include "worker/llama_model.h"

namespace octet {
absl::Status LlamaModel::AwaitCollectives() {
  if (plan_.size == 1) return absl::OkStatus();
  return options_.comm->Await();
}

absl::Status LlamaModel::AllReduceSum(void* x, int64_t count, DType dtype) {
  if (plan_.size == 1) return absl::OkStatus();
  // In the backend's memory (the communicator's: host for CPU ranks, the
  // GPU's for staged or NCCL ones).
  if (dtype == DType::kBf16) {
    return options_.comm->AllReduceSumBf16(x, count);
  }
  return options_.comm->AllReduceSum(static_cast<float*>(x), count);
}

absl::StatusOr<LlamaModel::Input> LlamaModel::Produce(
    const LinearWeight& w, const FusedInput& producer, int64_t rows,
    int64_t cols, void* dst) {
  if (options_.fuse_input_quantization && backend_.fuses_input_quantization() &&
      w.dtype == DType::kE4m3 && w.input_scale.data() == nullptr) {
    return Input{.fused = producer};
  }
  if (producer.op == FusedInput::Op::kRmsNorm) {
    OCTET_RETURN_IF_ERROR(backend_.RmsNorm(producer.x, producer.weight, rows,
                                           cols, producer.eps, dst));
  } else {
    OCTET_RETURN_IF_ERROR(backend_.SiluMul(producer.x, rows, cols, dst));
  }
  return Input{.x = dst};
}

absl::Status LlamaModel::Linear(const LinearWeight& w, const Input& x,
                                int64_t rows, const RowGroups& seqs,
                                bool row_parallel, void* y,
                                ForwardTrace* trace) {
  if (w.dtype != DType::kE4m3) {
    return backend_.Gemm(x.x, rows, w, y, backend_.activation_dtype());
  }
  RowGroups groups;
  const float* scale;
  OCTET_RETURN_IF_ERROR(
      QuantizeInput(w, x, rows, seqs, row_parallel, &groups, &scale, trace));
  return backend_.GemmE4m3(scratch_.codes.as<uint8_t>(), scale, groups, rows, w,
                           y);
}

absl::Status LlamaModel::RowParallelLinear(const LinearWeight& w,
                                           const KBlocks& blocks,
                                           bool scale_shared, const Input& x,
                                           int64_t rows, const RowGroups& seqs,
                                           void* h, ForwardTrace* trace) {
  const int64_t count = rows * w.out;
  const DType act = backend_.activation_dtype();
  void* proj = scratch_.proj.data();
  if (blocks.local == 0) {  // no block sums: partials in the activation dtype
    OCTET_RETURN_IF_ERROR(Linear(w, x, rows, seqs, true, proj, trace));
    OCTET_RETURN_IF_ERROR(AllReduceSum(proj, count, act));
    return backend_.Add(h, proj, count);
  }
  // Block sums in binary32 (in the projection's scratch when that is
  // binary32), added across the ranks in TreeSum order by the
  // communicator, then scaled, rounded once and added into h, one kernel.
  float* sums = act == DType::kF32 ? static_cast<float*>(proj)
                                   : scratch_.sums.as<float>();
  const void* in = x.x;
  RowGroups groups;
  const float* scale = nullptr;  // FP8: the activation scales
  if (w.dtype == DType::kE4m3) {
    OCTET_RETURN_IF_ERROR(
        QuantizeInput(w, x, rows, seqs, true, &groups, &scale, trace));
    in = scratch_.codes.data();
  }
  // FP8 scales once after the sum when every rank scales the same way (as
  // one rank would); otherwise each rank scales its own part first.
  const bool act_scale_shared =
      plan_.size == 1 || sync_absmax_ || w.input_scale.data() != nullptr;
  const bool scale_first =
      scale != nullptr && !(scale_shared && act_scale_shared);
  if (plan_.size == 1 && !scale_first) {  // nothing between sums and scaling
    return backend_.GemmScaledBlockSums(in, rows, w, blocks.local, scale,
                                        groups, sums, h, act, RowsInto::kAdd);
  }
  OCTET_RETURN_IF_ERROR(
      backend_.GemmBlockSums(in, rows, w, blocks.local, sums));
  if (scale_first) {
    OCTET_RETURN_IF_ERROR(backend_.ScaleRows(sums, rows, scale, groups, w, sums,
                                             DType::kF32, RowsInto::kWrite));
    scale = nullptr;
  }
  OCTET_RETURN_IF_ERROR(AllReduceSum(sums, count, DType::kF32));
  return backend_.ScaleRows(sums, rows, scale, groups, w, h, act,
                            RowsInto::kAdd);
}

absl::Status LlamaModel::QuantizeInput(const LinearWeight& w, const Input& x,
                                       int64_t rows, const RowGroups& seqs,
                                       bool row_parallel, RowGroups* groups,
                                       const float** scale,
                                       ForwardTrace* trace) {
  const int64_t count = rows * w.in;
  uint8_t* codes = scratch_.codes.as<uint8_t>();
  if (w.input_scale.data() != nullptr) {
    *groups = RowGroups{};  // one static scale for every row
    *scale = w.input_scale.as<float>();
    OCTET_RETURN_IF_ERROR(backend_.QuantizeStatic(x.x, count, *scale, codes));
  } else {
    // One dynamic scale per token (the default) or per sequence's rows, as
    // `seqs` groups them (ActivationScales; docs/design.md, FP8 numerics):
    // either way batching does not change a sequence's codes, and per token
    // neither does chunking. A single rank's input is whole: its absmax
    // is the global one. Tensor parallelism all-reduces it here for
    // row-parallel layers.
    *groups = seqs;
    float* absmax = scratch_.absmax.as<float>();
    float* dynamic = scratch_.act_scale.as<float>();
    *scale = dynamic;
    const bool all_reduce = row_parallel && plan_.size > 1 && sync_absmax_;
    const FusedInput* producer = x.fused ? &*x.fused : nullptr;
    if (!all_reduce) {
      // Nothing between the absmax and the codes: one call (on CUDA one
      // launch).
      OCTET_RETURN_IF_ERROR(backend_.QuantizeGroups(
          x.x, producer, rows, w.in, seqs, absmax, codes, dynamic));
    } else {
      OCTET_RETURN_IF_ERROR(
          producer ? backend_.FusedAbsMax(*producer, rows, w.in, seqs, absmax)
                   : backend_.AbsMax(x.x, rows, w.in, seqs, absmax));
      if (all_reduce) {
        OCTET_RETURN_IF_ERROR(options_.comm->AllReduceMax(absmax, seqs.count));
      }
      OCTET_RETURN_IF_ERROR(
          producer ? backend_.FusedQuantize(*producer, rows, w.in, seqs, absmax,
                                            codes, dynamic)
                   : backend_.Quantize(x.x, rows, w.in, seqs, absmax, codes,
                                       dynamic));
    }
  }
  if (trace != nullptr && trace->record_codes) {
    OCTET_RETURN_IF_ERROR(AwaitCollectives());
    trace->codes.emplace_back(count);
    OCTET_RETURN_IF_ERROR(
        backend_.CopyToHost(trace->codes.back().data(), codes, count));
    trace->scales.emplace_back(groups->count);
    OCTET_RETURN_IF_ERROR(backend_.CopyToHost(
        trace->scales.back().data(), *scale, groups->count * sizeof(float)));
  }
  return absl::OkStatus();
}

}  // namespace octet
