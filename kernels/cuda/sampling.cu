// CUDA sampling kernels for CudaSampler; see sampling.h for the design and
// kernels/sampling.cc for the host reference each step mirrors.
#include <algorithm>
#include <climits>
#include <cstring>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/device/device_segmented_sort.cuh>
#include <tuple>
#include <utility>
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
  int32_t segment;  // its segment of the sort, or -1
  int32_t greedy;   // 1: the argmax (a sorted greedy row ignores its sort)
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
  const int32_t id = r.greedy
                         ? BlockArgmax(x, vocab, tmp)
                         : Draw(r, sorted_keys + r.segment * vocab,
                                sorted_ids + r.segment * vocab, x, vocab, tmp);
  const float logprob = r.logprob ? BlockLogProb(x, vocab, id, tmp) : 0.0f;
  if (threadIdx.x == 0) out[blockIdx.x] = DeviceResult{id, logprob};
}

// Rounds up to a multiple of 256 bytes, the alignment of each piece of a
// staging buffer.
size_t Align(size_t bytes) { return (bytes + 255) / 256 * 256; }

// A staging's rows laid out for the device: each row's parameters, the
// sort's segment offsets, and the histories of the rows with a repetition
// penalty.
struct HostRows {
  std::vector<DeviceRow> rows;
  std::vector<int32_t> offsets;  // segments + 1
  std::vector<int32_t> history;
  int64_t segments = 0;
};

// `rows` padded to plan.rows (kPaddingSampleRow), a sort segment for each
// row that draws or, in a fixed layout, for every row when plan.sorts.
absl::StatusOr<HostRows> LayOutRows(absl::Span<const SampleRow> rows,
                                    int64_t vocab, const SampleStaging& plan,
                                    bool fixed) {
  HostRows h;
  h.rows.resize(plan.rows);
  for (int64_t i = 0; i < plan.rows; ++i) {
    const SampleRow& s = i < static_cast<int64_t>(rows.size())
                             ? rows[i]
                             : kPaddingSampleRow;
    const bool draws = SampleRowDraws(s, vocab);
    const bool sorted = fixed ? plan.sorts : draws;
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
        .segment = sorted ? static_cast<int32_t>(h.segments++) : -1,
        .greedy = draws ? 0 : 1,
        .logprob = s.logprob ? 1 : 0,
    };
    if (s.repetition_penalty != 1.0f) {
      h.history.insert(h.history.end(), s.history.begin(), s.history.end());
    }
    if (h.history.size() > INT32_MAX) {
      return absl::InvalidArgumentError(
          "CudaSampler: histories longer than 2^31 tokens in all");
    }
    h.rows[i].history_end = static_cast<int32_t>(h.history.size());
  }
  if (h.segments * vocab > INT32_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("CudaSampler: ", h.segments, " sorted rows of ", vocab,
                     " logits are more than one sort takes"));
  }
  h.offsets.resize(h.segments + 1);
  for (int64_t s = 0; s <= h.segments; ++s) {
    h.offsets[s] = static_cast<int32_t>(s * vocab);
  }
  return h;
}

// Room for a staging's histories: a power of two of at least 4096 tokens,
// so that histories growing by a token a step move the buffer seldom.
size_t HistoryRoom(size_t tokens) {
  size_t room = 4096;
  while (room < tokens) room *= 2;
  return room;
}

}  // namespace

// Device and pinned buffers, grown to the largest staging and kept, and
// where the last staging put its rows.
struct CudaSampler::Scratch {
  ~Scratch() {
    for (void* p : {penalized, keys, keys_sorted, ids, ids_sorted, sort_temp,
                    staged, results}) {
      if (p != nullptr) cudaFree(p);
    }
    if (host_staging != nullptr) cudaFreeHost(host_staging);
    if (host_results != nullptr) cudaFreeHost(host_results);
    if (staged_copy != nullptr) cudaEventDestroy(staged_copy);
  }

  // Grows the device buffer `p` of `*have` bytes to at least `want`;
  // *moved when it did.
  static absl::Status Grow(void** p, size_t* have, size_t want, bool* moved) {
    if (*have >= want) return absl::OkStatus();
    if (*p != nullptr) cudaFree(*p);  // waits for the kernels using it
    *p = nullptr;
    *have = 0;
    *moved = true;
    OCTET_CUDA_RETURN_IF_ERROR(cudaMalloc(p, want));
    *have = want;
    return absl::OkStatus();
  }
  static absl::Status GrowPinned(void** p, size_t* have, size_t want,
                                 bool* moved) {
    if (*have >= want) return absl::OkStatus();
    if (*p != nullptr) cudaFreeHost(*p);
    *p = nullptr;
    *have = 0;
    *moved = true;
    OCTET_CUDA_RETURN_IF_ERROR(cudaMallocHost(p, want));
    *have = want;
    return absl::OkStatus();
  }

  // Grows the work buffers for `n` rows, `segments` of them sorted, and the
  // sort's scratch for those segments.
  absl::Status GrowWork(int64_t n, int64_t segments, int64_t vocab,
                        bool* moved);
  // The sort's scratch bytes for `segments` rows of `vocab` keys; CUB is
  // asked once per shape (a decode step stages the same shape each time).
  absl::StatusOr<size_t> SortTempBytes(int64_t segments, int64_t vocab);
  // The last shape CUB was asked about, and its answer.
  int64_t asked_segments = -1, asked_vocab = -1;
  size_t asked_bytes = 0;
  // Sends `h` up in one copy through pinned memory, with room for
  // `room_rows` rows and `room_segments` segments; sets rows, offsets and
  // history.
  absl::Status Upload(const HostRows& h, int64_t room_rows,
                      int64_t room_segments, cudaStream_t stream, bool* moved);
  // Sorts each segment's keys with their ids, descending, stably.
  absl::Status SortSegments(cudaStream_t stream);

  // [rows][vocab] penalized logits; [segments][vocab] keys and ids, before
  // and after the sort; the sort's own scratch.
  void *penalized = nullptr, *keys = nullptr, *keys_sorted = nullptr;
  void *ids = nullptr, *ids_sorted = nullptr, *sort_temp = nullptr;
  size_t penalized_bytes = 0, keys_bytes = 0, keys_sorted_bytes = 0;
  size_t ids_bytes = 0, ids_sorted_bytes = 0, sort_temp_bytes = 0;
  // What goes up in one copy: rows, segment offsets, histories; and what
  // comes back: one result per row.
  void *staged = nullptr, *host_staging = nullptr;
  size_t staged_bytes = 0, host_staging_bytes = 0;
  void *results = nullptr, *host_results = nullptr;
  size_t results_bytes = 0, host_results_bytes = 0;
  // Recorded after each copy up: host_staging is rewritten only once the
  // last copy from it is done (a step that failed never waited for it).
  cudaEvent_t staged_copy = nullptr;
  // A buffer a capture names moved since a staging last said so.
  bool moved = false;

  // The last staging: its shape, and where its pieces are on the device.
  int64_t staged_rows = 0, staged_segments = 0, staged_vocab = 0;
  const DeviceRow* rows = nullptr;
  const int32_t* offsets = nullptr;
  const int32_t* history = nullptr;
};

CudaSampler::CudaSampler(std::unique_ptr<Scratch> scratch)
    : scratch_(std::move(scratch)) {}
CudaSampler::~CudaSampler() = default;

absl::StatusOr<std::unique_ptr<CudaSampler>> CudaSampler::Create() {
  return std::unique_ptr<CudaSampler>(
      new CudaSampler(std::make_unique<Scratch>()));
}

absl::StatusOr<size_t> CudaSampler::Scratch::SortTempBytes(int64_t segments,
                                                           int64_t vocab) {
  if (segments == 0) return size_t{0};
  if (segments == asked_segments && vocab == asked_vocab) return asked_bytes;
  size_t bytes = 0;
  // A size query: no work is queued and no pointer is read.
  OCTET_CUDA_RETURN_IF_ERROR(
      cub::DeviceSegmentedSort::StableSortPairsDescending(
          nullptr, bytes, static_cast<const float*>(keys),
          static_cast<float*>(keys_sorted), static_cast<const int32_t*>(ids),
          static_cast<int32_t*>(ids_sorted), segments * vocab, segments,
          offsets, offsets + 1, cudaStream_t{}));
  asked_segments = segments;
  asked_vocab = vocab;
  asked_bytes = bytes;
  return bytes;
}

absl::Status CudaSampler::Scratch::GrowWork(int64_t n, int64_t segments,
                                            int64_t vocab, bool* moved) {
  const size_t row_floats = static_cast<size_t>(vocab) * sizeof(float);
  for (auto [p, have, want] :
       {std::tuple{&penalized, &penalized_bytes, n * row_floats},
        std::tuple{&keys, &keys_bytes, segments * row_floats},
        std::tuple{&keys_sorted, &keys_sorted_bytes, segments * row_floats},
        std::tuple{&ids, &ids_bytes, segments * row_floats},
        std::tuple{&ids_sorted, &ids_sorted_bytes, segments * row_floats},
        std::tuple{&results, &results_bytes, n * sizeof(DeviceResult)}}) {
    OCTET_RETURN_IF_ERROR(Grow(p, have, std::max<size_t>(want, 256), moved));
  }
  OCTET_ASSIGN_OR_RETURN(const size_t temp, SortTempBytes(segments, vocab));
  OCTET_RETURN_IF_ERROR(Grow(&sort_temp, &sort_temp_bytes,
                             std::max<size_t>(temp, 256), moved));
  return GrowPinned(&host_results, &host_results_bytes,
                    n * sizeof(DeviceResult), moved);
}

absl::Status CudaSampler::Scratch::Upload(const HostRows& h, int64_t room_rows,
                                          int64_t room_segments,
                                          cudaStream_t stream, bool* moved) {
  const size_t rows_bytes = Align(h.rows.size() * sizeof(DeviceRow));
  const size_t offsets_bytes = Align(h.offsets.size() * sizeof(int32_t));
  const size_t history_bytes = h.history.size() * sizeof(int32_t);
  const size_t used = rows_bytes + offsets_bytes + history_bytes;
  const size_t room = Align(room_rows * sizeof(DeviceRow)) +
                      Align((room_segments + 1) * sizeof(int32_t)) +
                      HistoryRoom(h.history.size()) * sizeof(int32_t);
  if (staged_copy == nullptr) {
    OCTET_CUDA_RETURN_IF_ERROR(
        cudaEventCreateWithFlags(&staged_copy, cudaEventDisableTiming));
  }
  OCTET_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(staged_copy));
  bool host_moved = false;  // no capture names host_staging: the copy is not
  OCTET_RETURN_IF_ERROR(
      GrowPinned(&host_staging, &host_staging_bytes, room, &host_moved));
  OCTET_RETURN_IF_ERROR(Grow(&staged, &staged_bytes, room, moved));
  char* host = static_cast<char*>(host_staging);
  std::memcpy(host, h.rows.data(), h.rows.size() * sizeof(DeviceRow));
  std::memcpy(host + rows_bytes, h.offsets.data(),
              h.offsets.size() * sizeof(int32_t));
  std::memcpy(host + rows_bytes + offsets_bytes, h.history.data(),
              history_bytes);
  OCTET_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(staged, host, used, cudaMemcpyHostToDevice, stream));
  OCTET_CUDA_RETURN_IF_ERROR(cudaEventRecord(staged_copy, stream));
  const char* dev = static_cast<const char*>(staged);
  rows = reinterpret_cast<const DeviceRow*>(dev);
  offsets = reinterpret_cast<const int32_t*>(dev + rows_bytes);
  history = reinterpret_cast<const int32_t*>(dev + rows_bytes + offsets_bytes);
  return absl::OkStatus();
}

absl::Status CudaSampler::Scratch::SortSegments(cudaStream_t stream) {
  if (staged_segments == 0) return absl::OkStatus();
  size_t temp_bytes = sort_temp_bytes;
  OCTET_CUDA_RETURN_IF_ERROR(
      cub::DeviceSegmentedSort::StableSortPairsDescending(
          sort_temp, temp_bytes, static_cast<const float*>(keys),
          static_cast<float*>(keys_sorted), static_cast<const int32_t*>(ids),
          static_cast<int32_t*>(ids_sorted), staged_segments * staged_vocab,
          staged_segments, offsets, offsets + 1, stream));
  return absl::OkStatus();
}

absl::StatusOr<SampleStaging> CudaSampler::Stage(
    absl::StatusOr<SampleStaging> planned, int64_t vocab,
    absl::Span<const SampleRow> rows, const SampleLayout& layout,
    cudaStream_t stream) {
  Scratch& m = *scratch_;
  m.staged_rows = 0;  // nothing to Run or Take until this staging holds
  OCTET_ASSIGN_OR_RETURN(SampleStaging plan, std::move(planned));
  OCTET_ASSIGN_OR_RETURN(const HostRows h,
                         LayOutRows(rows, vocab, plan, layout.padded_rows > 0));
  // Room for this staging and for `reserve_rows` rows, all sorted.
  const int64_t room_rows = std::max(plan.rows, layout.reserve_rows);
  const int64_t room_segments = std::max(h.segments, layout.reserve_rows);
  OCTET_RETURN_IF_ERROR(
      m.GrowWork(room_rows, room_segments, vocab, &m.moved));
  OCTET_RETURN_IF_ERROR(
      m.Upload(h, room_rows, room_segments, stream, &m.moved));
  m.staged_rows = plan.rows;
  m.staged_segments = h.segments;
  m.staged_vocab = vocab;
  plan.moved = m.moved;
  m.moved = false;
  return plan;
}

absl::Status CudaSampler::Run(const float* d_logits, int64_t vocab,
                              cudaStream_t stream) {
  Scratch& m = *scratch_;
  if (m.staged_rows == 0) {
    return absl::FailedPreconditionError("CudaSampler::Run: nothing staged");
  }
  if (vocab != m.staged_vocab) {
    return absl::InvalidArgumentError(
        absl::StrCat("CudaSampler::Run: vocab ", vocab, ", staged for ",
                     m.staged_vocab));
  }
  const auto n = static_cast<unsigned>(m.staged_rows);
  PenalizeKernel<<<n, kPenalizeThreads, 0, stream>>>(
      d_logits, vocab, m.rows, m.history, static_cast<float*>(m.penalized),
      static_cast<float*>(m.keys), static_cast<int32_t*>(m.ids));
  OCTET_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  OCTET_RETURN_IF_ERROR(m.SortSegments(stream));
  DrawKernel<<<n, kDrawThreads, 0, stream>>>(
      m.rows, static_cast<const float*>(m.penalized), vocab,
      static_cast<const float*>(m.keys_sorted),
      static_cast<const int32_t*>(m.ids_sorted),
      static_cast<DeviceResult*>(m.results));
  OCTET_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  OCTET_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(m.host_results, m.results, n * sizeof(DeviceResult),
                      cudaMemcpyDeviceToHost, stream));
  return absl::OkStatus();
}

absl::Status CudaSampler::Take(absl::Span<SampledToken> out,
                               cudaStream_t stream) {
  Scratch& m = *scratch_;
  if (static_cast<int64_t>(out.size()) > m.staged_rows) {
    return absl::InvalidArgumentError(
        absl::StrCat("CudaSampler::Take: ", out.size(), " tokens asked, ",
                     m.staged_rows, " staged"));
  }
  OCTET_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
  const auto* r = static_cast<const DeviceResult*>(m.host_results);
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = SampledToken{r[i].id, r[i].logprob};
  }
  return absl::OkStatus();
}

}  // namespace octet
