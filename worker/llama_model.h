// The Llama-family forward pass (Llama 2/3, Mistral, Qwen2, Qwen3) on one
// backend, written once for every backend (kernels/backend.h).
//
// Per layer: x = RMSNorm(h); qkv = x·Wqkvᵀ (+ the q/k/v biases, Qwen2);
// RMSNorm on each q and k head (Qwen3); RoPE on q and k; k, v into the
// paged cache; attention over the cache; h += attn·Woᵀ; x = RMSNorm(h);
// h += (silu(x·Wgateᵀ) * x·Wupᵀ)·Wdownᵀ. Then RMSNorm and the lm_head on the
// last new token of each sequence. q/k/v and gate/up are fused into one GEMM
// each; embeddings, lm_head, norms, attention and the KV cache stay
// unquantized (docs/design.md). With LinearMethod::kFp8 every projection
// quantizes its input with a dynamic per-tensor scale, one per sequence in
// the batch (or the checkpoint's static input_scale), and runs the e4m3 GEMM.
//
// One forward serves any mix of sequences: prompt chunks (prefill) and
// single tokens (decode), each with its own position and block table.
// With tensor parallelism every rank of the group calls Forward with the
// same steps; each holds its slice of the weights and of the KV heads, and
// every rank returns the whole logits. On backends with block sums (the CPU
// and CUDA) the row-parallel layers (o_proj, down_proj) cut K into a fixed
// number of blocks at every TP degree, TP = 1 included, sum them in
// binary32, and add the blocks' and the ranks' sums in one fixed order
// (kernels/tree_sum.h) before one rounding, so that the logits do not
// change with the TP degree: bit for bit unquantized and in FP8 when the
// ranks share weight scales (global scales, FP8 checkpoints); on CUDA also
// when cuBLASLt runs TP = 1's algorithms on the slices (docs/design.md).
// Not thread-safe: one worker thread drives a model and its cache.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/backend.h"
#include "model/checkpoint.h"
#include "parallel/communicator.h"
#include "worker/gemm_choices.h"
#include "worker/kv_cache.h"
#include "worker/linear_loader.h"
#include "worker/shard_plan.h"

namespace octet {

// The rows one dynamic FP8 activation scale covers
// (docs/decisions/2026-12-07-fp8-activation-scales-per-token.md).
enum class ActivationScales {
  // Each token its own scale: a token's codes depend on its own values
  // alone, so neither its batch nor where its prompt is cut into chunks
  // changes how they are scaled.
  kToken,
  // One scale per sequence's rows in one forward call (octet's rule before
  // chunked prefill; nearest to a checkpoint's dynamic per-tensor scheme):
  // a prompt must then run in one call for its codes not to depend on the
  // load.
  kSequence,
};

struct ModelOptions {
  LinearMethod method = LinearMethod::kNone;
  // FP8 dynamic activation scales; a checkpoint's per-token scheme is per
  // token either way, a static one has its input_scale.
  ActivationScales activation_scales = ActivationScales::kToken;
  CpuKernelOptions cpu;  // load-time quantization on the host
  // Tensor parallelism: this rank's group, which must outlive the model
  // (null: one rank). The model holds the rank's slice (worker/shard_plan.h)
  // and runs the group's collectives inside Forward.
  Communicator* comm = nullptr;
  // FP8 from float weights: quantize each rank's slice with the scale of the
  // whole weight (all-reduced absmax, as TP=1 would) instead of its own.
  bool global_weight_scale = false;
  // Decode graphs: a forward whose steps are all single tokens, with at most
  // this many sequences, runs as work the backend captured (CUDA graphs)
  // when the backend can capture and, with several ranks, the communicator's
  // collectives are stream work (Communicator::capturable: NCCL); 0: never.
  // See DecodeGraphBucket.
  int64_t graph_max_batch = 64;
  // FP8 inputs made by RMSNorm (qkv, gate_up) and SiLU·up (down_proj) are
  // quantized where they are made, never written in the activation dtype
  // (Backend::FusedQuantize), on backends where that saves work
  // (Backend::fuses_input_quantization); the same bits either way. Off only
  // to measure or check it.
  bool fuse_input_quantization = true;
  // Row-parallel FP8 inputs (o_proj, down_proj) all-reduce their absmax so
  // that every rank uses the same scale. Off only to measure its cost.
  bool sync_activation_absmax = true;
  // FP8 lm_head (with method kFp8): the vocabulary projection quantized at
  // load with one scale per vocabulary row, its input per sequence, as the
  // layers' inputs are. Off by default: the unquantized head decides the
  // tokens. CPU backend only (binary32 logits from the e4m3 GEMM).
  bool quantize_lm_head = false;
  // FP8 GEMMs with per-sequence scales, on a backend that runs them more
  // than one way (CUDA): each layer shape's way per row bucket, measured
  // and chosen alike on every rank, read from and kept in
  // gemm_choices.file (worker/gemm_choices.h). Set up at the end of Load.
  GemmChoiceOptions gemm_choices;
  // Called on the loading thread after each layer (layers done, layers in
  // all): load progress for a person watching.
  std::function<void(int64_t, int64_t)> on_layer_loaded;
};

// One sequence's share of a forward pass.
struct SequenceStep {
  std::vector<int32_t> tokens;  // new tokens: a prompt (chunk) or one token
  int64_t start_position = 0;   // tokens of this sequence already cached
  // Blocks covering start_position + tokens.size() tokens (KvCache::Reserve).
  const std::vector<int32_t>* block_table = nullptr;
  // The logits of every new token, not only the last: what scoring a text
  // (prompt log-probabilities, perplexity) needs.
  bool all_logits = false;
};

// What a forward pass leaves for inspection (tests, tools). Costly: every
// recorded value is copied to the host.
struct ForwardTrace {
  // RMS of the residual stream after each layer, over all tokens.
  std::vector<double> layer_rms;
  // FP8 only, when record_codes: the activation codes and scales of each
  // quantized projection input, in call order (per layer: qkv, o, gate_up,
  // down); scales[call][sequence] (one entry for a static scale).
  bool record_codes = false;
  std::vector<std::vector<uint8_t>> codes;
  std::vector<std::vector<float>> scales;
};

// The batch size a decode of `batch` sequences is padded to for its graph:
// 1, 2, 4, 8, then multiples of 8, at most `max_batch`; 0 when `batch` is
// above `max_batch` (no graph). Few buckets keep the captures few; padding
// costs at most 7 rows of work.
int64_t DecodeGraphBucket(int64_t batch, int64_t max_batch);

// The K blocks G of a row-parallel layer with input width `k`, the same at
// every TP degree (TP = 1 included): each block's dot products are summed
// in binary32, then the blocks and the ranks in TreeSum order, so TP degree
// T gets TP = 1's bits when G / T is a power of two. G is the model's odd
// block factor (1 for a model that splits in two; for SmolLM2's 9 heads,
// 3) times the largest power of two up to 8 that keeps K divisible, then
// halved while blocks are not a multiple of `min_width` elements wide, as
// long as every degree the model allows that was exact stays exact.
// SmolLM2: o_proj (K = 576) 24, down (1536) 24; with min_width 16, 12 and
// 24.
int64_t GlobalBlocks(const ModelConfig& c, int64_t k, int64_t min_width = 1);

// The block width CUDA asks of GlobalBlocks: cuBLASLt's FP8 GEMMs take K
// (and row strides) only in multiples of 16 codes; a narrower block sends
// the layer to octet's slow fallback kernel. The CPU asks for none (1):
// changing a CPU model's blocks changes its sums' order, and FP8 with
// per-token scales amplifies that (SmolLM2's fp8-channel-token perplexity
// moves by up to 2% with the o_proj block count; docs/measurements.md).
inline constexpr int64_t kCublasLtBlockWidth = 16;

// What the decode graphs have done (tests, benchmarks).
// A graph is a bucket and what its decodes sample (nothing, argmax only,
// or draws too).
struct GraphStats {
  int64_t warmups = 0;        // a graph's first decode: run as usual
  int64_t captures = 0;       // its second: captured
  int64_t replays = 0;        // decodes run by replaying a capture
  int64_t invalidations = 0;  // all captures dropped (scratch grew, new cache)
};

class LlamaModel {
 public:
  static absl::StatusOr<std::unique_ptr<LlamaModel>> Load(
      const Checkpoint& ckpt, Backend& backend, const ModelOptions& options);

  const ModelConfig& config() const { return config_; }

  // A KV cache sized for this model on its backend.
  absl::StatusOr<std::unique_ptr<KvCache>> NewKvCache(
      const KvCacheOptions& options) const;

  // Runs the steps through the model, writing their keys and values into
  // `cache`, and returns in `logits` the binary32 logits of each step's last
  // token, or of all its tokens with all_logits, in step order
  // ([rows][vocab]). A row's logits do not depend on which other rows come
  // out. Token ids must be below vocab_size and positions
  // below max_position_embeddings (InvalidArgument otherwise).
  absl::Status Forward(absl::Span<const SequenceStep> steps, KvCache& cache,
                       std::vector<float>* logits,
                       ForwardTrace* trace = nullptr);

  // As Forward, but chooses tokens on the device (Backend::StageSample,
  // SampleStaged, TakeSampled, with the rules of kernels/sampling.h) and
  // brings back only those: one per row of `rows`, whose logits_row is a
  // logit row (one per step, in step order, or each token's of an
  // all_logits step). No rows: the forward alone (a rank that does not
  // sample). A decode through a graph samples inside it: the rows go up
  // before the replay, and the tokens are the step's one wait.
  absl::Status ForwardSample(absl::Span<const SequenceStep> steps,
                             KvCache& cache, absl::Span<const SampleRow> rows,
                             std::vector<SampledToken>* tokens);

  // After ForwardSample: the log-probability (LogProb, kernels/sampling.h)
  // of targets[i] under logit row first_row + i, for each i. The rows come
  // to the host: a scored prompt's cost.
  absl::Status ScoreRows(int64_t first_row, absl::Span<const int32_t> targets,
                         std::vector<float>* logprobs);

  const GraphStats& graph_stats() const { return graph_stats_; }

  // Turns the row-parallel FP8 absmax all-reduce on or off (starts as
  // ModelOptions::sync_activation_absmax). Off, ranks may quantize with
  // different scales: for measuring the sync's cost only.
  void set_sync_activation_absmax(bool on) { sync_absmax_ = on; }

  // A layer's projection as this rank holds it (for inspection: tests,
  // tools).
  enum class Projection { kQkv, kO, kGateUp, kDown };
  const LinearWeight& projection(int64_t layer, Projection which) const;
  // The vocabulary projection (a view of the embedding table when tied).
  const LinearWeight& lm_head() const { return lm_head_; }

  // Device bytes of all weights (linear layers, embeddings, lm_head, norms).
  uint64_t WeightBytes() const;
  // The weight bytes one decode step reads: all of them once but the
  // embedding table, of which a step reads only its tokens' rows (left
  // out), unless the table is the lm_head too (tied, not quantized).
  uint64_t StepWeightBytes() const;

 private:
  struct Layer {
    DeviceBuffer input_norm, post_norm;  // binary32
    DeviceBuffer qkv_bias;               // binary32, this rank's rows; Qwen2
    DeviceBuffer q_norm, k_norm;         // binary32 [head_dim]; Qwen3
    LinearWeight qkv, o, gate_up, down;
    // FP8: every rank's o / down weight has the same scale, so the ranks
    // add unscaled sums and scale once after the all-reduce.
    bool o_scale_shared = true, down_scale_shared = true;
  };
  // K blocks of a row-parallel layer: `global` at every TP degree, `local`
  // of them on this rank; local = 0: the backend has no block sums. When
  // the TP degree does not divide `global`, local is 1 (this rank's K as
  // one block), and the sums depend on the TP degree.
  struct KBlocks {
    int64_t global = 0, local = 0;
  };
  // Device scratch that grows with the largest forward seen.
  struct Scratch {
    int64_t tokens = 0, rows = 0, table_entries = 0;
    DeviceBuffer h, x, qkv, attn, proj, gate_up, act;  // activations
    DeviceBuffer codes, absmax, act_scale;             // FP8 inputs
    // Row-parallel block sums, binary32 [tokens][hidden], when the
    // activations are not binary32 (then they are in proj).
    DeviceBuffer sums;
    // A forward's metadata in one buffer, so that it goes up in one copy:
    // ids, positions, slots, token_seq [tokens]; query_tiles [2 * tokens];
    // logit_rows [rows]; tables [table_entries] (int32, at the offsets of
    // MetadataLayout).
    DeviceBuffer metadata;
    int32_t *ids = nullptr, *positions = nullptr, *slots = nullptr,
            *token_seq = nullptr, *query_tiles = nullptr, *logit_rows = nullptr,
            *tables = nullptr;
    DeviceBuffer last_hidden, logits;
    DeviceBuffer local_logits, gathered;  // tensor parallelism
    // int32 0, 1, ..., scale_rows - 1: each row its own group, for the FP8
    // lm_head's per-sequence input scales (one row per sequence) and
    // per-token activation scales. absmax and act_scale hold scale_rows.
    DeviceBuffer row_ids;
    int64_t scale_rows = 0;
  };
  // A forward's host-side metadata, validated and laid out for upload
  // (worker/forward_batch.cc).
  struct HostBatch {
    // Per new token: its id, position, cache slot and sequence.
    std::vector<int32_t> ids, positions, slots, token_seq;
    std::vector<int32_t> last_rows;  // per sequence: the row of its last token
    // The rows whose logits come out: each sequence's last, or every row of
    // an all_logits step.
    std::vector<int32_t> logit_rows;
    std::vector<int32_t> tables;     // [sequences][max_blocks] block ids
    int64_t max_blocks = 1;
    // For backends that tile queries, in a batch with a prompt chunk:
    // QueryTiles of the sequences' runs (kernels/backend.h); else empty.
    std::vector<int32_t> query_tiles;

    int64_t num_tokens() const { return static_cast<int64_t>(ids.size()); }
    int64_t num_seqs() const { return static_cast<int64_t>(last_rows.size()); }
    int64_t num_logit_rows() const {
      return static_cast<int64_t>(logit_rows.size());
    }
  };
  // What a decode graph samples after the forward, which its capture fixes
  // (SampleStaging::sorts): nothing (a rank that does not sample, or
  // logits for the host), argmax only, or draws too.
  enum class GraphSampling { kNone, kGreedy, kDraws };
  // A decode graph: a bucket and what it samples.
  using GraphKey = std::pair<int64_t, GraphSampling>;
  // A decode batch size's captured forward.
  struct DecodeGraph {
    int64_t runs = 0;  // decodes of this bucket so far
    std::unique_ptr<CapturedWork> work;
    bool failed = false;  // capture failed: this bucket runs as usual
  };

  LlamaModel(Backend& backend, const ModelConfig& config,
             const ModelOptions& options, const ShardPlan& plan)
      : backend_(backend),
        config_(config),
        options_(options),
        plan_(plan),
        sync_absmax_(options.sync_activation_absmax),
        per_token_scales_(
            options.method == LinearMethod::kFp8 &&
            (options.activation_scales == ActivationScales::kToken ||
             (config.fp8 && config.fp8->activation_per_token))) {}

  // Load's steps, in order.

  // Sets o_blocks_ and down_blocks_ (none without block sums).
  void ChooseRowParallelBlocks();
  // Loads the embeddings, lm_head, final norm and RoPE frequencies.
  absl::Status LoadTables(const Checkpoint& ckpt, const WeightPolicy& policy);
  // Loads layer `index`: its norms and this rank's slices of its projections.
  absl::StatusOr<Layer> LoadLayer(const Checkpoint& ckpt, int64_t index,
                                  const WeightPolicy& policy);
  // Records, per layer, whether every rank's FP8 o and down weights share
  // one scale (one all-gather at load).
  absl::Status CheckSharedWeightScales();
  // ModelOptions::gemm_choices for the FP8 weights that GemmE4m3 runs with
  // row groups (every layer's are the shapes of layer 0's).
  absl::Status ChooseRowGroupGemmWays();

  // The forward pass; leaves the binary32 logits [logit rows][vocab] in
  // scratch_.logits on the device and, when there are `rows`, their tokens
  // sampled on the device for Backend::TakeSampled. Its steps follow, in
  // order.
  absl::Status Run(absl::Span<const SequenceStep> steps, KvCache& cache,
                   absl::Span<const SampleRow> rows, ForwardTrace* trace);
  // The decode graph bucket for these steps, or 0 to run them as usual.
  int64_t GraphBucket(absl::Span<const SequenceStep> steps,
                      const ForwardTrace* trace) const;
  // Pads `batch` to `bucket` sequences and its block tables to `width`
  // entries: padding rows take token 0 at position 0 and write no KV
  // (slot -1), so that a capture's shapes are fixed.
  static void PadBatch(int64_t bucket, int64_t width, HostBatch& batch);
  // Stages `rows` for sampling after the forward (Backend::StageSample),
  // padded to `bucket` rows for a decode graph (0: none); drops the
  // captures when the sampling buffers moved. Answers what the step's
  // graph samples.
  absl::StatusOr<GraphSampling> StageSampling(absl::Span<const SampleRow> rows,
                                              int64_t bucket);
  // The device work of a forward whose batch is uploaded: embed, layers,
  // logits.
  absl::Status Compute(const AttentionMetadata& meta, int64_t num_seqs,
                       int64_t logit_rows, KvCache& cache,
                       ForwardTrace* trace);
  // Compute, then the staged rows' sampling unless `sampling` is kNone.
  absl::Status ComputeAndSample(const AttentionMetadata& meta, int64_t num_seqs,
                                int64_t logit_rows, GraphSampling sampling,
                                KvCache& cache, ForwardTrace* trace);
  // ComputeAndSample for a padded decode batch through its graph: the first
  // decode of a bucket and sampling runs as usual (allocating and planning
  // what it needs), the second is captured, then each replays the capture.
  absl::Status ComputeWithGraph(const GraphKey& key,
                                const AttentionMetadata& meta, KvCache& cache);
  // Drops every capture (their buffers moved, or another cache is used).
  void InvalidateGraphs();
  // Checks the steps and lays out their host-side metadata.
  absl::StatusOr<HostBatch> BuildBatch(absl::Span<const SequenceStep> steps,
                                       const KvCache& cache) const;
  // Grows the scratch for `batch` and copies its metadata to the device.
  absl::Status UploadBatch(const HostBatch& batch);
  // The attention metadata of `batch` once uploaded.
  AttentionMetadata BatchMetadata(const HostBatch& batch,
                                  const KvCache& cache) const;
  // The backend's host plan of the batch's attention, where it makes one
  // (Backend::PlanAttention): whether it planned.
  absl::StatusOr<bool> PlanAttention(const HostBatch& batch,
                                     const AttentionMetadata& meta);
  // Embeds the uploaded ids into scratch_.h, summed across the ranks.
  absl::Status Embed(int64_t tokens);
  // h += layer `l`'s attention: norm, QKV, RoPE, KV write, attention, o_proj
  // (summed across the ranks).
  absl::Status AttentionBlock(int64_t l, const AttentionMetadata& meta,
                              const RowGroups& seqs, KvCache& cache,
                              ForwardTrace* trace);
  // h += the layer's MLP: norm, gate_up, SiLU and multiply, down_proj (summed
  // across the ranks).
  absl::Status MlpBlock(const Layer& layer, int64_t tokens,
                        const RowGroups& seqs, ForwardTrace* trace);
  // Appends the RMS of the residual stream to trace->layer_rms.
  absl::Status RecordLayerRms(int64_t tokens, ForwardTrace* trace);
  // Final norm and lm_head on the `rows` logit rows (HostBatch::logit_rows),
  // into scratch_.logits (gathered from the ranks' vocabulary slices).
  absl::Status Logits(int64_t tokens, int64_t rows);

  // Forward's building blocks.

  // A projection's input: in memory at x, or, when the projection quantizes
  // it with dynamic scales, made by its producer where it is quantized and
  // never stored (FusedInput).
  struct Input {
    const void* x = nullptr;
    std::optional<FusedInput> fused = std::nullopt;
  };
  // The input `producer` makes for w, [rows][cols]: fused when w is FP8
  // with dynamic scales (and ModelOptions::fuse_input_quantization), else
  // run now into `dst`.
  absl::StatusOr<Input> Produce(const LinearWeight& w,
                                const FusedInput& producer, int64_t rows,
                                int64_t cols, void* dst);

  // Grows the scratch to hold a forward of this size: `rows` logit rows (at
  // least one per sequence).
  absl::Status Reserve(int64_t tokens, int64_t rows, int64_t table_entries);
  // y = x·Wᵀ; FP8 weights quantize x with one scale per sequence (`seqs`).
  // `row_parallel`: x is this rank's slice of the input.
  absl::Status Linear(const LinearWeight& w, const Input& x, int64_t rows,
                      const RowGroups& seqs, bool row_parallel, void* y,
                      ForwardTrace* trace);
  // FP8: quantizes w's input x into scratch_.codes; *scale points to the
  // device scales, one per group of *groups (the sequences, or one static
  // scale).
  absl::Status QuantizeInput(const LinearWeight& w, const Input& x,
                             int64_t rows, const RowGroups& seqs,
                             bool row_parallel, RowGroups* groups,
                             const float** scale, ForwardTrace* trace);
  // h += x·Wᵀ summed over the ranks, for a row-parallel layer (o_proj,
  // down_proj) whose input x is this rank's slice and whose output goes
  // into the residual stream h (as Add adds it).
  absl::Status RowParallelLinear(const LinearWeight& w, const KBlocks& blocks,
                                 bool scale_shared, const Input& x,
                                 int64_t rows, const RowGroups& seqs, void* h,
                                 ForwardTrace* trace);
  // Waits for the collectives issued so far (Communicator::Await) before
  // the host reads results or waits on the stream; nothing on one rank.
  // logits[seqs][vocab part] (binary32) = last_hidden · lm_headᵀ, unquantized
  // or FP8 (ModelOptions::quantize_lm_head).
  absl::Status LmHead(int64_t num_seqs, void* logits);
  absl::Status AwaitCollectives();
  // Sums `count` values of `dtype` (binary32 block sums, or embeddings in
  // the activation dtype) across the ranks; nothing on one rank.
  absl::Status AllReduceSum(void* x, int64_t count, DType dtype);

  Backend& backend_;
  const ModelConfig config_;
  const ModelOptions options_;
  const ShardPlan plan_;  // this rank's slice (everything when TP = 1)
  bool sync_absmax_ = true;
  // A compressed-tensors checkpoint with per-token activation scales.
  const bool per_token_scales_;
  KBlocks o_blocks_, down_blocks_;
  LinearWeight embedding_;
  LinearWeight lm_head_;  // a view of embedding_ when tied
  DeviceBuffer final_norm_;
  DeviceBuffer inv_freq_;  // binary32 [head_dim / 2]
  std::vector<Layer> layers_;
  Scratch scratch_;
  absl::flat_hash_map<GraphKey, DecodeGraph> graphs_;
  uint64_t graph_cache_id_ = 0;  // the KvCache they were captured on
  GraphStats graph_stats_;
};

}  // namespace octet
