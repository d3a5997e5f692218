// CUDA sampling kernels for CudaSampler; see sampling.h for the design and
// kernels/sampling.cc for the host reference each step mirrors.
#include <algorithm>
#include <climits>
#include <cstring>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/device/device_segmented_sort.cuh>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/sampling.h"

namespace octet {
namespace {

constexpr int kPenalizeThreads = 256;
constexpr int kDrawThreads = 512;

// One row as the kernels read it.
struct DeviceRow {
  int64_t logits_row;
  uint64_t seed;
  int64_t position;
  int64_t top_k;
  float temperature, top_p, penalty;
  int32_t history_begin, history_end;
  int32_t segment;  // its segment of the sort; -1 for a greedy row
  int32_t logprob;  // 1: return the log-probability
};

struct DeviceResult {
  int32_t id;
  float logprob;
};

// The host's order key (Sampler::Sample): NaN is -inf, and -0 is +0 so that
// the radix sort sees the two zeros as the tie they are.
__device__ inline float SortKey(float v) {
  if (isnan(v)) return -INFINITY;
  return v == 0.0f ? 0.0f : v;
}

__global__ void __launch_bounds__(kPenalizeThreads)
    PenalizeKernel(const float* __restrict__ logits, int64_t vocab,
                   const DeviceRow* __restrict__ rows,
                   const int32_t* __restrict__ history, float* penalized,
                   float* keys, int32_t* ids) {
  const DeviceRow r = rows[blockIdx.x];
  const float* src = logits + r.logits_row * vocab;
  float* dst = penalized + blockIdx.x * vocab;
  for (int64_t i = threadIdx.x; i < vocab; i += kPenalizeThreads) {
    dst[i] = src[i];
  }
  __syncthreads();
  // A token repeated in the history writes the same value twice: each
  // write starts from the unpenalized logit, so the penalty applies once.
  if (r.penalty != 1.0f) {
    for (int32_t h = r.history_begin + threadIdx.x; h < r.history_end;
         h += kPenalizeThreads) {
      const int32_t id = history[h];
      if (id < 0 || id >= vocab) continue;
      const float v = src[id];
      dst[id] = v > 0 ? v / r.penalty : v * r.penalty;
    }
  }
  if (r.segment < 0) return;
  __syncthreads();
  float* k = keys + r.segment * vocab;
  int32_t* d = ids + r.segment * vocab;
  for (int64_t i = threadIdx.x; i < vocab; i += kPenalizeThreads) {
    k[i] = SortKey(dst[i]);
    d[i] = static_cast<int32_t>(i);
  }
}

// Block-wide helpers of DrawKernel. Every thread of the block calls each
// one and receives the result; they share one TempStorage, so each begins
// with a barrier.
struct Candidate {
  float value;
  int64_t index;
};

// ArgmaxIndex's rule: larger wins, lower index on ties, NaN never.
struct BetterCandidate {
  __device__ Candidate operator()(const Candidate& a,
                                  const Candidate& b) const {
    return b.value > a.value || (b.value == a.value && b.index < a.index) ? b
                                                                          : a;
  }
};

using Reduce = cub::BlockReduce<double, kDrawThreads>;
using ReduceCandidate = cub::BlockReduce<Candidate, kDrawThreads>;
using ReduceIndex = cub::BlockReduce<int64_t, kDrawThreads>;
using Scan = cub::BlockScan<double, kDrawThreads>;

union TempStorage {
  Reduce::TempStorage reduce;
  ReduceCandidate::TempStorage candidate;
  ReduceIndex::TempStorage index;
  Scan::TempStorage scan;
};

// Broadcasts thread 0's `v` to the block.
template <typename T>
__device__ T Broadcast(T v) {
  __shared__ T slot;
  __syncthreads();
  if (threadIdx.x == 0) slot = v;
  __syncthreads();
  return slot;
}

__device__ int32_t BlockArgmax(const float* x, int64_t n, TempStorage& tmp) {
  Candidate best{-INFINITY, n};  // index n: "none yet", loses every tie
  for (int64_t i = threadIdx.x; i < n; i += kDrawThreads) {
    best = BetterCandidate()(best, Candidate{x[i], i});
  }
  __syncthreads();
  best = ReduceCandidate(tmp.candidate).Reduce(best, BetterCandidate());
  const int64_t index = Broadcast(best.index);
  return index < n ? static_cast<int32_t>(index) : 0;
}

// Σ of f(i) over [0, n), in binary64.
template <typename F>
__device__ double BlockSum(int64_t n, F f, TempStorage& tmp) {
  double sum = 0;
  for (int64_t i = threadIdx.x; i < n; i += kDrawThreads) sum += f(i);
  __syncthreads();
  return Broadcast(Reduce(tmp.reduce).Sum(sum));
}

// The first i in [0, n) whose inclusive prefix sum of f reaches the test
// `reached(prefix)`; n when none does. The prefix sums run tile by tile,
// carrying the sum of the tiles before.
template <typename F, typename Reached>
__device__ int64_t FirstPrefixReaching(int64_t n, F f, Reached reached,
                                       TempStorage& tmp) {
  double carry = 0;
  for (int64_t base = 0; base < n; base += kDrawThreads) {
    const int64_t i = base + threadIdx.x;
    const double v = i < n ? f(i) : 0.0;
    double prefix, tile_sum;
    __syncthreads();
    Scan(tmp.scan).InclusiveSum(v, prefix, tile_sum);
    const int64_t hit = i < n && reached(carry + prefix) ? i : INT64_MAX;
    __syncthreads();
    const int64_t first = Broadcast(ReduceIndex(tmp.index).Reduce(
        hit, [](int64_t a, int64_t b) { return a < b ? a : b; }));
    if (first != INT64_MAX) return first;
    carry += tile_sum;
  }
  return n;
}

// Sampler::Sample on a sorted row: keys descending, ids their tokens.
__device__ int32_t Draw(const DeviceRow& r, const float* keys,
                        const int32_t* ids, const float* penalized,
                        int64_t vocab, TempStorage& tmp) {
  const float top = keys[0];
  // An infinite top logit takes all the mass, and no number at all leaves
  // none: both are the greedy rule's cases.
  if (!isfinite(top)) return BlockArgmax(penalized, vocab, tmp);
  int64_t keep = r.top_k > 0 && r.top_k < vocab ? r.top_k : vocab;
  const double t = r.temperature;
  auto p = [&](int64_t i) {
    return exp((static_cast<double>(keys[i]) - static_cast<double>(top)) / t);
  };
  double z = BlockSum(keep, p, tmp);
  if (r.top_p < 1.0f) {
    // Nucleus: the shortest prefix whose mass reaches top_p.
    const double top_p = r.top_p;
    const int64_t last = FirstPrefixReaching(
        keep, [&](int64_t i) { return p(i) / z; },
        [&](double mass) { return mass >= top_p; }, tmp);
    if (last < keep) keep = last + 1;
    z = BlockSum(keep, p, tmp);
  }
  const double u = UniformDraw(r.seed, r.position) * z;
  const int64_t chosen = FirstPrefixReaching(
      keep, p, [&](double acc) { return u < acc; }, tmp);
  return ids[chosen < keep ? chosen : keep - 1];
}

// LogProb (kernels/sampling.cc) of `id` in the penalized row.
__device__ float BlockLogProb(const float* x, int64_t vocab, int32_t id,
                              TempStorage& tmp) {
  auto key = [&](int64_t i) {
    return isnan(x[i]) ? -INFINITY : static_cast<double>(x[i]);
  };
  double max = -INFINITY;
  for (int64_t i = threadIdx.x; i < vocab; i += kDrawThreads) {
    max = fmax(max, key(i));
  }
  __syncthreads();
  max = Broadcast(Reduce(tmp.reduce).Reduce(max, [](double a, double b) {
    return fmax(a, b);
  }));
  if (max == INFINITY) {  // the +inf logits share all the mass
    const double count = BlockSum(
        vocab, [&](int64_t i) { return x[i] == INFINITY ? 1.0 : 0.0; }, tmp);
    return x[id] == INFINITY ? static_cast<float>(-log(count)) : -INFINITY;
  }
  if (max == -INFINITY) return -INFINITY;
  const double sum = BlockSum(
      vocab, [&](int64_t i) { return exp(key(i) - max); }, tmp);
  return static_cast<float>(key(id) - max - log(sum));
}

__global__ void __launch_bounds__(kDrawThreads)
    DrawKernel(const DeviceRow* __restrict__ rows, const float* penalized,
               int64_t vocab, const float* sorted_keys,
               const int32_t* sorted_ids, DeviceResult* out) {
  __shared__ TempStorage tmp;
  const DeviceRow r = rows[blockIdx.x];
  const float* x = penalized + blockIdx.x * vocab;
  const int32_t id = r.segment < 0
                         ? BlockArgmax(x, vocab, tmp)
                         : Draw(r, sorted_keys + r.segment * vocab,
                                sorted_ids + r.segment * vocab, x, vocab, tmp);
  const float logprob = r.logprob ? BlockLogProb(x, vocab, id, tmp) : 0.0f;
  if (threadIdx.x == 0) out[blockIdx.x] = DeviceResult{id, logprob};
}

// Rounds up to a multiple of 256 bytes, the alignment of each piece of a
// staging buffer.
size_t Align(size_t bytes) { return (bytes + 255) / 256 * 256; }

// A call's rows laid out for the device: each row's parameters, the
// histories of the rows with a repetition penalty, and the sort's segment
// offsets (one segment per row that draws).
struct HostRows {
  std::vector<DeviceRow> rows;
  std::vector<int32_t> history;
  std::vector<int32_t> offsets;  // segments + 1
  int64_t segments = 0;
};

absl::StatusOr<HostRows> LayOutRows(absl::Span<const SampleRow> rows,
                                    int64_t vocab) {
  if (vocab <= 0 || vocab > INT32_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("CudaSampler: vocab ", vocab, " outside [1, 2^31)"));
  }
  HostRows h;
  h.rows.resize(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const SampleRow& s = rows[i];
    const bool greedy = s.params.temperature == 0.0f || vocab == 1;
    h.rows[i] = DeviceRow{
        .logits_row = s.logits_row,
        .seed = s.params.seed,
        .position = s.position,
        .top_k = s.params.top_k,
        .temperature = s.params.temperature,
        .top_p = s.params.top_p,
        .penalty = s.repetition_penalty,
        .history_begin = static_cast<int32_t>(h.history.size()),
        .history_end = 0,
        .segment = greedy ? -1 : static_cast<int32_t>(h.segments++),
        .logprob = s.logprob ? 1 : 0,
    };
    if (s.repetition_penalty != 1.0f) {
      h.history.insert(h.history.end(), s.history.begin(), s.history.end());
    }
    h.rows[i].history_end = static_cast<int32_t>(h.history.size());
  }
  if (h.segments * vocab > INT32_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("CudaSampler: ", h.segments, " drawing rows of ", vocab,
                     " logits are more than one sort takes"));
  }
  h.offsets.resize(h.segments + 1);
  for (int64_t s = 0; s <= h.segments; ++s) {
    h.offsets[s] = static_cast<int32_t>(s * vocab);
  }
  return h;
}

// Where the staged rows are on the device.
struct StagedRows {
  const DeviceRow* rows;
  const int32_t* history;
  const int32_t* offsets;
};

}  // namespace

// Device and pinned buffers, grown to the largest call and kept.
struct CudaSampler::Scratch {
  ~Scratch() {
    for (void* p : {penalized, keys, keys_sorted, ids, ids_sorted, sort_temp,
                    staged, results}) {
      if (p != nullptr) cudaFree(p);
    }
    if (host_staging != nullptr) cudaFreeHost(host_staging);
    if (host_results != nullptr) cudaFreeHost(host_results);
  }

  // Grows the device buffer `p` of `*have` bytes to at least `want`.
  static absl::Status Grow(void** p, size_t* have, size_t want) {
    if (*have >= want) return absl::OkStatus();
    if (*p != nullptr) cudaFree(*p);  // waits for the kernels using it
    *p = nullptr;
    *have = 0;
    OCTET_CUDA_RETURN_IF_ERROR(cudaMalloc(p, want));
    *have = want;
    return absl::OkStatus();
  }
  static absl::Status GrowPinned(void** p, size_t* have, size_t want) {
    if (*have >= want) return absl::OkStatus();
    if (*p != nullptr) cudaFreeHost(*p);
    *p = nullptr;
    *have = 0;
    OCTET_CUDA_RETURN_IF_ERROR(cudaMallocHost(p, want));
    *have = want;
    return absl::OkStatus();
  }

  // Sends the rows' layout up in one copy through pinned memory.
  absl::StatusOr<StagedRows> Stage(const HostRows& h, cudaStream_t stream);
  // Grows the work buffers for `n` rows, `segments` of them drawing.
  absl::Status GrowWork(int64_t n, int64_t segments, int64_t vocab);
  // Sorts each drawing row's keys with their ids, descending, stably.
  absl::Status SortSegments(int64_t segments, int64_t vocab,
                            const int32_t* d_offsets, cudaStream_t stream);
  // Brings the `n` results back and waits for the stream.
  absl::Status Fetch(int64_t n, SampledToken* out, cudaStream_t stream);

  // [rows][vocab] penalized logits; [segments][vocab] keys and ids, before
  // and after the sort; the sort's own scratch.
  void *penalized = nullptr, *keys = nullptr, *keys_sorted = nullptr;
  void *ids = nullptr, *ids_sorted = nullptr, *sort_temp = nullptr;
  size_t penalized_bytes = 0, keys_bytes = 0, keys_sorted_bytes = 0;
  size_t ids_bytes = 0, ids_sorted_bytes = 0, sort_temp_bytes = 0;
  // What goes up in one copy: rows, histories, segment offsets; and what
  // comes back: one result per row.
  void *staged = nullptr, *host_staging = nullptr;
  size_t staged_bytes = 0, host_staging_bytes = 0;
  void *results = nullptr, *host_results = nullptr;
  size_t results_bytes = 0, host_results_bytes = 0;
};

CudaSampler::CudaSampler(std::unique_ptr<Scratch> scratch)
    : scratch_(std::move(scratch)) {}
CudaSampler::~CudaSampler() = default;

absl::StatusOr<std::unique_ptr<CudaSampler>> CudaSampler::Create() {
  return std::unique_ptr<CudaSampler>(
      new CudaSampler(std::make_unique<Scratch>()));
}

absl::StatusOr<StagedRows> CudaSampler::Scratch::Stage(const HostRows& h,
                                                       cudaStream_t stream) {
  const size_t rows_bytes = Align(h.rows.size() * sizeof(DeviceRow));
  const size_t history_bytes = Align(h.history.size() * sizeof(int32_t));
  const size_t offsets_bytes = Align(h.offsets.size() * sizeof(int32_t));
  const size_t staged_size = rows_bytes + history_bytes + offsets_bytes;
  OCTET_RETURN_IF_ERROR(
      GrowPinned(&host_staging, &host_staging_bytes, staged_size));
  OCTET_RETURN_IF_ERROR(Grow(&staged, &staged_bytes, staged_size));
  char* host = static_cast<char*>(host_staging);
  std::memcpy(host, h.rows.data(), h.rows.size() * sizeof(DeviceRow));
  std::memcpy(host + rows_bytes, h.history.data(),
              h.history.size() * sizeof(int32_t));
  std::memcpy(host + rows_bytes + history_bytes, h.offsets.data(),
              h.offsets.size() * sizeof(int32_t));
  OCTET_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(staged, host, staged_size,
                                             cudaMemcpyHostToDevice, stream));
  const char* dev = static_cast<const char*>(staged);
  return StagedRows{
      .rows = reinterpret_cast<const DeviceRow*>(dev),
      .history = reinterpret_cast<const int32_t*>(dev + rows_bytes),
      .offsets =
          reinterpret_cast<const int32_t*>(dev + rows_bytes + history_bytes),
  };
}

absl::Status CudaSampler::Scratch::GrowWork(int64_t n, int64_t segments,
                                            int64_t vocab) {
  const size_t row_floats = static_cast<size_t>(vocab) * sizeof(float);
  for (auto [p, have, want] :
       {std::tuple{&penalized, &penalized_bytes, n * row_floats},
        std::tuple{&keys, &keys_bytes, segments * row_floats},
        std::tuple{&keys_sorted, &keys_sorted_bytes, segments * row_floats},
        std::tuple{&ids, &ids_bytes, segments * row_floats},
        std::tuple{&ids_sorted, &ids_sorted_bytes, segments * row_floats},
        std::tuple{&results, &results_bytes, n * sizeof(DeviceResult)}}) {
    OCTET_RETURN_IF_ERROR(Grow(p, have, std::max<size_t>(want, 256)));
  }
  return absl::OkStatus();
}

absl::Status CudaSampler::Scratch::SortSegments(int64_t segments, int64_t vocab,
                                                const int32_t* d_offsets,
                                                cudaStream_t stream) {
  if (segments == 0) return absl::OkStatus();
  auto* k = static_cast<float*>(keys);
  auto* k_sorted = static_cast<float*>(keys_sorted);
  auto* i = static_cast<int32_t*>(ids);
  auto* i_sorted = static_cast<int32_t*>(ids_sorted);
  size_t temp_bytes = 0;
  OCTET_CUDA_RETURN_IF_ERROR(
      cub::DeviceSegmentedSort::StableSortPairsDescending(
          nullptr, temp_bytes, k, k_sorted, i, i_sorted, segments * vocab,
          segments, d_offsets, d_offsets + 1, stream));
  OCTET_RETURN_IF_ERROR(
      Grow(&sort_temp, &sort_temp_bytes, std::max<size_t>(temp_bytes, 256)));
  OCTET_CUDA_RETURN_IF_ERROR(
      cub::DeviceSegmentedSort::StableSortPairsDescending(
          sort_temp, temp_bytes, k, k_sorted, i, i_sorted, segments * vocab,
          segments, d_offsets, d_offsets + 1, stream));
  return absl::OkStatus();
}

absl::Status CudaSampler::Scratch::Fetch(int64_t n, SampledToken* out,
                                         cudaStream_t stream) {
  const size_t result_bytes = n * sizeof(DeviceResult);
  OCTET_RETURN_IF_ERROR(
      GrowPinned(&host_results, &host_results_bytes, result_bytes));
  OCTET_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
      host_results, results, result_bytes, cudaMemcpyDeviceToHost, stream));
  OCTET_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  const auto* r = static_cast<const DeviceResult*>(host_results);
  for (int64_t i = 0; i < n; ++i) out[i] = SampledToken{r[i].id, r[i].logprob};
  return absl::OkStatus();
}

absl::Status CudaSampler::Sample(const float* d_logits, int64_t vocab,
                                 absl::Span<const SampleRow> rows,
                                 SampledToken* out, cudaStream_t stream) {
  const int64_t n = static_cast<int64_t>(rows.size());
  if (n == 0) return absl::OkStatus();
  OCTET_ASSIGN_OR_RETURN(const HostRows h, LayOutRows(rows, vocab));
  Scratch& m = *scratch_;
  OCTET_ASSIGN_OR_RETURN(const StagedRows d, m.Stage(h, stream));
  OCTET_RETURN_IF_ERROR(m.GrowWork(n, h.segments, vocab));
  PenalizeKernel<<<static_cast<unsigned>(n), kPenalizeThreads, 0, stream>>>(
      d_logits, vocab, d.rows, d.history, static_cast<float*>(m.penalized),
      static_cast<float*>(m.keys), static_cast<int32_t*>(m.ids));
  OCTET_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  OCTET_RETURN_IF_ERROR(m.SortSegments(h.segments, vocab, d.offsets, stream));
  DrawKernel<<<static_cast<unsigned>(n), kDrawThreads, 0, stream>>>(
      d.rows, static_cast<const float*>(m.penalized), vocab,
      static_cast<const float*>(m.keys_sorted),
      static_cast<const int32_t*>(m.ids_sorted),
      static_cast<DeviceResult*>(m.results));
  OCTET_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return m.Fetch(n, out, stream);
}

}  // namespace octet
