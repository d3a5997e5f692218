// The device a model runs on: memory and the operations of a Llama forward
// pass, behind one interface so that the model (worker/) is written once.
// Implementations: the CPU backend (kernels/cpu/backend.h) and the CUDA
// backend (kernels/cuda/backend.h).
//
// Conventions for every operation:
//  - "device" pointers point into memory from Allocate (host memory for the
//    CPU backend); host pointers are named so.
//  - Activations are row-major [rows][cols] in activation_dtype() (binary32
//    on the CPU, bfloat16 on CUDA); arithmetic inside an op is binary32 and
//    rounds once at the end.
//  - Operations are enqueued in order on the backend's stream and may run
//    asynchronously; CopyToHost and Synchronize wait for them.
//  - Arguments come from the worker, not from users: a bad shape is a
//    programming error reported as InvalidArgument, never undefined behaviour
//    when it can be checked cheaply.
// A backend is used by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "base/dtype.h"
#include "kernels/device_clock.h"
#include "kernels/gemm_args.h"
#include "kernels/sampling.h"

namespace octet {

class Backend;

// Device memory owned by a backend, freed on destruction; or a view of
// memory another buffer owns (View), never freed. Movable only.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Backend* owner, void* data, size_t bytes)
      : owner_(owner), data_(data), bytes_(bytes) {}
  // `bytes` at `data`, owned elsewhere: valid while their owner is.
  static DeviceBuffer View(void* data, size_t bytes) {
    return DeviceBuffer(nullptr, data, bytes);
  }
  DeviceBuffer(DeviceBuffer&& other) noexcept { *this = std::move(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  Backend* owner_ = nullptr;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// A linear layer's weights, W[out][in], on the device.
struct LinearWeight {
  int64_t out = 0;
  int64_t in = 0;
  DType dtype = DType::kBf16;  // kF32 / kBf16 (unquantized) or kE4m3
  DeviceBuffer data;
  // kE4m3 only: the weight's per-tensor scale (one float on the device), or
  // with scale_per_row one per output row ([out] floats: the FP8 lm_head),
  // and for static activation quantization the activation scale (one
  // float).
  DeviceBuffer scale;
  DeviceBuffer input_scale;  // empty: dynamic activation scales
  bool scale_per_row = false;
  // The layer's shape before tensor-parallel slicing (TP = 1's); 0: out /
  // in. A backend whose GEMM chooses its arithmetic by shape (cuBLASLt)
  // plans for this one, so that the slice computes TP = 1's bits.
  int64_t full_out = 0, full_in = 0;
  // How `data` holds W: [out][in] rows as loaded, or as the backend laid it
  // out for its GEMM (Backend::LayOutWeight): bfloat16 or e4m3 panels
  // (kernels/cpu/panels.h) packed for `layout_k_blocks` K blocks.
  enum class Layout { kRows, kBf16Panels, kE4m3Panels };
  Layout layout = Layout::kRows;
  int64_t layout_k_blocks = 1;
};

// Where the tokens of one forward pass sit in the paged KV cache.
struct AttentionMetadata {
  int64_t num_tokens = 0;
  const int32_t* positions = nullptr;  // device [num_tokens]
  const int32_t* slots =
      nullptr;  // device [num_tokens]: cache slot of each token
  const int32_t* token_seq = nullptr;     // device [num_tokens]: its sequence
  const int32_t* block_tables = nullptr;  // device [num_seqs][max_blocks]
  int64_t max_blocks = 0;
  int64_t block_size = 0;
  int64_t sliding_window = 0;  // 0: attend to the whole context
  // Optional, for backends that tile queries (CUDA prefill): the batch's
  // tokens cut into runs of consecutive tokens of one sequence, as device
  // [num_query_tiles][2] (first token, tokens). Null: none given.
  const int32_t* query_tiles = nullptr;
  int64_t num_query_tiles = 0;
  // The model's head counts before tensor-parallel slicing (TP = 1's); 0:
  // the call's own. A backend that cuts attention by occupancy (CUDA:
  // parts of the keys) plans with these, so that a head's arithmetic does
  // not change with the TP degree.
  int64_t full_heads = 0, full_kv_heads = 0;
  // Set by the model when the backend's PlanAttention planned this
  // forward's Attention calls on the host; they then follow that plan.
  bool host_planned = false;
};

// The host's view of a forward's sequences, for a backend that plans its
// attention on the host (Backend::PlanAttention).
struct AttentionBatch {
  // [sequences + 1]: sequence s's new tokens are the rows
  // [query_start[s], query_start[s + 1]), consecutive positions.
  absl::Span<const int32_t> query_start;
  // [sequences]: the positions cached for s once its new tokens' keys are
  // written (its last new position + 1).
  absl::Span<const int32_t> context;
  // [sequences][max_blocks]: the block tables, as AttentionMetadata's.
  absl::Span<const int32_t> block_tables;
};

// The query tiles of a batch whose sequences' new tokens are the runs
// [first[s], first[s] + count[s]) of its rows: each run cut into tiles of at
// most `tile` tokens, as (first row, rows) pairs, flattened
// (AttentionMetadata::query_tiles).
inline std::vector<int32_t> QueryTiles(const std::vector<int32_t>& first,
                                       const std::vector<int32_t>& count,
                                       int32_t tile) {
  std::vector<int32_t> tiles;
  for (size_t s = 0; s < first.size(); ++s) {
    for (int32_t t = 0; t < count[s]; t += tile) {
      tiles.push_back(first[s] + t);
      tiles.push_back(count[s] - t < tile ? count[s] - t : tile);
    }
  }
  return tiles;
}

// Consecutive rows of an activation matrix that form one tensor for FP8
// activation scales: the sequences of a forward pass.
struct RowGroups {
  int64_t count = 1;
  // device [rows]: the group of each row, nondecreasing from 0 to count - 1,
  // every group non-empty; null when count == 1.
  const int32_t* row_group = nullptr;
};

// The input of an FP8 projection as the operation that produces it: the
// values RmsNorm(x, weight, eps) or SiluMul(x) would store, made again where
// they are needed (Backend::FusedAbsMax, FusedQuantize) so that they are
// never written in the activation dtype first.
struct FusedInput {
  enum class Op { kRmsNorm, kSiluMul };
  Op op = Op::kRmsNorm;
  const void* x = nullptr;        // RmsNorm's input, or SiluMul's [gate | up]
  const float* weight = nullptr;  // kRmsNorm
  float eps = 0.0f;               // kRmsNorm
};

enum class DeviceKind { kCpu, kCuda };

// Whether Backend::ScaleRows writes its rows over y or adds them to it.
enum class RowsInto { kWrite, kAdd };

// Work a backend recorded once (BeginCapture .. EndCapture) and runs again
// on each Replay, with the same arguments: the buffers it names must keep
// their addresses, and their contents are refilled before each replay.
class CapturedWork {
 public:
  virtual ~CapturedWork() = default;
  virtual absl::Status Replay() = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual DeviceKind kind() const = 0;
  virtual DType activation_dtype() const = 0;
  virtual std::string Describe() const = 0;
  // The CUDA stream the backend computes on (a cudaStream_t), for a
  // communicator that enqueues its collectives on it (NCCL); null for a
  // backend without one (the CPU).
  virtual void* cuda_stream() const { return nullptr; }

  // Memory.
  virtual absl::StatusOr<DeviceBuffer> Allocate(size_t bytes) = 0;
  virtual absl::Status CopyToDevice(void* dst, const void* host_src,
                                    size_t bytes) = 0;
  virtual absl::Status CopyToHost(void* host_dst, const void* src,
                                  size_t bytes) = 0;
  virtual absl::Status Synchronize() = 0;
  // A clock on the device's timeline for profiles (kernels/device_clock.h);
  // by default the host's, marking after Synchronize().
  virtual absl::StatusOr<std::unique_ptr<DeviceClock>> NewClock();

  // out[i] = table[ids[i] - row_begin] for ids in [row_begin, row_begin +
  // rows), zero otherwise (a vocabulary-parallel shard holds `rows` rows).
  // table_dtype: kF32 or kBf16.
  virtual absl::Status Embedding(const void* table, DType table_dtype,
                                 int64_t rows, int64_t cols, int64_t row_begin,
                                 const int32_t* ids, int64_t n, void* out) = 0;

  // out = x / sqrt(mean(x^2) + eps) * weight, per row; weight is binary32.
  virtual absl::Status RmsNorm(const void* x, const float* weight, int64_t rows,
                               int64_t cols, float eps, void* out) = 0;

  // x += y, elementwise over `count` activations.
  virtual absl::Status Add(void* x, const void* y, int64_t count) = 0;

  // Rotary embedding (rotate-half convention) in place on `heads` heads of
  // `head_dim` per row, the first at x + row * row_stride; the pair (i,
  // i + head_dim/2) turns by positions[row] * inv_freq[i] (inv_freq: binary32
  // device [head_dim / 2]).
  virtual absl::Status Rope(void* x, int64_t rows, int64_t heads,
                            int64_t head_dim, int64_t row_stride,
                            const int32_t* positions,
                            const float* inv_freq) = 0;

  // In place on `heads` heads of `head_dim` per row, the first at x + row *
  // row_stride (Rope's layout): each head becomes RmsNorm of it with
  // `weight` (binary32 [head_dim]), as RmsNorm does a row. Qwen3's q/k norms.
  virtual absl::Status RmsNormHeads(void* x, int64_t rows, int64_t heads,
                                    int64_t head_dim, int64_t row_stride,
                                    const float* weight, float eps) = 0;

  // x[r][c] += bias[c] for `rows` rows of `cols` activations; bias is
  // binary32 [cols]. Qwen2's q/k/v biases.
  virtual absl::Status AddBias(void* x, const float* bias, int64_t rows,
                               int64_t cols) = 0;

  // out[r][i] = silu(x[r][i]) * x[r][cols + i] for a row [gate | up] of
  // 2 * cols.
  virtual absl::Status SiluMul(const void* x, int64_t rows, int64_t cols,
                               void* out) = 0;

  // Copies K and V of each token (kv_heads * head_dim values at k + row *
  // row_stride and v + row * row_stride) into the cache at its slot; a
  // token whose slot is negative (a padding row) is skipped. The caches are
  // [slots][kv_heads][head_dim] in the activation dtype.
  virtual absl::Status WriteKv(const void* k, const void* v, int64_t row_stride,
                               int64_t kv_heads, int64_t head_dim,
                               const AttentionMetadata& meta, void* k_cache,
                               void* v_cache) = 0;

  // Rope then WriteKv on a fused [q | k | v] projection, as the model calls
  // them: rows of meta.num_tokens at qkv + t * row_stride, q's `heads`
  // heads and k's `kv_heads` turned by meta.positions, then k and v written
  // to the caches. The same bits as the two calls (the default); on CUDA
  // one kernel where they take two.
  virtual absl::Status RopeWriteKv(void* qkv, int64_t heads, int64_t kv_heads,
                                   int64_t head_dim, int64_t row_stride,
                                   const float* inv_freq,
                                   const AttentionMetadata& meta, void* k_cache,
                                   void* v_cache);

  // Causal paged attention with grouped KV heads: token t (sequence s,
  // position p) attends to positions [p - window + 1, p] of sequence s,
  // read from the caches through s's block table, softmax(q·k / sqrt(d)).
  // q rows at q + t * q_stride; out is [tokens][heads * head_dim].
  virtual absl::Status Attention(const void* q, int64_t q_stride, int64_t heads,
                                 int64_t kv_heads, int64_t head_dim,
                                 const AttentionMetadata& meta,
                                 const void* k_cache, const void* v_cache,
                                 void* out) = 0;
  // Plans the Attention calls of one forward on the host where the backend
  // does so (CUDA: a prefill through FlashInfer, whose schedule the host
  // makes): true when it planned, and the model then sets
  // meta.host_planned for the forward's Attention calls with these heads;
  // false (the default): Attention plans from the device metadata alone.
  // Called outside captures only, after the metadata is on the device. An
  // error fails the step, after its forward has run on the backend's own
  // plan (with several ranks the others are in its collectives).
  virtual absl::StatusOr<bool> PlanAttention(const AttentionBatch& /*batch*/,
                                             const AttentionMetadata& /*meta*/,
                                             int64_t /*heads*/,
                                             int64_t /*kv_heads*/,
                                             int64_t /*head_dim*/) {
    return false;
  }
  // The largest head_dim Attention takes (models are checked at load).
  virtual int64_t max_head_dim() const = 0;
  // Attention reads each key once for a tile of queries when the metadata
  // carries query tiles of at most this many tokens (prefill on CUDA); 0:
  // it takes none and the caller need not make them.
  virtual int64_t attention_query_tile() const { return 0; }

  // Lays a loaded weight out as this backend's GEMM reads it best, for
  // calls that sum K in `k_blocks` blocks (1, or GemmBlockSums's): w.data
  // may be replaced and w.layout set. The default keeps [out][in] rows; the
  // CPU packs bfloat16 and e4m3 weights into panels where its kernels are
  // AVX-512's.
  // Nothing may read a laid-out weight as rows afterwards (the embedding
  // table an lm_head is tied to is never laid out).
  virtual absl::Status LayOutWeight(LinearWeight& w, int64_t k_blocks);

  // y[rows][w.out] = x[rows][w.in] · Wᵀ for unquantized weights; y in the
  // activation dtype or kF32 (logits).
  virtual absl::Status Gemm(const void* x, int64_t rows, const LinearWeight& w,
                            void* y, DType y_dtype) = 0;

  // FP8 linear layers, in the steps tensor parallelism needs (docs/design.md):
  //   AbsMax -> [all-reduce MAX across ranks] -> Quantize -> GemmE4m3.
  // The activation scale is dynamic and per tensor, where the tensor is one
  // sequence's rows of x in this forward call (`groups`): a sequence is
  // quantized the same way whatever it is batched with.
  // absmax[g] (device floats) = fmaxf-fold of |x| over the rows of group g.
  virtual absl::Status AbsMax(const void* x, int64_t rows, int64_t cols,
                              const RowGroups& groups, float* absmax) = 0;
  // Rows of group g: q = encode(x * inv) with the contract's scale from
  // absmax[g]; scale[g] (device float) receives that scale.
  virtual absl::Status Quantize(const void* x, int64_t rows, int64_t cols,
                                const RowGroups& groups, const float* absmax,
                                uint8_t* q, float* scale) = 0;
  // AbsMax and Quantize of the [rows][cols] values `in` produces, bit for bit
  // what the producer followed by AbsMax or Quantize gives, without storing
  // them (cols: RmsNorm's width, or SiluMul's output width). Every backend
  // has them; fuses_input_quantization() says whether they save work there
  // (a GPU remakes the values in registers) or cost it (the CPU makes them
  // into scratch for each call, twice in all), for the model to choose.
  virtual bool fuses_input_quantization() const { return false; }
  virtual absl::Status FusedAbsMax(const FusedInput& in, int64_t rows,
                                   int64_t cols, const RowGroups& groups,
                                   float* absmax) = 0;
  virtual absl::Status FusedQuantize(const FusedInput& in, int64_t rows,
                                     int64_t cols, const RowGroups& groups,
                                     const float* absmax, uint8_t* q,
                                     float* scale) = 0;
  // AbsMax then Quantize (of x, or with `in` non-null of the values it
  // produces: FusedAbsMax then FusedQuantize), bit for bit, in one call,
  // where no collective comes between the two (every input but a
  // row-parallel one at TP > 1). absmax: scratch of groups.count floats.
  // The default makes the two calls; CUDA runs one launch: where every row
  // is its own group (a decode step's sequences, or per-token scales) a
  // block per row that makes the row, takes its absmax in the block's own
  // reduction and writes its codes and scale; for other groups (a
  // prefill's sequences) a cooperative grid that syncs between the absmax
  // and the codes (one group in memory keeps the whole-tensor kernels: two
  // launches). The two calls take three launches.
  virtual absl::Status QuantizeGroups(const void* x, const FusedInput* in,
                                      int64_t rows, int64_t cols,
                                      const RowGroups& groups, float* absmax,
                                      uint8_t* q, float* scale);
  // q = encode(x * (1 / *scale)) for a static activation scale.
  virtual absl::Status QuantizeStatic(const void* x, int64_t count,
                                      const float* scale, uint8_t* q) = 0;
  // Row r of y = (q_r · Wᵀ) · (q_scale[g] · w.scale) for r's group g, in the
  // activation dtype (a static scale: one group). With w.scale_per_row,
  // column c is scaled by q_scale[g] · w.scale[c] instead.
  virtual absl::Status GemmE4m3(const uint8_t* q, const float* q_scale,
                                const RowGroups& groups, int64_t rows,
                                const LinearWeight& w, void* y) = 0;

  // The ways GemmE4m3 with row groups (groups.count > 1) can run here, by
  // name, when there is more than one to choose from (CUDA: cuBLASLt's
  // outer-vector scales, or a binary32 product then a row-scaling pass;
  // their speed depends on the shape and rows, their roundings differ
  // slightly); no names: one way, nothing to choose. SetRowGroupGemmWay
  // fixes the way (an index into the names) of every later call against a
  // weight of w's layer shape (full_out x full_in, and its kind of weight
  // scale) with rows in (RowBucket(rows) / 2, RowBucket(rows)];
  // worker/gemm_choices.h measures the ways and chooses, alike on every
  // rank.
  struct GemmWays {
    // What a measurement of them is of: the device's model and the GEMM
    // library's version, not which device of the machine it is.
    std::string device;
    std::vector<std::string> names;
  };
  virtual GemmWays RowGroupGemmWays() const { return {}; }
  virtual absl::Status SetRowGroupGemmWay(int64_t rows, const LinearWeight& w,
                                          int way);

  // Row-parallel linear layers with sums that do not change with the
  // tensor-parallel degree (kernels/tree_sum.h). Optional: backends without
  // them answer false here and Unimplemented below.
  //   GemmBlockSums: sums[rows][w.out] (binary32) = x·Wᵀ with K cut into
  //   `k_blocks` equal blocks, each summed as if it were the whole K, the
  //   block sums added in TreeSum order. For e4m3 weights x is the codes and
  //   the sums are unscaled, so that ranks can add theirs first;
  //   ScaleRows: y = sums · (q_scale[g] · w.scale) for each row of group g
  //   (the two scales multiplied first: GemmE4m3's rounding; with
  //   w.scale_per_row, column c's own w.scale[c]), or y = sums when q_scale
  //   is null (unquantized sums, or sums scaled already), rounded once to
  //   y_dtype: binary32 or the activation dtype. y may be sums itself when
  //   y_dtype is binary32. With RowsInto::kAdd that value is added to y
  //   instead, as Add would add it (y = y + value, rounded again; y is not
  //   sums): a row-parallel layer's output into the residual stream, one
  //   kernel fewer.
  //   GemmScaledBlockSums: the two at once, for a layer with no collective
  //   between them (one rank): y as GemmBlockSums into `sums` (binary32
  //   [rows][w.out] scratch) then ScaleRows from it give, bit for bit. The
  //   default runs the two; CUDA adds the blocks in the scaling kernel,
  //   one kernel fewer (`sums` holds the one block's sums, or is unused).
  virtual bool has_block_sums() const { return false; }
  virtual absl::Status GemmBlockSums(const void* x, int64_t rows,
                                     const LinearWeight& w, int64_t k_blocks,
                                     float* sums);
  virtual absl::Status ScaleRows(const float* sums, int64_t rows,
                                 const float* q_scale, const RowGroups& groups,
                                 const LinearWeight& w, void* y, DType y_dtype,
                                 RowsInto into);
  virtual absl::Status GemmScaledBlockSums(
      const void* x, int64_t rows, const LinearWeight& w, int64_t k_blocks,
      const float* q_scale, const RowGroups& groups, float* sums, void* y,
      DType y_dtype, RowsInto into);

  // Sampling: a token for each row (kernels/sampling.h has the rules) from
  // the binary32 logits [*][vocab] on the device; only the tokens come back.
  // The CPU runs the host reference (SampleOne) on each row where it lies;
  // CUDA its own kernels. Three calls, so that a decode graph can hold the
  // device work between the step's one copy up and its one wait:
  //  - StageSample, host work (never captured): checks `rows` and lays them
  //    out on the device as `layout` says (SampleLayout); answers what it
  //    staged.
  //  - SampleStaged, device work (capturable): the staged rows' tokens from
  //    `logits`, left for TakeSampled. A capture of it serves every later
  //    staging of the same shape (SampleStaging::rows, ::sorts) as long as
  //    no staging since has moved the buffers (SampleStaging::moved).
  //  - TakeSampled, a host wait: the first out.size() tokens of the last
  //    SampleStaged.
  // Sample runs the three in a row.
  virtual absl::StatusOr<SampleStaging> StageSample(
      int64_t vocab, absl::Span<const SampleRow> rows,
      const SampleLayout& layout) = 0;
  virtual absl::Status SampleStaged(const float* logits, int64_t vocab) = 0;
  virtual absl::Status TakeSampled(absl::Span<SampledToken> out) = 0;
  absl::Status Sample(const float* logits, int64_t vocab,
                      absl::Span<const SampleRow> rows, SampledToken* out);

  // Capture (CUDA graphs): between BeginCapture and EndCapture the backend
  // records the operations it is given instead of running them, and
  // EndCapture returns them as CapturedWork. Only device work may be
  // captured: Allocate, CopyToDevice, CopyToHost, Synchronize, StageSample
  // and TakeSampled fail (FailedPrecondition) while capturing. EndCapture ends
  // a capture also after an operation failed in it. Optional: backends that
  // cannot capture answer false here and Unimplemented below.
  virtual bool can_capture() const { return false; }
  virtual absl::Status BeginCapture();
  virtual absl::StatusOr<std::unique_ptr<CapturedWork>> EndCapture();

  // out[r][p * cols + c] = parts[p][r][c] for p < num_parts (binary32): the
  // vocabulary-parallel logits the ranks gathered ([rank][rows][cols]) laid
  // out as one row per sequence.
  virtual absl::Status InterleaveParts(const float* parts, int64_t num_parts,
                                       int64_t rows, int64_t cols,
                                       float* out) = 0;

  // out[i] = x[rows[i]] for `n` row indices (device int32).
  virtual absl::Status GatherRows(const void* x, int64_t cols,
                                  const int32_t* rows, int64_t n,
                                  void* out) = 0;

 protected:
  friend class DeviceBuffer;
  virtual void Free(void* data) = 0;
};

inline DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    if (owner_ != nullptr && data_ != nullptr) owner_->Free(data_);
    owner_ = other.owner_;
    data_ = other.data_;
    bytes_ = other.bytes_;
    other.owner_ = nullptr;
    other.data_ = nullptr;
    other.bytes_ = 0;
  }
  return *this;
}

inline absl::Status Backend::QuantizeGroups(const void* x, const FusedInput* in,
                                            int64_t rows, int64_t cols,
                                            const RowGroups& groups,
                                            float* absmax, uint8_t* q,
                                            float* scale) {
  absl::Status s = in != nullptr ? FusedAbsMax(*in, rows, cols, groups, absmax)
                                 : AbsMax(x, rows, cols, groups, absmax);
  if (!s.ok()) return s;
  return in != nullptr
             ? FusedQuantize(*in, rows, cols, groups, absmax, q, scale)
             : Quantize(x, rows, cols, groups, absmax, q, scale);
}

inline absl::Status Backend::LayOutWeight(LinearWeight&, int64_t k_blocks) {
  if (k_blocks < 1) {
    return absl::InvalidArgumentError("LayOutWeight: k_blocks must be >= 1");
  }
  return absl::OkStatus();
}

inline absl::Status Backend::SetRowGroupGemmWay(int64_t, const LinearWeight&,
                                                int) {
  return absl::UnimplementedError(Describe() +
                                  " runs row-group GEMMs one way only");
}

inline absl::Status Backend::GemmBlockSums(const void*, int64_t,
                                           const LinearWeight&, int64_t,
                                           float*) {
  return absl::UnimplementedError(Describe() + " has no GemmBlockSums");
}

inline absl::Status Backend::ScaleRows(const float*, int64_t, const float*,
                                       const RowGroups&, const LinearWeight&,
                                       void*, DType, RowsInto) {
  return absl::UnimplementedError(Describe() + " has no ScaleRows");
}

inline absl::Status Backend::RopeWriteKv(void* qkv, int64_t heads,
                                         int64_t kv_heads, int64_t head_dim,
                                         int64_t row_stride,
                                         const float* inv_freq,
                                         const AttentionMetadata& meta,
                                         void* k_cache, void* v_cache) {
  absl::Status s = Rope(qkv, meta.num_tokens, heads + kv_heads, head_dim,
                        row_stride, meta.positions, inv_freq);
  if (!s.ok()) return s;
  const size_t elem = DTypeSize(activation_dtype());
  char* k = static_cast<char*>(qkv) + heads * head_dim * elem;
  char* v = k + kv_heads * head_dim * elem;
  return WriteKv(k, v, row_stride, kv_heads, head_dim, meta, k_cache, v_cache);
}

inline absl::Status Backend::GemmScaledBlockSums(
    const void* x, int64_t rows, const LinearWeight& w, int64_t k_blocks,
    const float* q_scale, const RowGroups& groups, float* sums, void* y,
    DType y_dtype, RowsInto into) {
  absl::Status s = GemmBlockSums(x, rows, w, k_blocks, sums);
  if (!s.ok()) return s;
  return ScaleRows(sums, rows, q_scale, groups, w, y, y_dtype, into);
}

inline absl::StatusOr<std::unique_ptr<DeviceClock>> Backend::NewClock() {
  return std::make_unique<HostClock>([this] { return Synchronize(); });
}

inline absl::Status Backend::BeginCapture() {
  return absl::UnimplementedError(Describe() + " cannot capture work");
}

inline absl::Status Backend::Sample(const float* logits, int64_t vocab,
                                    absl::Span<const SampleRow> rows,
                                    SampledToken* out) {
  if (rows.empty()) return absl::OkStatus();
  absl::StatusOr<SampleStaging> staged = StageSample(vocab, rows, {});
  if (!staged.ok()) return staged.status();
  absl::Status s = SampleStaged(logits, vocab);
  if (!s.ok()) return s;
  return TakeSampled(absl::MakeSpan(out, rows.size()));
}

inline absl::StatusOr<std::unique_ptr<CapturedWork>> Backend::EndCapture() {
  return absl::UnimplementedError(Describe() + " cannot capture work");
}

inline DeviceBuffer::~DeviceBuffer() {
  if (owner_ != nullptr && data_ != nullptr) owner_->Free(data_);
}

}  // namespace octet
