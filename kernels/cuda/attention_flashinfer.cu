// FlashInferPrefill (attention_flashinfer.h): the host's plan of a forward
// and each layer's launch. Plan lays the batch out as FlashInfer's page
// table (CSR) and asks FlashInfer's PrefillPlan for the schedule; both go
// up in copies from pinned memory, which the next plan rewrites only after
// they are done (an event). Run fills FlashInfer's parameters from the
// plan and picks the instantiation of the plan's query tile and head_dim.
#include <cuda_runtime_api.h>

#include <cmath>
#include <exception>
#include <flashinfer/attention/scheduler.cuh>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/attention_flashinfer.h"
#include "kernels/cuda/attention_flashinfer_kernels.cuh"

namespace octet::cuda {
namespace {

namespace fp = flashinfer_prefill;

absl::Status CudaError(cudaError_t e, const char* what) {
  return absl::InternalError(
      absl::StrCat("FlashInfer prefill: ", what, ": ", cudaGetErrorString(e)));
}

// Device or pinned host memory that only grows; growing waits for the
// stream, since queued work may still read the old allocation.
class Memory {
 public:
  explicit Memory(bool pinned) : pinned_(pinned) {}
  ~Memory() { Free(); }
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  absl::Status Reserve(size_t bytes, cudaStream_t stream) {
    if (bytes <= bytes_) return absl::OkStatus();
    if (data_ != nullptr) {
      const cudaError_t e = cudaStreamSynchronize(stream);
      if (e != cudaSuccess) return CudaError(e, "waiting to grow a workspace");
      Free();
    }
    const cudaError_t e =
        pinned_ ? cudaMallocHost(&data_, bytes) : cudaMalloc(&data_, bytes);
    if (e != cudaSuccess) {
      data_ = nullptr;
      return CudaError(e, "allocating a workspace");
    }
    bytes_ = bytes;
    return absl::OkStatus();
  }

 private:
  void Free() {
    if (data_ != nullptr) pinned_ ? cudaFreeHost(data_) : cudaFree(data_);
    data_ = nullptr;
    bytes_ = 0;
  }
  bool pinned_;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// The batch as FlashInfer's page table, one int32 array laid out in four
// parts: query rows' indptr [B + 1], pages' indptr [B + 1], last page's
// fill [B], pages [sum]. Each part starts 16-byte aligned.
struct PageTable {
  std::vector<int32_t> host;
  size_t q_indptr = 0, kv_indptr = 0, last_page_len = 0, indices = 0;
};

absl::StatusOr<PageTable> MakePageTable(const AttentionBatch& batch,
                                        int64_t block_size) {
  const int64_t seqs = static_cast<int64_t>(batch.context.size());
  if (seqs == 0 || batch.query_start.size() != batch.context.size() + 1 ||
      batch.query_start[0] != 0 || batch.block_tables.size() % seqs != 0 ||
      block_size <= 0) {
    return absl::InvalidArgumentError(
        "FlashInfer prefill: the batch's arrays do not agree in length or "
        "its rows do not start at 0");
  }
  const int64_t max_blocks =
      static_cast<int64_t>(batch.block_tables.size()) / seqs;
  auto align = [](size_t n) { return (n + 3) / 4 * 4; };
  PageTable t;
  t.kv_indptr = align(seqs + 1);
  t.last_page_len = t.kv_indptr + align(seqs + 1);
  t.indices = t.last_page_len + align(seqs);
  t.host.assign(t.indices, 0);
  for (int64_t s = 0; s < seqs; ++s) {
    const int32_t rows = batch.query_start[s + 1] - batch.query_start[s];
    const int64_t context = batch.context[s];
    const int64_t pages = (context + block_size - 1) / block_size;
    if (rows < 1 || context < rows || pages > max_blocks) {
      return absl::InvalidArgumentError(absl::StrCat(
          "FlashInfer prefill: sequence ", s, " has ", rows,
          " new tokens and context ", context, " (", max_blocks, " blocks)"));
    }
    t.host[t.q_indptr + s + 1] = batch.query_start[s + 1];
    t.host[t.kv_indptr + s + 1] =
        t.host[t.kv_indptr + s] + static_cast<int32_t>(pages);
    t.host[t.last_page_len + s] =
        static_cast<int32_t>(context - (pages - 1) * block_size);
    const int32_t* table = batch.block_tables.data() + s * max_blocks;
    t.host.insert(t.host.end(), table, table + pages);
  }
  return t;
}

// The shapes the instantiations serve (attention_flashinfer_kernels.cuh).
bool ShapesServed(int64_t heads, int64_t kv_heads, int64_t head_dim) {
  return (head_dim == 64 || head_dim == 128) && kv_heads > 0 &&
         heads >= kv_heads && heads % kv_heads == 0;
}

// Runs f, turning FlashInfer's exceptions and CUDA errors into a status.
template <typename F>
absl::Status Guarded(const char* what, F f) {
  try {
    const cudaError_t e = f();
    if (e != cudaSuccess) return CudaError(e, what);
  } catch (const std::exception& ex) {
    return absl::InternalError(
        absl::StrCat("FlashInfer prefill: ", what, ": ", ex.what()));
  }
  return absl::OkStatus();
}

// What a plan is for: its batch's shape, with TP = 1's heads.
struct PlanShape {
  uint32_t seqs = 0, rows = 0, block_size = 0;
  uint32_t heads = 0, kv_heads = 0, head_dim = 0;
  int32_t window_left = -1;  // FlashInfer's: keys before a token's own
};

// FlashInfer's PrefillPlan (kMaterialize: the schedule written to the
// pinned buffer and copied to `ws`) or its sizing (the bytes it needs).
template <bool kMaterialize>
cudaError_t CallPlanner(const PlanShape& s, PageTable& t, size_t& float_bytes,
                        size_t& int_bytes, void* float_ws, void* int_ws,
                        void* int_pinned, flashinfer::PrefillPlanInfo& plan,
                        cudaStream_t stream) {
  int32_t* q_indptr = t.host.data() + t.q_indptr;
  int32_t* kv_indptr = t.host.data() + t.kv_indptr;
  return flashinfer::PrefillPlanImpl<kMaterialize, int32_t>(
      float_bytes, int_bytes, float_ws, float_bytes, int_ws, int_pinned,
      int_bytes, plan, q_indptr, kv_indptr, s.rows, s.seqs, s.heads, s.kv_heads,
      s.head_dim, s.head_dim, s.block_size,
      /*enable_cuda_graph=*/false, /*sizeof_dtype_o=*/2, s.window_left,
      /*fixed_split_size=*/-1, /*disable_split_kv=*/false,
      /*num_colocated_ctas=*/0, /*uniform_q_len=*/0,
      /*fixed_uniform_q_len=*/false, stream);
}

}  // namespace

struct FlashInferPrefill::State {
  // FlashInfer's workspaces: split keys' partial outputs (float), its
  // schedule (int) and the schedule's pinned twin; octet's page table on
  // the device and its pinned twin.
  Memory float_ws{false}, int_ws{false}, int_pinned{true};
  Memory table{false}, table_pinned{true};
  cudaEvent_t copied = nullptr;  // the last copies from the pinned twins
  bool copy_pending = false;

  bool planned = false;
  PlanShape shape;
  flashinfer::PrefillPlanInfo plan;
  PageTable layout;

  ~State() {
    if (copied != nullptr) {
      cudaEventSynchronize(copied);
      cudaEventDestroy(copied);
    }
  }
  template <typename T>
  T* At(size_t offset) const {
    return reinterpret_cast<T*>(static_cast<char*>(int_ws.data()) + offset);
  }
  int32_t* Table(size_t part) const {
    return static_cast<int32_t*>(table.data()) + part;
  }

  // Makes room for a plan of `shape` over `t`, once the last plan's copies
  // from the pinned twins are done.
  absl::Status Reserve(const PlanShape& shape, PageTable& t,
                       cudaStream_t stream) {
    if (copy_pending) {
      const cudaError_t e = cudaEventSynchronize(copied);
      if (e != cudaSuccess) return CudaError(e, "waiting for the last plan");
      copy_pending = false;
    }
    if (copied == nullptr) {
      const cudaError_t e =
          cudaEventCreateWithFlags(&copied, cudaEventDisableTiming);
      if (e != cudaSuccess) return CudaError(e, "creating an event");
    }
    size_t float_bytes = 0, int_bytes = 0;
    const absl::Status sized = Guarded("sizing the workspace", [&] {
      return CallPlanner<false>(shape, t, float_bytes, int_bytes, nullptr,
                                nullptr, nullptr, plan, stream);
    });
    if (!sized.ok()) return sized;
    const size_t table_bytes = t.host.size() * sizeof(int32_t);
    for (auto [m, bytes] :
         {std::pair{&float_ws, float_bytes}, std::pair{&int_ws, int_bytes},
          std::pair{&int_pinned, int_bytes}, std::pair{&table, table_bytes},
          std::pair{&table_pinned, table_bytes}}) {
      if (absl::Status r = m->Reserve(std::max<size_t>(bytes, 16), stream);
          !r.ok()) {
        return r;
      }
    }
    return absl::OkStatus();
  }

  // FlashInfer's schedule and the page table, up on `stream`; the event
  // marks their copies.
  absl::Status Schedule(const PlanShape& shape, PageTable& t,
                        cudaStream_t stream) {
    const size_t table_bytes = t.host.size() * sizeof(int32_t);
    std::copy(t.host.begin(), t.host.end(),
              static_cast<int32_t*>(table_pinned.data()));
    const absl::Status scheduled = Guarded("planning", [&] {
      size_t float_bytes = float_ws.bytes(), int_bytes = int_ws.bytes();
      const cudaError_t e =
          CallPlanner<true>(shape, t, float_bytes, int_bytes, float_ws.data(),
                            int_ws.data(), int_pinned.data(), plan, stream);
      if (e != cudaSuccess) return e;
      return cudaMemcpyAsync(table.data(), table_pinned.data(), table_bytes,
                             cudaMemcpyHostToDevice, stream);
    });
    // Recorded even after an error: a copy may have been queued. Without
    // the event, the stream is waited for now, so that no copy from the
    // pinned twins is left when the next plan rewrites them.
    const cudaError_t recorded = cudaEventRecord(copied, stream);
    copy_pending = recorded == cudaSuccess;
    if (recorded != cudaSuccess) cudaStreamSynchronize(stream);
    if (!scheduled.ok()) return scheduled;
    if (recorded != cudaSuccess) {
      return CudaError(recorded, "recording the plan's copies");
    }
    return absl::OkStatus();
  }
};

bool FlashInferPrefill::Built() { return true; }

const char* FlashInferPrefill::Version() { return OCTET_FLASHINFER_VERSION; }

bool FlashInferPrefill::Serves(int64_t heads, int64_t kv_heads,
                               int64_t head_dim, int cc) {
  // Machine code only for the architectures built (no PTX to fall back on).
  return ((cc == 89 && OCTET_FLASHINFER_SM89) ||
          (cc == 90 && OCTET_FLASHINFER_SM90)) &&
         ShapesServed(heads, kv_heads, head_dim);
}

FlashInferPrefill::FlashInferPrefill() : state_(std::make_unique<State>()) {}

FlashInferPrefill::~FlashInferPrefill() = default;

absl::Status FlashInferPrefill::Plan(const AttentionBatch& batch,
                                     int64_t block_size, int64_t sliding_window,
                                     int64_t full_heads, int64_t full_kv_heads,
                                     int64_t head_dim, cudaStream_t stream) {
  State& st = *state_;
  st.planned = false;
  if (!ShapesServed(full_heads, full_kv_heads, head_dim)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "FlashInfer prefill: ", full_heads, " heads over ", full_kv_heads,
        " KV heads of ", head_dim, " are not served"));
  }
  absl::StatusOr<PageTable> table = MakePageTable(batch, block_size);
  if (!table.ok()) return table.status();
  const PlanShape shape{
      .seqs = static_cast<uint32_t>(batch.context.size()),
      .rows = static_cast<uint32_t>(batch.query_start.back()),
      .block_size = static_cast<uint32_t>(block_size),
      .heads = static_cast<uint32_t>(full_heads),
      .kv_heads = static_cast<uint32_t>(full_kv_heads),
      .head_dim = static_cast<uint32_t>(head_dim),
      .window_left =
          sliding_window > 0 ? static_cast<int32_t>(sliding_window - 1) : -1,
  };
  if (absl::Status s = st.Reserve(shape, *table, stream); !s.ok()) return s;
  if (absl::Status s = st.Schedule(shape, *table, stream); !s.ok()) return s;
  st.shape = shape;
  st.layout = *std::move(table);
  st.planned = true;
  return absl::OkStatus();
}

absl::Status FlashInferPrefill::Run(const void* q, int64_t q_stride,
                                    int64_t heads, int64_t kv_heads,
                                    int64_t head_dim, const void* k_cache,
                                    const void* v_cache, void* out,
                                    cudaStream_t stream) {
  const State& st = *state_;
  if (!st.planned) {
    return absl::FailedPreconditionError("FlashInfer prefill: not planned");
  }
  // A rank's heads are a slice of the plan's (TP = 1's), in whole groups.
  const PlanShape& shape = st.shape;
  if (head_dim != shape.head_dim || kv_heads <= 0 || heads % kv_heads != 0 ||
      heads / kv_heads != shape.heads / shape.kv_heads ||
      kv_heads > shape.kv_heads) {
    return absl::FailedPreconditionError(absl::StrCat(
        "FlashInfer prefill: ", heads, " heads over ", kv_heads,
        " KV heads of ", head_dim, " are not the plan's ", shape.heads,
        " over ", shape.kv_heads, " of ", shape.head_dim));
  }
  using fp::DType;
  fp::Params p{};
  p.q = static_cast<DType*>(const_cast<void*>(q));
  p.paged_kv = flashinfer::paged_kv_t<DType, int32_t>(
      static_cast<uint32_t>(kv_heads), shape.block_size,
      static_cast<uint32_t>(head_dim), shape.seqs, flashinfer::QKVLayout::kNHD,
      static_cast<DType*>(const_cast<void*>(k_cache)),
      static_cast<DType*>(const_cast<void*>(v_cache)),
      st.Table(st.layout.indices), st.Table(st.layout.kv_indptr),
      st.Table(st.layout.last_page_len));
  p.q_indptr = st.Table(st.layout.q_indptr);
  p.o = static_cast<DType*>(out);
  p.lse = nullptr;
  p.group_size =
      flashinfer::uint_fastdiv(static_cast<uint32_t>(heads / kv_heads));
  p.sm_scale = 1.0 / std::sqrt(static_cast<double>(head_dim));
  p.rope_rcp_scale = 1.0;
  p.rope_rcp_theta = 1.0;
  p.num_qo_heads = static_cast<uint32_t>(heads);
  p.q_stride_n = static_cast<int32_t>(q_stride);
  p.q_stride_h = static_cast<int32_t>(head_dim);
  p.window_left = shape.window_left;
  const flashinfer::PrefillPlanInfo& plan = st.plan;
  p.request_indices = st.At<int32_t>(plan.request_indices_offset);
  p.qo_tile_indices = st.At<int32_t>(plan.qo_tile_indices_offset);
  p.kv_tile_indices = st.At<int32_t>(plan.kv_tile_indices_offset);
  p.o_indptr = st.At<int32_t>(plan.o_indptr_offset);
  p.kv_chunk_size_ptr = st.At<int32_t>(plan.kv_chunk_size_ptr_offset);
  p.padded_batch_size = static_cast<uint32_t>(plan.padded_batch_size);
  p.max_total_num_rows = static_cast<uint32_t>(plan.total_num_rows);
  DType* tmp_v = nullptr;
  float* tmp_s = nullptr;
  if (plan.split_kv) {
    p.merge_indptr = st.At<int32_t>(plan.merge_indptr_offset);
    tmp_v = reinterpret_cast<DType*>(static_cast<char*>(st.float_ws.data()) +
                                     plan.v_offset);
    tmp_s = reinterpret_cast<float*>(static_cast<char*>(st.float_ws.data()) +
                                     plan.s_offset);
  }
  return Guarded("launching", [&]() -> cudaError_t {
    auto launch = [&]<uint32_t kHeadDim>() -> cudaError_t {
      switch (plan.cta_tile_q) {
        case 16:
          return fp::Launch<16, kHeadDim>(p, tmp_v, tmp_s, stream);
        case 64:
          return fp::Launch<64, kHeadDim>(p, tmp_v, tmp_s, stream);
        case 128:
          return fp::Launch<128, kHeadDim>(p, tmp_v, tmp_s, stream);
      }
      return cudaErrorInvalidConfiguration;  // a tile not built
    };
    return head_dim == 64 ? launch.template operator()<64>()
                          : launch.template operator()<128>();
  });
}

}  // namespace octet::cuda
