#include "worker/llama_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/bf16.h"
#include "base/status_macros.h"

namespace octet {
namespace {

// The most K blocks of a row-parallel layer: the largest TP degree whose
// results equal TP = 1's. Fixed, so that TP = 1 cuts K the same way.
constexpr int64_t kMaxRowParallelBlocks = 8;

// The K blocks of a row-parallel layer, the same at every TP degree: the
// largest power of two up to kMaxRowParallelBlocks that divides K. A TP
// degree that does not divide them gets no block sums (Load), and its sums
// then depend on the TP degree.
int64_t GlobalBlocks(int64_t k) {
  int64_t blocks = kMaxRowParallelBlocks;
  while (k % blocks != 0) blocks /= 2;
  return blocks;
}

// Pointer `elems` activations past `p`.
template <typename T>
T* Offset(T* p, int64_t elems, DType dtype) {
  using Byte = std::conditional_t<std::is_const_v<T>, const char, char>;
  return reinterpret_cast<T*>(reinterpret_cast<Byte*>(p) +
                              elems * DTypeSize(dtype));
}

// Where each array of a forward's metadata sits in Scratch::metadata, in
// int32 elements, for capacities of `tokens`, `seqs` and `table_entries`.
struct MetadataLayout {
  MetadataLayout(int64_t tokens, int64_t seqs, int64_t table_entries)
      : positions(tokens),
        slots(2 * tokens),
        token_seq(3 * tokens),
        query_tiles(4 * tokens),  // at most one tile per token
        last_rows(6 * tokens),
        tables(6 * tokens + seqs),
        end(tables + table_entries) {}
  size_t bytes() const { return end * sizeof(int32_t); }

  int64_t ids = 0, positions, slots, token_seq, query_tiles, last_rows, tables,
          end;
};

// Grows `buf` to at least `bytes`.
absl::Status Grow(Backend& backend, DeviceBuffer& buf, size_t bytes) {
  if (buf.bytes() >= bytes && buf.data() != nullptr) return absl::OkStatus();
  OCTET_ASSIGN_OR_RETURN(buf, backend.Allocate(std::max<size_t>(bytes, 64)));
  return absl::OkStatus();
}

}  // namespace

std::vector<float> RopeInverseFrequencies(const ModelConfig& c) {
  const int64_t half = c.head_dim / 2;
  std::vector<float> out(half);
  constexpr double kPi = 3.14159265358979323846;
  for (int64_t i = 0; i < half; ++i) {
    double f =
        std::pow(c.rope_theta, -2.0 * i / static_cast<double>(c.head_dim));
    if (c.rope_scaling) {
      // Llama 3: long wavelengths slowed by `factor`, short ones kept, a
      // smooth blend between.
      const RopeScaling& s = *c.rope_scaling;
      const double old_len =
          static_cast<double>(s.original_max_position_embeddings);
      const double low_wavelen = old_len / s.low_freq_factor;
      const double high_wavelen = old_len / s.high_freq_factor;
      const double wavelen = 2 * kPi / f;
      if (wavelen > low_wavelen) {
        f /= s.factor;
      } else if (wavelen >= high_wavelen) {
        const double smooth = (old_len / wavelen - s.low_freq_factor) /
                              (s.high_freq_factor - s.low_freq_factor);
        f = (1 - smooth) * f / s.factor + smooth * f;
      }
    }
    out[i] = static_cast<float>(f);
  }
  return out;
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
    const absl::string_view module =
        absl::string_view(part).substr(0, part.size() - sizeof(".weight") + 1);
    if (!IsIgnoredLayer(*c.fp8, module)) continue;
    ++ignored;
    OCTET_ASSIGN_OR_RETURN(const TensorView t, ckpt.Get(part));
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
  return m;
}

void LlamaModel::ChooseRowParallelBlocks() {
  if (!backend_.has_block_sums()) return;
  const ModelConfig& c = config_;
  for (auto [blocks, k] : {std::pair{&o_blocks_, c.num_heads * c.head_dim},
                           std::pair{&down_blocks_, c.intermediate_size}}) {
    blocks->global = GlobalBlocks(k);
    // A TP degree that does not divide the blocks: this rank's K as one
    // block, summed in binary32 still, but as the TP degree cuts it.
    blocks->local =
        blocks->global % plan_.size == 0 ? blocks->global / plan_.size : 1;
  }
}

absl::Status LlamaModel::LoadTables(const Checkpoint& ckpt,
                                    const WeightPolicy& policy) {
  // Each rank holds its rows of the vocabulary (all of them for one rank).
  const WeightSlice vocab_rows{
      {{plan_.vocab_begin, plan_.vocab_begin + plan_.vocab}}};
  OCTET_ASSIGN_OR_RETURN(
      embedding_, LoadTable(ckpt, "model.embed_tokens.weight", policy, backend_,
                            vocab_rows));
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
    OCTET_ASSIGN_OR_RETURN(lm_head_,
                           LoadTableE4m3PerRow(ckpt,
                                               config_.tie_word_embeddings
                                                   ? "model.embed_tokens.weight"
                                                   : "lm_head.weight",
                                               policy, backend_, vocab_rows));
  } else if (config_.tie_word_embeddings) {
    lm_head_.out = embedding_.out;
    lm_head_.in = embedding_.in;
    lm_head_.full_out = embedding_.full_out;
    lm_head_.full_in = embedding_.full_in;
    lm_head_.dtype = embedding_.dtype;
    lm_head_.data = DeviceBuffer(nullptr, embedding_.data.data(),
                                 embedding_.data.bytes());  // a view
  } else {
    OCTET_ASSIGN_OR_RETURN(lm_head_, LoadTable(ckpt, "lm_head.weight", policy,
                                               backend_, vocab_rows));
  }
  OCTET_ASSIGN_OR_RETURN(final_norm_,
                         LoadVectorF32(ckpt, "model.norm.weight", backend_));

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
  const std::string p = absl::StrCat("model.layers.", index, ".");
  const LayerSlices slices = SliceLayer(config_, plan_);
  Layer layer;
  OCTET_ASSIGN_OR_RETURN(
      layer.input_norm,
      LoadVectorF32(ckpt, p + "input_layernorm.weight", backend_));
  OCTET_ASSIGN_OR_RETURN(
      layer.post_norm,
      LoadVectorF32(ckpt, p + "post_attention_layernorm.weight", backend_));
  if (config_.qkv_bias) {  // sliced with the rows of q, k and v
    OCTET_ASSIGN_OR_RETURN(
        layer.qkv_bias,
        LoadVectorF32(ckpt,
                      {p + "self_attn.q_proj.bias", p + "self_attn.k_proj.bias",
                       p + "self_attn.v_proj.bias"},
                      backend_, slices.qkv));
  }
  if (config_.qk_norm) {  // over head_dim: every rank's heads alike
    OCTET_ASSIGN_OR_RETURN(
        layer.q_norm,
        LoadVectorF32(ckpt, p + "self_attn.q_norm.weight", backend_));
    OCTET_ASSIGN_OR_RETURN(
        layer.k_norm,
        LoadVectorF32(ckpt, p + "self_attn.k_norm.weight", backend_));
  }
  struct Fused {
    LinearWeight* dst;
    std::vector<std::string> parts;
    const WeightSlice& slice;
  };
  for (const Fused& fused :
       {Fused{&layer.qkv,
              {p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight",
               p + "self_attn.v_proj.weight"},
              slices.qkv},
        Fused{&layer.o, {p + "self_attn.o_proj.weight"}, slices.o},
        Fused{&layer.gate_up,
              {p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"},
              slices.gate_up},
        Fused{&layer.down, {p + "mlp.down_proj.weight"}, slices.down}}) {
    // Left unquantized by an FP8 checkpoint's writer: run as it is.
    OCTET_ASSIGN_OR_RETURN(const bool as_stored,
                           LeftUnquantized(ckpt, fused.parts));
    WeightPolicy dense = policy;
    dense.method = LinearMethod::kNone;
    OCTET_ASSIGN_OR_RETURN(
        *fused.dst, LoadLinear(ckpt, fused.parts, as_stored ? dense : policy,
                               backend_, fused.slice));
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

absl::StatusOr<std::unique_ptr<KvCache>> LlamaModel::NewKvCache(
    const KvCacheOptions& options) const {
  return KvCache::Create(backend_, config_.num_layers, plan_.kv_heads,
                         config_.head_dim, options);
}

const LinearWeight& LlamaModel::projection(int64_t layer, int which) const {
  const Layer& l = layers_.at(layer);
  switch (which) {
    case 0:
      return l.qkv;
    case 1:
      return l.o;
    case 2:
      return l.gate_up;
    default:
      return l.down;
  }
}

uint64_t LlamaModel::WeightBytes() const {
  uint64_t total = embedding_.data.bytes() + final_norm_.bytes();
  if (!config_.tie_word_embeddings || lm_head_.dtype == DType::kE4m3) {
    total += lm_head_.data.bytes() + lm_head_.scale.bytes();
  }
  for (const Layer& l : layers_) {
    total += l.input_norm.bytes() + l.post_norm.bytes() + l.qkv_bias.bytes() +
             l.q_norm.bytes() + l.k_norm.bytes();
    for (const LinearWeight* w : {&l.qkv, &l.o, &l.gate_up, &l.down}) {
      total += w->data.bytes() + w->scale.bytes() + w->input_scale.bytes();
    }
  }
  return total;
}

absl::Status LlamaModel::Reserve(int64_t tokens, int64_t seqs,
                                 int64_t table_entries) {
  Scratch& s = scratch_;
  const ModelConfig& c = config_;
  const size_t act = DTypeSize(backend_.activation_dtype());
  bool grew = tokens > s.tokens || seqs > s.seqs;
  if (tokens > s.tokens) {
    const int64_t qkv = (plan_.heads + 2 * plan_.kv_heads) * c.head_dim;
    const int64_t widest_in =
        std::max({c.hidden_size, plan_.heads * c.head_dim, plan_.intermediate});
    OCTET_RETURN_IF_ERROR(Grow(backend_, s.h, tokens * c.hidden_size * act));
    OCTET_RETURN_IF_ERROR(Grow(backend_, s.x, tokens * c.hidden_size * act));
    OCTET_RETURN_IF_ERROR(Grow(backend_, s.qkv, tokens * qkv * act));
    OCTET_RETURN_IF_ERROR(
        Grow(backend_, s.attn, tokens * plan_.heads * c.head_dim * act));
    OCTET_RETURN_IF_ERROR(Grow(backend_, s.proj, tokens * c.hidden_size * act));
    OCTET_RETURN_IF_ERROR(
        Grow(backend_, s.gate_up, tokens * 2 * plan_.intermediate * act));
    OCTET_RETURN_IF_ERROR(
        Grow(backend_, s.act, tokens * plan_.intermediate * act));
    OCTET_RETURN_IF_ERROR(Grow(backend_, s.codes, tokens * widest_in));
    if (act != sizeof(float) && backend_.has_block_sums()) {
      OCTET_RETURN_IF_ERROR(
          Grow(backend_, s.sums, tokens * c.hidden_size * sizeof(float)));
    }
    s.tokens = tokens;
  }
  if (seqs > s.seqs) {
    OCTET_RETURN_IF_ERROR(
        Grow(backend_, s.last_hidden, seqs * c.hidden_size * act));
    OCTET_RETURN_IF_ERROR(
        Grow(backend_, s.logits, seqs * c.vocab_size * sizeof(float)));
    if (plan_.size > 1) {
      OCTET_RETURN_IF_ERROR(
          Grow(backend_, s.local_logits, seqs * plan_.vocab * sizeof(float)));
      OCTET_RETURN_IF_ERROR(
          Grow(backend_, s.gathered, seqs * c.vocab_size * sizeof(float)));
    }
    s.seqs = seqs;
  }
  // FP8 scales: one per sequence, or per token (row_ids: each row its own
  // group).
  if (const int64_t rows = std::max(s.tokens, s.seqs); rows > s.scale_rows) {
    OCTET_RETURN_IF_ERROR(Grow(backend_, s.absmax, rows * sizeof(float)));
    OCTET_RETURN_IF_ERROR(Grow(backend_, s.act_scale, rows * sizeof(float)));
    std::vector<int32_t> ids(rows);
    std::iota(ids.begin(), ids.end(), 0);
    OCTET_RETURN_IF_ERROR(Grow(backend_, s.row_ids, rows * sizeof(int32_t)));
    OCTET_RETURN_IF_ERROR(backend_.CopyToDevice(s.row_ids.data(), ids.data(),
                                                rows * sizeof(int32_t)));
    s.scale_rows = rows;
  }
  if (table_entries > s.table_entries) s.table_entries = table_entries;
  const MetadataLayout layout(s.tokens, s.seqs, s.table_entries);
  if (s.metadata.bytes() < layout.bytes()) {
    OCTET_RETURN_IF_ERROR(Grow(backend_, s.metadata, layout.bytes()));
    grew = true;
  }
  int32_t* base = s.metadata.as<int32_t>();
  s.ids = base + layout.ids;
  s.positions = base + layout.positions;
  s.slots = base + layout.slots;
  s.token_seq = base + layout.token_seq;
  s.query_tiles = base + layout.query_tiles;
  s.last_rows = base + layout.last_rows;
  s.tables = base + layout.tables;
  // Captures name the buffers they were captured with.
  if (grew && !graphs_.empty()) InvalidateGraphs();
  return absl::OkStatus();
}

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
                                           void* y, ForwardTrace* trace) {
  const int64_t count = rows * w.out;
  const DType act = backend_.activation_dtype();
  if (blocks.local == 0) {  // no block sums: partials in the activation dtype
    OCTET_RETURN_IF_ERROR(Linear(w, x, rows, seqs, true, y, trace));
    return AllReduceSum(y, count, act);
  }
  // Block sums in binary32 (in y itself when that is binary32), added
  // across the ranks in TreeSum order by the communicator, then scaled and
  // rounded once into y.
  float* sums =
      act == DType::kF32 ? static_cast<float*>(y) : scratch_.sums.as<float>();
  const void* in = x.x;
  RowGroups groups;
  const float* scale = nullptr;  // FP8: the activation scales
  if (w.dtype == DType::kE4m3) {
    OCTET_RETURN_IF_ERROR(
        QuantizeInput(w, x, rows, seqs, true, &groups, &scale, trace));
    in = scratch_.codes.data();
  }
  OCTET_RETURN_IF_ERROR(
      backend_.GemmBlockSums(in, rows, w, blocks.local, sums));
  // FP8 scales once after the sum when every rank scales the same way (as
  // one rank would); otherwise each rank scales its own part first.
  const bool act_scale_shared =
      plan_.size == 1 || sync_absmax_ || w.input_scale.data() != nullptr;
  if (scale != nullptr && !(scale_shared && act_scale_shared)) {
    OCTET_RETURN_IF_ERROR(
        backend_.ScaleRows(sums, rows, scale, groups, w, sums, DType::kF32));
    scale = nullptr;
  }
  OCTET_RETURN_IF_ERROR(AllReduceSum(sums, count, DType::kF32));
  return backend_.ScaleRows(sums, rows, scale, groups, w, y, act);
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
    // One dynamic scale per sequence (docs/design.md), so batching does not
    // change a sequence's codes; or per token, as `seqs` groups the rows
    // for per-token checkpoints. A single rank's input is whole: its absmax
    // is the global one. Tensor parallelism all-reduces it here for
    // row-parallel layers.
    *groups = seqs;
    float* absmax = scratch_.absmax.as<float>();
    OCTET_RETURN_IF_ERROR(
        x.fused ? backend_.FusedAbsMax(*x.fused, rows, w.in, seqs, absmax)
                : backend_.AbsMax(x.x, rows, w.in, seqs, absmax));
    if (row_parallel && plan_.size > 1 && sync_absmax_) {
      OCTET_RETURN_IF_ERROR(options_.comm->AllReduceMax(absmax, seqs.count));
    }
    float* dynamic = scratch_.act_scale.as<float>();
    OCTET_RETURN_IF_ERROR(
        x.fused
            ? backend_.FusedQuantize(*x.fused, rows, w.in, seqs, absmax, codes,
                                     dynamic)
            : backend_.Quantize(x.x, rows, w.in, seqs, absmax, codes, dynamic));
    *scale = dynamic;
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

absl::Status LlamaModel::Forward(absl::Span<const SequenceStep> steps,
                                 KvCache& cache, std::vector<float>* logits,
                                 ForwardTrace* trace) {
  OCTET_RETURN_IF_ERROR(Run(steps, cache, trace));
  OCTET_RETURN_IF_ERROR(AwaitCollectives());
  logits->resize(steps.size() * config_.vocab_size);
  return backend_.CopyToHost(logits->data(), scratch_.logits.data(),
                             logits->size() * sizeof(float));
}

absl::Status LlamaModel::ForwardSample(absl::Span<const SequenceStep> steps,
                                       KvCache& cache,
                                       absl::Span<const SampleRow> rows,
                                       std::vector<SampledToken>* tokens) {
  for (const SampleRow& r : rows) {
    if (r.logits_row < 0 ||
        r.logits_row >= static_cast<int64_t>(steps.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("ForwardSample: logits row ", r.logits_row,
                       " is not one of the ", steps.size(), " steps"));
    }
  }
  OCTET_RETURN_IF_ERROR(Run(steps, cache, nullptr));
  // Sampling waits for the stream: the collectives first, bounded.
  OCTET_RETURN_IF_ERROR(AwaitCollectives());
  tokens->resize(rows.size());
  if (rows.empty()) return backend_.Synchronize();
  return backend_.Sample(scratch_.logits.as<float>(), config_.vocab_size, rows,
                         tokens->data());
}

// A forward's host-side metadata, validated and laid out for upload.
struct LlamaModel::HostBatch {
  // Per new token: its id, position, cache slot and sequence.
  std::vector<int32_t> ids, positions, slots, token_seq;
  std::vector<int32_t> last_rows;  // per sequence: the row of its last token
  std::vector<int32_t> tables;     // [sequences][max_blocks] block ids
  int64_t max_blocks = 1;
  // For backends that tile queries, in a batch with a prompt chunk:
  // QueryTiles of the sequences' runs (kernels/backend.h); else empty.
  std::vector<int32_t> query_tiles;

  int64_t num_tokens() const { return static_cast<int64_t>(ids.size()); }
  int64_t num_seqs() const { return static_cast<int64_t>(last_rows.size()); }
};

namespace {

// Checks one step's positions, block table and token ids against the model
// and the cache.
absl::Status ValidateStep(const SequenceStep& s, const ModelConfig& c,
                          const KvCache& cache) {
  if (s.tokens.empty()) {
    return absl::InvalidArgumentError("Forward: a step has no new tokens");
  }
  const int64_t num_new = static_cast<int64_t>(s.tokens.size());
  // Checked before `end` is formed, so a huge start_position cannot wrap.
  if (s.start_position < 0 ||
      s.start_position > c.max_position_embeddings - num_new) {
    return absl::InvalidArgumentError(
        absl::StrCat("Forward: positions [", s.start_position, ", +", num_new,
                     ") are outside [0, max_position_embeddings ",
                     c.max_position_embeddings, ")"));
  }
  const int64_t end = s.start_position + num_new;
  const int64_t needed_blocks = cache.BlocksFor(end);
  if (needed_blocks > static_cast<int64_t>(s.block_table->size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("Forward: block table of ", s.block_table->size(),
                     " blocks cannot hold ", end, " tokens"));
  }
  // Attention reads every block up to `end`, not only the new tokens' ones.
  for (int64_t b = 0; b < needed_blocks; ++b) {
    const int32_t block = (*s.block_table)[b];
    if (block < 0 || block >= cache.num_blocks()) {
      return absl::InvalidArgumentError(
          absl::StrCat("Forward: block ", block, " is not in the cache"));
    }
  }
  for (const int32_t id : s.tokens) {
    if (id < 0 || id >= c.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Forward: token id ", id, " outside [0, ", c.vocab_size, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<LlamaModel::HostBatch> LlamaModel::BuildBatch(
    absl::Span<const SequenceStep> steps, const KvCache& cache) const {
  const int64_t num_seqs = static_cast<int64_t>(steps.size());
  if (num_seqs == 0) return absl::InvalidArgumentError("Forward: no sequences");
  HostBatch batch;
  for (const SequenceStep& s : steps) {
    if (s.block_table == nullptr) {
      return absl::InvalidArgumentError("Forward: a step has no block table");
    }
    batch.max_blocks =
        std::max<int64_t>(batch.max_blocks, s.block_table->size());
  }
  batch.tables.assign(num_seqs * batch.max_blocks, 0);
  for (int64_t i = 0; i < num_seqs; ++i) {
    const SequenceStep& s = steps[i];
    OCTET_RETURN_IF_ERROR(ValidateStep(s, config_, cache));
    std::copy(s.block_table->begin(), s.block_table->end(),
              batch.tables.begin() + i * batch.max_blocks);
    for (size_t j = 0; j < s.tokens.size(); ++j) {
      const int64_t pos = s.start_position + static_cast<int64_t>(j);
      const int32_t block = (*s.block_table)[pos / cache.block_size()];
      batch.ids.push_back(s.tokens[j]);
      batch.positions.push_back(static_cast<int32_t>(pos));
      batch.slots.push_back(static_cast<int32_t>(block * cache.block_size() +
                                                 pos % cache.block_size()));
      batch.token_seq.push_back(static_cast<int32_t>(i));
    }
    batch.last_rows.push_back(static_cast<int32_t>(batch.ids.size() - 1));
  }
  // Query tiles only where a prompt chunk makes them pay; a decode batch's
  // shapes stay fixed for its graph.
  const int64_t tile = backend_.attention_query_tile();
  const bool prefill =
      std::any_of(steps.begin(), steps.end(),
                  [](const SequenceStep& s) { return s.tokens.size() > 1; });
  if (tile > 0 && prefill) {
    std::vector<int32_t> first, count;
    for (int64_t i = 0; i < num_seqs; ++i) {
      const int32_t n = static_cast<int32_t>(steps[i].tokens.size());
      first.push_back(batch.last_rows[i] - n + 1);
      count.push_back(n);
    }
    batch.query_tiles = QueryTiles(first, count, static_cast<int32_t>(tile));
  }
  return batch;
}

absl::Status LlamaModel::UploadBatch(const HostBatch& batch) {
  const int64_t num_seqs = batch.num_seqs();
  OCTET_RETURN_IF_ERROR(
      Reserve(batch.num_tokens(), num_seqs, num_seqs * batch.max_blocks));
  // One copy: the arrays at their places in the metadata buffer.
  const Scratch& s = scratch_;
  const MetadataLayout layout(s.tokens, s.seqs, s.table_entries);
  std::vector<int32_t> host(layout.tables + batch.tables.size());
  for (auto [src, at] : {std::pair{&batch.ids, layout.ids},
                         std::pair{&batch.positions, layout.positions},
                         std::pair{&batch.slots, layout.slots},
                         std::pair{&batch.token_seq, layout.token_seq},
                         std::pair{&batch.query_tiles, layout.query_tiles},
                         std::pair{&batch.last_rows, layout.last_rows},
                         std::pair{&batch.tables, layout.tables}}) {
    std::copy(src->begin(), src->end(), host.begin() + at);
  }
  return backend_.CopyToDevice(s.metadata.data(), host.data(),
                               host.size() * sizeof(int32_t));
}

AttentionMetadata LlamaModel::BatchMetadata(const HostBatch& batch,
                                            const KvCache& cache) const {
  const Scratch& s = scratch_;
  AttentionMetadata meta;
  meta.num_tokens = batch.num_tokens();
  meta.positions = s.positions;
  meta.slots = s.slots;
  meta.token_seq = s.token_seq;
  meta.block_tables = s.tables;
  meta.query_tiles = batch.query_tiles.empty() ? nullptr : s.query_tiles;
  meta.num_query_tiles = static_cast<int64_t>(batch.query_tiles.size() / 2);
  meta.max_blocks = batch.max_blocks;
  meta.block_size = cache.block_size();
  meta.sliding_window = config_.sliding_window.value_or(0);
  meta.full_heads = config_.num_heads;  // TP = 1's, for attention plans
  meta.full_kv_heads = config_.num_kv_heads;
  return meta;
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
  void* v = Offset(q, q_width + kv_width, act);
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
  OCTET_RETURN_IF_ERROR(backend_.Rope(q, tokens, heads, hd, qkv_width,
                                      meta.positions, inv_freq_.as<float>()));
  OCTET_RETURN_IF_ERROR(backend_.Rope(k, tokens, kv_heads, hd, qkv_width,
                                      meta.positions, inv_freq_.as<float>()));
  OCTET_RETURN_IF_ERROR(backend_.WriteKv(k, v, qkv_width, kv_heads, hd, meta,
                                         cache.k(l), cache.v(l)));
  OCTET_RETURN_IF_ERROR(backend_.Attention(q, qkv_width, heads, kv_heads, hd,
                                           meta, cache.k(l), cache.v(l),
                                           s.attn.data()));
  OCTET_RETURN_IF_ERROR(RowParallelLinear(
      layer.o, o_blocks_, layer.o_scale_shared, Input{.x = s.attn.data()},
      tokens, seqs, s.proj.data(), trace));
  return backend_.Add(s.h.data(), s.proj.data(), tokens * h);
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
  OCTET_RETURN_IF_ERROR(RowParallelLinear(layer.down, down_blocks_,
                                          layer.down_scale_shared, act, tokens,
                                          seqs, s.proj.data(), trace));
  return backend_.Add(s.h.data(), s.proj.data(), tokens * h);
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

absl::Status LlamaModel::Logits(int64_t tokens, int64_t num_seqs) {
  const ModelConfig& c = config_;
  const int64_t h = c.hidden_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  Scratch& s = scratch_;
  OCTET_RETURN_IF_ERROR(backend_.RmsNorm(s.h.data(), final_norm_.as<float>(),
                                         tokens, h, eps, s.x.data()));
  OCTET_RETURN_IF_ERROR(backend_.GatherRows(s.x.data(), h, s.last_rows,
                                            num_seqs, s.last_hidden.data()));
  if (plan_.size == 1) return LmHead(num_seqs, s.logits.data());
  // Vocabulary-parallel lm_head: each rank's [seqs][vocab / size] logits,
  // gathered as [size][seqs][vocab / size], laid out as [seqs][vocab].
  OCTET_RETURN_IF_ERROR(LmHead(num_seqs, s.local_logits.data()));
  const int64_t part = num_seqs * plan_.vocab;
  OCTET_RETURN_IF_ERROR(options_.comm->AllGather(s.local_logits.as<float>(),
                                                 part, s.gathered.as<float>()));
  return backend_.InterleaveParts(s.gathered.as<float>(), plan_.size, num_seqs,
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
                             KvCache& cache, ForwardTrace* trace) {
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
  const AttentionMetadata meta = BatchMetadata(batch, cache);
  if (bucket > 0) return ComputeWithGraph(bucket, meta, cache);
  return Compute(meta, batch.num_seqs(), cache, trace);
}

int64_t DecodeGraphBucket(int64_t batch, int64_t max_batch) {
  if (batch < 1 || batch > max_batch) return 0;
  int64_t bucket = 1;
  while (bucket < batch && bucket < 8) bucket *= 2;
  if (bucket < batch) bucket = (batch + 7) / 8 * 8;
  return std::min(bucket, max_batch);
}

int64_t LlamaModel::GraphBucket(absl::Span<const SequenceStep> steps,
                                const ForwardTrace* trace) const {
  // Captures need collectives that are stream work (NCCL's), and no trace
  // (which copies to the host mid-forward).
  if (!backend_.can_capture() || trace != nullptr) return 0;
  if (plan_.size > 1 && !options_.comm->capturable()) return 0;
  for (const SequenceStep& s : steps) {
    if (s.tokens.size() != 1) return 0;  // a prefill: shapes vary
  }
  return DecodeGraphBucket(static_cast<int64_t>(steps.size()),
                           options_.graph_max_batch);
}

void LlamaModel::PadBatch(int64_t bucket, int64_t width, HostBatch& batch) {
  const int64_t n = batch.num_seqs();
  std::vector<int32_t> tables(bucket * width, 0);
  for (int64_t i = 0; i < n; ++i) {
    std::copy_n(batch.tables.begin() + i * batch.max_blocks, batch.max_blocks,
                tables.begin() + i * width);
  }
  batch.tables = std::move(tables);
  batch.max_blocks = width;
  for (int64_t i = n; i < bucket; ++i) {
    batch.ids.push_back(0);
    batch.positions.push_back(0);
    batch.slots.push_back(-1);  // writes no KV
    batch.token_seq.push_back(static_cast<int32_t>(i));
    batch.last_rows.push_back(static_cast<int32_t>(i));
  }
}

absl::Status LlamaModel::Compute(const AttentionMetadata& meta,
                                 int64_t num_seqs, KvCache& cache,
                                 ForwardTrace* trace) {
  const int64_t tokens = meta.num_tokens;
  // The groups of the activations' dynamic FP8 scales: each sequence, or
  // each token when the checkpoint's scheme says so (per_token_scales_).
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
  return Logits(tokens, num_seqs);
}

absl::Status LlamaModel::ComputeWithGraph(int64_t bucket,
                                          const AttentionMetadata& meta,
                                          KvCache& cache) {
  DecodeGraph& g = graphs_[bucket];
  if (g.failed || g.runs++ == 0) {
    if (!g.failed) ++graph_stats_.warmups;
    return Compute(meta, bucket, cache, nullptr);
  }
  if (g.work == nullptr) {
    OCTET_RETURN_IF_ERROR(backend_.BeginCapture());
    const absl::Status computed = Compute(meta, bucket, cache, nullptr);
    absl::StatusOr<std::unique_ptr<CapturedWork>> work = backend_.EndCapture();
    if (!computed.ok() || !work.ok()) {
      // Not worth failing a step for: this bucket runs as usual from now.
      g.failed = true;
      std::fprintf(stderr,
                   "octet: decode batch %lld runs without a graph: its "
                   "capture failed: %s\n",
                   static_cast<long long>(bucket),
                   std::string(computed.ok() ? work.status().message()
                                             : computed.message())
                       .c_str());
      return Compute(meta, bucket, cache, nullptr);
    }
    g.work = *std::move(work);
    ++graph_stats_.captures;
  }
  ++graph_stats_.replays;
  return g.work->Replay();
}

void LlamaModel::InvalidateGraphs() {
  graphs_.clear();
  ++graph_stats_.invalidations;
}

}  // namespace octet
