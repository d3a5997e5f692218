// LlamaModel's forward pass itself: a batch's steps through embedding, each
// layer's attention and MLP blocks, the final norm and the lm_head, then the
// logits to the host or sampled on the device. Its parts live beside it:
// weights (llama_weights.cc), projections (fp8_linear.cc), batch metadata
// (forward_batch.cc), scratch (forward_scratch.cc) and decode graphs
// (decode_graphs.cc).
#include "worker/llama_model.h"

#include <cmath>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/bf16.h"
#include "base/status_macros.h"
#include "kernels/sampling.h"

namespace octet {
namespace {

// Pointer `elems` activations past `p`.
template <typename T>
T* Offset(T* p, int64_t elems, DType dtype) {
  using Byte = std::conditional_t<std::is_const_v<T>, const char, char>;
  return reinterpret_cast<T*>(reinterpret_cast<Byte*>(p) +
                              elems * DTypeSize(dtype));
}

}  // namespace

absl::StatusOr<std::unique_ptr<KvCache>> LlamaModel::NewKvCache(
    const KvCacheOptions& options) const {
  return KvCache::Create(backend_, config_.num_layers, plan_.kv_heads,
                         config_.head_dim, options);
}

absl::Status LlamaModel::Forward(absl::Span<const SequenceStep> steps,
                                 KvCache& cache, std::vector<float>* logits,
                                 ForwardTrace* trace) {
  OCTET_RETURN_IF_ERROR(Run(steps, cache, {}, trace));
  OCTET_RETURN_IF_ERROR(AwaitCollectives());
  int64_t rows = 0;
  for (const SequenceStep& s : steps) {
    rows += s.all_logits ? static_cast<int64_t>(s.tokens.size()) : 1;
  }
  logits->resize(rows * config_.vocab_size);
  return backend_.CopyToHost(logits->data(), scratch_.logits.data(),
                             logits->size() * sizeof(float));
}

absl::Status LlamaModel::ForwardSample(absl::Span<const SequenceStep> steps,
                                       KvCache& cache,
                                       absl::Span<const SampleRow> rows,
                                       std::vector<SampledToken>* tokens) {
  int64_t logit_rows = 0;
  for (const SequenceStep& s : steps) {
    logit_rows += s.all_logits ? static_cast<int64_t>(s.tokens.size()) : 1;
  }
  for (const SampleRow& r : rows) {
    if (r.logits_row < 0 || r.logits_row >= logit_rows) {
      return absl::InvalidArgumentError(
          absl::StrCat("ForwardSample: logits row ", r.logits_row,
                       " is not one of the ", logit_rows, " rows"));
    }
  }
  OCTET_RETURN_IF_ERROR(Run(steps, cache, rows, nullptr));
  // The step's one wait on the stream: the collectives first, bounded.
  OCTET_RETURN_IF_ERROR(AwaitCollectives());
  tokens->resize(rows.size());
  if (rows.empty()) return backend_.Synchronize();
  return backend_.TakeSampled(absl::MakeSpan(*tokens));
}

absl::Status LlamaModel::ScoreRows(int64_t first_row,
                                   absl::Span<const int32_t> targets,
                                   std::vector<float>* logprobs) {
  const int64_t vocab = config_.vocab_size;
  const int64_t n = static_cast<int64_t>(targets.size());
  if (first_row < 0 || (first_row + n) * vocab * sizeof(float) >
                           scratch_.logits.bytes()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ScoreRows: rows [", first_row, ", +", n,
                     ") are not the last forward's"));
  }
  std::vector<float> host(n * vocab);
  OCTET_RETURN_IF_ERROR(backend_.CopyToHost(
      host.data(), scratch_.logits.as<float>() + first_row * vocab,
      host.size() * sizeof(float)));
  logprobs->clear();
  for (int64_t i = 0; i < n; ++i) {
    if (targets[i] < 0 || targets[i] >= vocab) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ScoreRows: token id ", targets[i], " outside [0, ", vocab, ")"));
    }
    logprobs->push_back(LogProb(
        absl::MakeConstSpan(host.data() + i * vocab, vocab), targets[i]));
  }
  return absl::OkStatus();
}

absl::Status LlamaModel::Embed(int64_t tokens) {
  const int64_t h = config_.hidden_size;
  Scratch& s = scratch_;
  // Each rank embeds the ids in its vocabulary rows (zeros elsewhere).
  OCTET_RETURN_IF_ERROR(backend_.Embedding(
      embedding_.data.data(), embedding_.dtype, embedding_.out, h,
      plan_.vocab_begin, s.ids, tokens, s.h.data()));
  return AllReduceSum(s.h.data(), tokens * h, backend_.activation_dtype());
}

absl::Status LlamaModel::AttentionBlock(int64_t l,
                                        const AttentionMetadata& meta,
                                        const RowGroups& seqs, KvCache& cache,
                                        ForwardTrace* trace) {
  const ModelConfig& c = config_;
  const Layer& layer = layers_[l];
  Scratch& s = scratch_;
  const DType act = backend_.activation_dtype();
  const int64_t tokens = meta.num_tokens, h = c.hidden_size, hd = c.head_dim;
  const int64_t heads = plan_.heads, kv_heads = plan_.kv_heads;
  const int64_t q_width = heads * hd, kv_width = kv_heads * hd;
  const int64_t qkv_width = q_width + 2 * kv_width;
  const float eps = static_cast<float>(c.rms_norm_eps);
  OCTET_ASSIGN_OR_RETURN(const Input x,
                         Produce(layer.qkv,
                                 {FusedInput::Op::kRmsNorm, s.h.data(),
                                  layer.input_norm.as<float>(), eps},
                                 tokens, h, s.x.data()));
  OCTET_RETURN_IF_ERROR(
      Linear(layer.qkv, x, tokens, seqs, false, s.qkv.data(), trace));
  void* q = s.qkv.data();
  void* k = Offset(q, q_width, act);
  if (c.qkv_bias) {
    OCTET_RETURN_IF_ERROR(
        backend_.AddBias(q, layer.qkv_bias.as<float>(), tokens, qkv_width));
  }
  if (c.qk_norm) {
    OCTET_RETURN_IF_ERROR(backend_.RmsNormHeads(q, tokens, heads, hd, qkv_width,
                                                layer.q_norm.as<float>(), eps));
    OCTET_RETURN_IF_ERROR(backend_.RmsNormHeads(
        k, tokens, kv_heads, hd, qkv_width, layer.k_norm.as<float>(), eps));
  }
  OCTET_RETURN_IF_ERROR(backend_.RopeWriteKv(q, heads, kv_heads, hd, qkv_width,
                                             inv_freq_.as<float>(), meta,
                                             cache.k(l), cache.v(l)));
  OCTET_RETURN_IF_ERROR(backend_.Attention(q, qkv_width, heads, kv_heads, hd,
                                           meta, cache.k(l), cache.v(l),
                                           s.attn.data()));
  return RowParallelLinear(layer.o, o_blocks_, layer.o_scale_shared,
                           Input{.x = s.attn.data()}, tokens, seqs, s.h.data(),
                           trace);
}

absl::Status LlamaModel::MlpBlock(const Layer& layer, int64_t tokens,
                                  const RowGroups& seqs, ForwardTrace* trace) {
  const int64_t h = config_.hidden_size;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  Scratch& s = scratch_;
  OCTET_ASSIGN_OR_RETURN(const Input x,
                         Produce(layer.gate_up,
                                 {FusedInput::Op::kRmsNorm, s.h.data(),
                                  layer.post_norm.as<float>(), eps},
                                 tokens, h, s.x.data()));
  OCTET_RETURN_IF_ERROR(
      Linear(layer.gate_up, x, tokens, seqs, false, s.gate_up.data(), trace));
  OCTET_ASSIGN_OR_RETURN(
      const Input act,
      Produce(layer.down, {FusedInput::Op::kSiluMul, s.gate_up.data()}, tokens,
              plan_.intermediate, s.act.data()));
  return RowParallelLinear(layer.down, down_blocks_, layer.down_scale_shared,
                           act, tokens, seqs, s.h.data(), trace);
}

absl::Status LlamaModel::RecordLayerRms(int64_t tokens, ForwardTrace* trace) {
  const DType act = backend_.activation_dtype();
  const int64_t h = config_.hidden_size;
  std::vector<uint8_t> host(tokens * h * DTypeSize(act));
  OCTET_RETURN_IF_ERROR(AwaitCollectives());
  OCTET_RETURN_IF_ERROR(
      backend_.CopyToHost(host.data(), scratch_.h.data(), host.size()));
  double sum = 0;
  for (int64_t i = 0; i < tokens * h; ++i) {
    const float v =
        act == DType::kF32
            ? reinterpret_cast<const float*>(host.data())[i]
            : Bf16ToFloat(reinterpret_cast<const Bf16*>(host.data())[i]);
    sum += double(v) * v;
  }
  trace->layer_rms.push_back(std::sqrt(sum / (tokens * h)));
  return absl::OkStatus();
}

absl::Status LlamaModel::Logits(int64_t tokens, int64_t rows) {
  const ModelConfig& c = config_;
  const int64_t h = c.hidden_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  Scratch& s = scratch_;
  OCTET_RETURN_IF_ERROR(backend_.RmsNorm(s.h.data(), final_norm_.as<float>(),
                                         tokens, h, eps, s.x.data()));
  OCTET_RETURN_IF_ERROR(backend_.GatherRows(s.x.data(), h, s.logit_rows, rows,
                                            s.last_hidden.data()));
  if (plan_.size == 1) return LmHead(rows, s.logits.data());
  // Vocabulary-parallel lm_head: each rank's [seqs][vocab / size] logits,
  // gathered as [size][seqs][vocab / size], laid out as [seqs][vocab].
  OCTET_RETURN_IF_ERROR(LmHead(rows, s.local_logits.data()));
  const int64_t part = rows * plan_.vocab;
  OCTET_RETURN_IF_ERROR(options_.comm->AllGather(s.local_logits.as<float>(),
                                                 part, s.gathered.as<float>()));
  return backend_.InterleaveParts(s.gathered.as<float>(), plan_.size, rows,
                                  plan_.vocab, s.logits.as<float>());
}

absl::Status LlamaModel::LmHead(int64_t num_seqs, void* logits) {
  const Scratch& s = scratch_;
  if (lm_head_.dtype != DType::kE4m3) {
    return backend_.Gemm(s.last_hidden.data(), num_seqs, lm_head_, logits,
                         DType::kF32);
  }
  // One activation scale per sequence, as for the layers' inputs; the input
  // is whole on every rank (column-parallel), so no absmax all-reduce. The
  // CPU's activation dtype is binary32: the logits come out in it.
  const RowGroups seqs{num_seqs,
                       num_seqs == 1 ? nullptr : s.row_ids.as<int32_t>()};
  return Linear(lm_head_, Input{.x = s.last_hidden.data()}, num_seqs, seqs,
                false, logits, nullptr);
}

absl::Status LlamaModel::Run(absl::Span<const SequenceStep> steps,
                             KvCache& cache, absl::Span<const SampleRow> rows,
                             ForwardTrace* trace) {
  OCTET_ASSIGN_OR_RETURN(HostBatch batch, BuildBatch(steps, cache));
  int64_t bucket = GraphBucket(steps, trace);
  // Every captured decode has tables as wide as the longest context, so
  // that one capture serves any lengths.
  const int64_t width = cache.BlocksFor(config_.max_position_embeddings);
  if (bucket > 0 && batch.max_blocks > width) bucket = 0;  // a longer table
  if (bucket > 0) {
    if (graph_cache_id_ != cache.id()) {
      if (!graphs_.empty()) InvalidateGraphs();
      graph_cache_id_ = cache.id();
    }
    // Room for the largest bucket at once, so that the buckets' captures
    // share buffers that do not move.
    const int64_t most =
        DecodeGraphBucket(options_.graph_max_batch, options_.graph_max_batch);
    OCTET_RETURN_IF_ERROR(Reserve(most, most, most * width));
    PadBatch(bucket, width, batch);
  }
  OCTET_RETURN_IF_ERROR(UploadBatch(batch));
  // A staging that fails must not skip the forward: with several ranks the
  // others are already in its collectives. The forward runs without
  // sampling, then the staging's error is the step's.
  const absl::StatusOr<GraphSampling> staged = StageSampling(rows, bucket);
  const GraphSampling sampling = staged.ok() ? *staged : GraphSampling::kNone;
  AttentionMetadata meta = BatchMetadata(batch, cache);
  // The same for a host plan of attention (eager forwards only): one that
  // fails leaves the backend's own plan for the forward, then its error is
  // the step's.
  absl::StatusOr<bool> planned = false;
  if (bucket == 0) planned = PlanAttention(batch, meta);
  meta.host_planned = planned.ok() && *planned;
  const absl::Status computed =
      bucket > 0
          ? ComputeWithGraph({bucket, sampling}, meta, cache)
          : ComputeAndSample(meta, batch.num_seqs(), batch.num_logit_rows(),
                             sampling, cache, trace);
  if (!computed.ok()) return computed;
  return staged.ok() ? planned.status() : staged.status();
}

absl::StatusOr<LlamaModel::GraphSampling> LlamaModel::StageSampling(
    absl::Span<const SampleRow> rows, int64_t bucket) {
  if (rows.empty()) return GraphSampling::kNone;
  // A graph's rows are padded to its bucket, with room for the largest, so
  // that the buffers its capture names stay put.
  const SampleLayout layout{
      .padded_rows = bucket,
      .reserve_rows = bucket == 0 ? 0
                                  : DecodeGraphBucket(options_.graph_max_batch,
                                                      options_.graph_max_batch),
  };
  OCTET_ASSIGN_OR_RETURN(
      const SampleStaging staged,
      backend_.StageSample(config_.vocab_size, rows, layout));
  if (staged.moved && !graphs_.empty()) InvalidateGraphs();
  return staged.sorts ? GraphSampling::kDraws : GraphSampling::kGreedy;
}

absl::Status LlamaModel::ComputeAndSample(const AttentionMetadata& meta,
                                          int64_t num_seqs, int64_t logit_rows,
                                          GraphSampling sampling,
                                          KvCache& cache, ForwardTrace* trace) {
  OCTET_RETURN_IF_ERROR(Compute(meta, num_seqs, logit_rows, cache, trace));
  if (sampling == GraphSampling::kNone) return absl::OkStatus();
  return backend_.SampleStaged(scratch_.logits.as<float>(), config_.vocab_size);
}

absl::Status LlamaModel::Compute(const AttentionMetadata& meta,
                                 int64_t num_seqs, int64_t logit_rows,
                                 KvCache& cache, ForwardTrace* trace) {
  const int64_t tokens = meta.num_tokens;
  // The groups of the activations' dynamic FP8 scales: each token
  // (ActivationScales::kToken, or a per-token checkpoint), else each
  // sequence's rows.
  const RowGroups seqs =
      per_token_scales_
          ? RowGroups{tokens,
                      tokens == 1 ? nullptr : scratch_.row_ids.as<int32_t>()}
          : RowGroups{num_seqs, meta.token_seq};
  OCTET_RETURN_IF_ERROR(Embed(tokens));
  if (trace != nullptr) {
    trace->layer_rms.clear();
    trace->codes.clear();
    trace->scales.clear();
  }
  for (int64_t l = 0; l < config_.num_layers; ++l) {
    OCTET_RETURN_IF_ERROR(AttentionBlock(l, meta, seqs, cache, trace));
    OCTET_RETURN_IF_ERROR(MlpBlock(layers_[l], tokens, seqs, trace));
    if (trace != nullptr) {
      OCTET_RETURN_IF_ERROR(RecordLayerRms(tokens, trace));
    }
  }
  return Logits(tokens, logit_rows);
}

}  // namespace octet
