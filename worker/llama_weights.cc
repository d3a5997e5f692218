// LlamaModel's weights: loading a checkpoint into this rank's slices
// (column-parallel rows of q/k/v and gate/up, row-parallel input columns of
// o and down, vocabulary rows of the tables), the row-parallel K blocks, and
// the check that every rank's FP8 o/down weights share a scale. Tensor names
// come from model/tensor_names.h; reading and quantizing one weight is
// worker/linear_loader.h's job.
#include <algorithm>
#include <bit>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "model/rope.h"
#include "model/tensor_names.h"
#include "worker/llama_model.h"

namespace octet {
namespace {

// The most K blocks of a row-parallel layer, before the odd factor below:
// the largest power-of-two TP degree whose results equal TP = 1's. Fixed,
// so that TP = 1 cuts K the same way.
constexpr int64_t kMaxRowParallelBlocks = 8;

// The odd factor of the K block count. TP degree T gets TP = 1's bits when
// it holds G / T blocks, a power of two (kernels/tree_sum.h), so one count
// G = odd * 2^j serves the degrees odd * 2^i, i <= j, and no other. A model
// that splits in two takes odd = 1 (every power-of-two degree); one that
// does not (SmolLM2's 9 heads) the odd part of the least degree it splits
// into (3: degrees 3, 6, 12 ...).
int64_t OddBlockFactor(const ModelConfig& c) {
  if (CheckTensorParallelSplit(c, 2).ok()) return 1;
  for (int t = 3; t <= c.num_heads; ++t) {
    if (CheckTensorParallelSplit(c, t).ok()) return t >> std::countr_zero(
                                                          static_cast<unsigned>(t));
  }
  return 1;
}

// Whether `size` ranks can hold equal runs of `global` blocks whose sums
// add up to one rank's: one rank holds them all; more need power-of-two
// runs.
bool SplitsIntoPowerOfTwoRuns(int64_t global, int64_t size) {
  return size == 1 || (global % size == 0 &&
                       std::has_single_bit(static_cast<uint64_t>(global / size)));
}

}  // namespace

int64_t GlobalBlocks(const ModelConfig& c, int64_t k, int64_t min_width) {
  const int64_t odd = OddBlockFactor(c);
  int64_t blocks = kMaxRowParallelBlocks * (k % odd == 0 ? odd : 1);
  while (k % blocks != 0) blocks /= 2;
  // The largest degree the model allows that gets TP = 1's bits from these
  // blocks: fewer blocks must still hold a power-of-two run for it.
  int64_t exact = 1;
  for (int t = 2; t <= blocks; ++t) {
    if (CheckTensorParallelSplit(c, t).ok() &&
        SplitsIntoPowerOfTwoRuns(blocks, t)) {
      exact = t;
    }
  }
  while ((k / blocks) % min_width != 0 && blocks % 2 == 0 &&
         blocks / 2 >= exact) {
    blocks /= 2;
  }
  return blocks;
}

namespace {

// This rank's slices of one layer's projections (all of them for one rank).
struct LayerSlices {
  WeightSlice qkv, o, gate_up, down;
};

// The rows (column-parallel) or input columns (row-parallel) of each
// projection that rank `sp` holds.
LayerSlices SliceLayer(const ModelConfig& c, const ShardPlan& sp) {
  const int64_t hd = c.head_dim;
  const std::pair<int64_t, int64_t> q_rows{sp.head_begin * hd,
                                           (sp.head_begin + sp.heads) * hd};
  const std::pair<int64_t, int64_t> kv_rows{
      sp.kv_head_begin * hd, (sp.kv_head_begin + sp.kv_heads) * hd};
  const std::pair<int64_t, int64_t> mlp_rows{
      sp.intermediate_begin, sp.intermediate_begin + sp.intermediate};
  return LayerSlices{
      .qkv = {{q_rows, kv_rows, kv_rows}},
      .o = {{}, q_rows.first, q_rows.second},
      .gate_up = {{mlp_rows, mlp_rows}},
      .down = {{}, mlp_rows.first, mlp_rows.second},
  };
}

// Runs `collective` on `n` host floats through a buffer of `backend`'s
// memory (the communicator's), and copies the result back.
template <typename F>
absl::Status OnDevice(Backend& backend, float* host, int64_t n, F collective) {
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer d, backend.Allocate(n * sizeof(float)));
  OCTET_RETURN_IF_ERROR(
      backend.CopyToDevice(d.data(), host, n * sizeof(float)));
  OCTET_RETURN_IF_ERROR(collective(d.as<float>()));
  return backend.CopyToHost(host, d.data(), n * sizeof(float));
}

// Whether an FP8 checkpoint lists the parts of one fused projection
// (q/k/v, gate/up, or one part) in its ignore list, stored as floats: all of
// them, or none; some (they run as one GEMM), or an ignored part stored in
// e4m3, is an InvalidArgument naming it.
absl::StatusOr<bool> LeftUnquantized(const Checkpoint& ckpt,
                                     const std::vector<std::string>& parts) {
  const ModelConfig& c = ckpt.config();
  if (!c.fp8) return false;
  size_t ignored = 0;
  for (const std::string& part : parts) {
    const std::string module = ModuleName(part);
    if (!IsIgnoredLayer(*c.fp8, module)) continue;
    ++ignored;
    OCTET_ASSIGN_OR_RETURN(const TensorView t, ckpt.Get(part));
    ckpt.ReleasePages(part);  // its dtype is all this needs
    if (t.dtype == DType::kE4m3) {
      return absl::InvalidArgumentError(
          absl::StrCat(t.file, ": '", module,
                       "' is in quantization_config's ignore list but is "
                       "stored in F8_E4M3"));
    }
  }
  if (ignored != 0 && ignored != parts.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        ckpt.dir(), ": quantization_config ignores some but not all of ",
        absl::StrJoin(parts, ", "),
        ", which octet runs as one GEMM: ignore all of them or none"));
  }
  return ignored != 0;
}

// How Load turns checkpoint weights into weights for `backend`, on a group
// of `tp_size` ranks.
WeightPolicy MakeWeightPolicy(const ModelOptions& options, Backend& backend,
                              int tp_size) {
  WeightPolicy policy;
  policy.method = options.method;
  policy.bf16_only = backend.kind() != DeviceKind::kCpu;
  policy.cpu = options.cpu;
  if (options.global_weight_scale && tp_size > 1) {
    Communicator* comm = options.comm;
    Backend* b = &backend;
    policy.reduce_absmax = [comm, b](float* absmax) {
      return OnDevice(*b, absmax, 1, [&](float* d) {
        OCTET_RETURN_IF_ERROR(comm->AllReduceMax(d, 1));
        return comm->Await();
      });
    };
  }
  return policy;
}

}  // namespace

absl::StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::Load(
    const Checkpoint& ckpt, Backend& backend, const ModelOptions& options) {
  const ModelConfig& config = ckpt.config();
  Communicator* comm = options.comm;
  OCTET_ASSIGN_OR_RETURN(
      const ShardPlan plan,
      MakeShardPlan(config, comm != nullptr ? comm->rank() : 0,
                    comm != nullptr ? comm->size() : 1));
  std::unique_ptr<LlamaModel> m(new LlamaModel(backend, config, options, plan));
  m->ChooseRowParallelBlocks();
  const ModelConfig& c = m->config_;
  if (c.head_dim > backend.max_head_dim()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "head_dim ", c.head_dim, " is above ", backend.max_head_dim(),
        ", the most ", backend.Describe(), " attention supports"));
  }
  const WeightPolicy policy = MakeWeightPolicy(options, backend, plan.size);
  OCTET_RETURN_IF_ERROR(m->LoadTables(ckpt, policy));
  for (int64_t i = 0; i < c.num_layers; ++i) {
    OCTET_ASSIGN_OR_RETURN(Layer layer, m->LoadLayer(ckpt, i, policy));
    m->layers_.push_back(std::move(layer));
    if (options.on_layer_loaded) options.on_layer_loaded(i + 1, c.num_layers);
  }
  OCTET_RETURN_IF_ERROR(m->CheckSharedWeightScales());
  OCTET_RETURN_IF_ERROR(m->ChooseRowGroupGemmWays());
  return m;
}

absl::Status LlamaModel::ChooseRowGroupGemmWays() {
  if (layers_.empty()) return absl::OkStatus();
  const Layer& l = layers_[0];
  std::vector<const LinearWeight*> weights;
  const LinearWeight* head = &lm_head_;
  for (const LinearWeight* w : {&l.qkv, &l.gate_up, &l.o, &l.down, head}) {
    // Row-parallel layers with block sums scale after the sum (ScaleRows);
    // a static input scale is one group.
    const bool block_sums = (w == &l.o && o_blocks_.local > 0) ||
                            (w == &l.down && down_blocks_.local > 0);
    if (w->dtype == DType::kE4m3 && w->input_scale.data() == nullptr &&
        !block_sums) {
      weights.push_back(w);
    }
  }
  return ChooseRowGroupGemms(backend_, options_.comm, weights,
                             options_.gemm_choices);
}

void LlamaModel::ChooseRowParallelBlocks() {
  if (!backend_.has_block_sums()) return;
  const ModelConfig& c = config_;
  for (auto [blocks, k] : {std::pair{&o_blocks_, c.num_heads * c.head_dim},
                           std::pair{&down_blocks_, c.intermediate_size}}) {
    blocks->global = GlobalBlocks(
        c, k, backend_.kind() == DeviceKind::kCuda ? kCublasLtBlockWidth : 1);
    // A TP degree that does not cut the blocks into power-of-two runs: this
    // rank's K as one block, summed in binary32 still, but as the TP degree
    // cuts it.
    blocks->local = SplitsIntoPowerOfTwoRuns(blocks->global, plan_.size)
                        ? blocks->global / plan_.size
                        : 1;
  }
}

absl::Status LlamaModel::LoadTables(const Checkpoint& ckpt,
                                    const WeightPolicy& policy) {
  // Each rank holds its rows of the vocabulary (all of them for one rank).
  const WeightSlice vocab_rows{
      {{plan_.vocab_begin, plan_.vocab_begin + plan_.vocab}}};
  OCTET_ASSIGN_OR_RETURN(
      embedding_, LoadTable(ckpt, TensorName(ModelTensor::kEmbedding), policy,
                            backend_, vocab_rows));
  if (options_.quantize_lm_head) {
    if (options_.method != LinearMethod::kFp8) {
      return absl::InvalidArgumentError(
          "an FP8 lm_head needs the fp8 quantization method");
    }
    if (backend_.kind() != DeviceKind::kCpu) {
      // GemmE4m3 writes the activation dtype: binary32 logits on the CPU
      // only.
      return absl::UnimplementedError(absl::StrCat(
          "an FP8 lm_head is built only for the CPU backend (binary32 "
          "logits), not ",
          backend_.Describe()));
    }
    // Tied embeddings keep their unquantized table for the lookups.
    OCTET_ASSIGN_OR_RETURN(
        lm_head_, LoadTableE4m3PerRow(ckpt,
                                      TensorName(config_.tie_word_embeddings
                                                     ? ModelTensor::kEmbedding
                                                     : ModelTensor::kLmHead),
                                      policy, backend_, vocab_rows));
  } else if (config_.tie_word_embeddings) {
    lm_head_.out = embedding_.out;
    lm_head_.in = embedding_.in;
    lm_head_.full_out = embedding_.full_out;
    lm_head_.full_in = embedding_.full_in;
    lm_head_.dtype = embedding_.dtype;
    lm_head_.data = DeviceBuffer::View(embedding_.data.data(),
                                       embedding_.data.bytes());  // a view
  } else {
    OCTET_ASSIGN_OR_RETURN(
        lm_head_, LoadTable(ckpt, TensorName(ModelTensor::kLmHead), policy,
                            backend_, vocab_rows));
  }
  // As this backend's GEMM reads it best, where it is a table of its own (a
  // tied, unquantized one stays rows: the embedding lookups read them).
  if (lm_head_.data.data() != embedding_.data.data()) {
    OCTET_RETURN_IF_ERROR(backend_.LayOutWeight(lm_head_, 1));
  }
  OCTET_ASSIGN_OR_RETURN(
      final_norm_,
      LoadVectorF32(ckpt, TensorName(ModelTensor::kFinalNorm), backend_));

  const std::vector<float> inv_freq = RopeInverseFrequencies(config_);
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer f,
                         backend_.Allocate(inv_freq.size() * sizeof(float)));
  OCTET_RETURN_IF_ERROR(backend_.CopyToDevice(f.data(), inv_freq.data(),
                                              inv_freq.size() * sizeof(float)));
  inv_freq_ = std::move(f);
  return absl::OkStatus();
}

absl::StatusOr<LlamaModel::Layer> LlamaModel::LoadLayer(
    const Checkpoint& ckpt, int64_t index, const WeightPolicy& policy) {
  auto name = [index](LayerTensor t) { return TensorName(index, t); };
  using T = LayerTensor;
  const LayerSlices slices = SliceLayer(config_, plan_);
  Layer layer;
  OCTET_ASSIGN_OR_RETURN(layer.input_norm,
                         LoadVectorF32(ckpt, name(T::kInputNorm), backend_));
  OCTET_ASSIGN_OR_RETURN(layer.post_norm,
                         LoadVectorF32(ckpt, name(T::kPostNorm), backend_));
  if (config_.qkv_bias) {  // sliced with the rows of q, k and v
    OCTET_ASSIGN_OR_RETURN(
        layer.qkv_bias,
        LoadVectorF32(ckpt, {name(T::kQBias), name(T::kKBias), name(T::kVBias)},
                      backend_, slices.qkv));
  }
  if (config_.qk_norm) {  // over head_dim: every rank's heads alike
    OCTET_ASSIGN_OR_RETURN(layer.q_norm,
                           LoadVectorF32(ckpt, name(T::kQNorm), backend_));
    OCTET_ASSIGN_OR_RETURN(layer.k_norm,
                           LoadVectorF32(ckpt, name(T::kKNorm), backend_));
  }
  // The K blocks each layer's GEMM sums apart: the row-parallel layers'
  // (ChooseRowParallelBlocks), one for the rest.
  struct Fused {
    LinearWeight* dst;
    std::vector<std::string> parts;
    const WeightSlice& slice;
    int64_t k_blocks;
  };
  for (const Fused& fused :
       {Fused{
            &layer.qkv, {name(T::kQ), name(T::kK), name(T::kV)}, slices.qkv, 1},
        Fused{&layer.o,
              {name(T::kO)},
              slices.o,
              std::max<int64_t>(o_blocks_.local, 1)},
        Fused{
            &layer.gate_up, {name(T::kGate), name(T::kUp)}, slices.gate_up, 1},
        Fused{&layer.down,
              {name(T::kDown)},
              slices.down,
              std::max<int64_t>(down_blocks_.local, 1)}}) {
    // Left unquantized by an FP8 checkpoint's writer: run as it is.
    OCTET_ASSIGN_OR_RETURN(const bool as_stored,
                           LeftUnquantized(ckpt, fused.parts));
    WeightPolicy dense = policy;
    dense.method = LinearMethod::kNone;
    OCTET_ASSIGN_OR_RETURN(
        *fused.dst, LoadLinear(ckpt, fused.parts, as_stored ? dense : policy,
                               backend_, fused.slice));
    // As this backend's GEMM reads it best (the CPU: bfloat16 panels).
    OCTET_RETURN_IF_ERROR(backend_.LayOutWeight(*fused.dst, fused.k_blocks));
  }
  return layer;
}

absl::Status LlamaModel::CheckSharedWeightScales() {
  if (plan_.size == 1 || options_.method != LinearMethod::kFp8) {
    return absl::OkStatus();
  }
  // [layer][o, down] scales of this rank, then of every rank.
  std::vector<float> mine(2 * layers_.size());
  for (size_t l = 0; l < layers_.size(); ++l) {
    for (int i = 0; i < 2; ++i) {
      const LinearWeight& w = i == 0 ? layers_[l].o : layers_[l].down;
      if (w.dtype != DType::kE4m3) continue;  // an unquantized layer
      OCTET_RETURN_IF_ERROR(
          backend_.CopyToHost(&mine[2 * l + i], w.scale.data(), sizeof(float)));
    }
  }
  // The communicator works on the backend's memory: the scales go through
  // it both ways.
  std::vector<float> all(mine.size() * plan_.size);
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer in,
                         backend_.Allocate(mine.size() * sizeof(float)));
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer out,
                         backend_.Allocate(all.size() * sizeof(float)));
  OCTET_RETURN_IF_ERROR(backend_.CopyToDevice(in.data(), mine.data(),
                                              mine.size() * sizeof(float)));
  OCTET_RETURN_IF_ERROR(
      options_.comm->AllGather(in.as<float>(), mine.size(), out.as<float>()));
  OCTET_RETURN_IF_ERROR(options_.comm->Await());
  OCTET_RETURN_IF_ERROR(
      backend_.CopyToHost(all.data(), out.data(), all.size() * sizeof(float)));
  for (size_t l = 0; l < layers_.size(); ++l) {
    for (int i = 0; i < 2; ++i) {
      bool shared = true;
      for (int r = 0; r < plan_.size; ++r) {
        shared = shared && all[r * mine.size() + 2 * l + i] == mine[2 * l + i];
      }
      (i == 0 ? layers_[l].o_scale_shared : layers_[l].down_scale_shared) =
          shared;
    }
  }
  return absl::OkStatus();
}

const LinearWeight& LlamaModel::projection(int64_t layer,
                                           Projection which) const {
  const Layer& l = layers_.at(layer);
  switch (which) {
    case Projection::kQkv:
      return l.qkv;
    case Projection::kO:
      return l.o;
    case Projection::kGateUp:
      return l.gate_up;
    case Projection::kDown:
      break;
  }
  return l.down;
}

uint64_t LlamaModel::WeightBytes() const {
  // A tied, unquantized lm_head is a view of the table: counted once.
  const bool head_is_table = lm_head_.data.data() == embedding_.data.data();
  return StepWeightBytes() + (head_is_table ? 0 : embedding_.data.bytes());
}

uint64_t LlamaModel::StepWeightBytes() const {
  uint64_t total =
      final_norm_.bytes() + lm_head_.data.bytes() + lm_head_.scale.bytes();
  for (const Layer& l : layers_) {
    total += l.input_norm.bytes() + l.post_norm.bytes() + l.qkv_bias.bytes() +
             l.q_norm.bytes() + l.k_norm.bytes();
    for (const LinearWeight* w : {&l.qkv, &l.o, &l.gate_up, &l.down}) {
      total += w->data.bytes() + w->scale.bytes() + w->input_scale.bytes();
    }
  }
  return total;
}

}  // namespace octet
