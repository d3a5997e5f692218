// Every operation of the Backend interface (kernels/backend.h), run from one
// table on the CUDA backend and on the CPU backend, and compared.
//
// Why: the model (worker/) is written once against Backend, so a kernel is
// only right if it agrees with its reference on the same inputs. Each case
// builds its inputs deterministically (bfloat16-exact values, so that the
// binary32 CPU and the bfloat16 GPU start from the same numbers), runs one
// operation through the interface and returns its outputs. The reference is
// the CPU backend with its scalar kernels; the CPU backend as the worker
// runs it (best ISA, all threads) is checked against it too, so the table's
// inputs and comparisons are exercised on machines without a GPU. The CUDA
// comparison skips (GTEST_SKIP, "Skipped" in ctest) without a usable GPU.
//
// Tolerances:
//  - FP8 codes, activation scales and absmax are compared bit for bit: the
//    FP8 contract (kernels/fp8.h, docs/design.md) requires every backend to
//    produce the same bits, so that a sequence is quantized the same way
//    wherever it runs. Copies, gathers, argmax ids and ops whose binary32
//    result is exact before one rounding are bit for bit too.
//  - Float math (norms, activation functions, RoPE, attention) may differ in
//    the last binary32 bits (summation order, device libm), so results can
//    round to neighbouring bfloat16 values: 2^-7 relative (one bfloat16 ulp)
//    plus a stated absolute term where cancellation can make values tiny.
//  - GEMMs: one bfloat16 ulp plus, per element, both sides' binary32
//    summation error 2·γ_K·Σ|a·b| (γ_K = K·u/(1 - K·u), u = 2^-24) and the
//    tensor-core allowance of tests/kernels/cuda_gemm_test.cc (2^-9·Σ|a·b|
//    for FP8, K·2^-24·Σ|a·b| for BF16), times the output scale.
// Each float comparison prints its largest error and error / tolerance, so
// that a device run shows the margins.
//
// A coverage test reads backend.h and fails when the interface gains a
// method that no case of the table exercises.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <iterator>
#include <limits>
#include <memory>
#include <numeric>
#include <ostream>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "base/bf16.h"
#include "base/status_macros.h"
#include "kernels/backend.h"
#include "kernels/cpu/backend.h"
#include "kernels/cuda/backend.h"
#include "kernels/cuda/device.h"
#include "kernels/fp8.h"
#include "tests/kernels/cuda_test_util.h"
#include "tests/kernels/test_data.h"
#include "tests/status_util.h"

// kernels/backend.h as text, for the coverage test: embedded at build time
// (tests/CMakeLists.txt), so the test needs no source tree where it runs.
#include "backend_h.h"

namespace octet {
namespace {

using testing::NormalBf16Values;

// ------------------------------------------------------------ the table

// One output of a case. kBits: compared bit for bit (codes, float bits,
// ids). kNear: within the case's tolerance plus `bound[i]` if given.
enum class Check { kBits, kNear };

struct Field {
  std::string name;
  Check check = Check::kBits;
  std::vector<uint32_t> bits;  // kBits: one word per element
  std::vector<float> values;   // kNear
  std::vector<float> bound;    // kNear: per-element allowance, or empty
  // kNear: stored in the activation dtype, so the reference is rounded to
  // the compared backend's activation dtype first.
  bool activation = false;
};

struct Output {
  std::vector<Field> fields;
  // Set when the backend lacks this optional operation (has_block_sums()
  // false) and answered Unimplemented as the interface requires.
  std::string unsupported;
};

// |got - want| <= rel * |want| + abs (+ the field's bound).
struct Tolerance {
  double rel = 0;
  double abs = 0;
};

// What a case may depend on besides its inputs: the largest head_dim every
// compared backend's Attention takes.
struct Env {
  int64_t max_head_dim = 0;
};

using Run = std::function<absl::StatusOr<Output>(Backend&, const Env&)>;

struct Case {
  std::string name;
  // The Backend methods the case calls (the coverage test's list).
  std::vector<std::string> ops;
  Tolerance tol;
  Run run;
};

// gtest names a failing case's parameter by the case's name.
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

// Exact after one rounding to the activation dtype.
constexpr Tolerance kExact{0, 0};
// One bfloat16 rounding of binary32 results a few binary32 ulps apart.
constexpr Tolerance kOneRounding{0x1p-7, 1e-6};
// GEMMs into the activation dtype: one bfloat16 ulp (+6% for the rounding
// of both sides), the rest is the per-element bound.
constexpr Tolerance kGemmAct{0x1.1p-7, 0};
// GEMMs into binary32: its rounding on both sides; the rest is the bound.
constexpr Tolerance kGemmF32{0x1p-22, 0};

// ------------------------------------------------------------ inputs

// Normal binary32 values (for binary32 inputs: tables, logits, sums).
std::vector<float> F32Values(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

std::vector<Bf16> ToBf16(const std::vector<float>& v) {
  std::vector<Bf16> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = FloatToBf16(v[i]);
  return out;
}

std::vector<uint8_t> RandomBytes(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (uint8_t& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

// The row map of RowGroups for groups of the given sizes.
std::vector<int32_t> RowMap(const std::vector<int64_t>& sizes) {
  std::vector<int32_t> map;
  for (size_t g = 0; g < sizes.size(); ++g) {
    map.insert(map.end(), sizes[g], static_cast<int32_t>(g));
  }
  return map;
}

// A value no op writes, for output buffers: an unwritten element shows.
constexpr float kSentinel = -4096.0f;

// ------------------------------------------------------------ device I/O

size_t ActSize(const Backend& b) { return DTypeSize(b.activation_dtype()); }

// `elems` activation elements past p.
void* ActAt(void* p, int64_t elems, const Backend& b) {
  return static_cast<char*>(p) + elems * ActSize(b);
}

absl::StatusOr<DeviceBuffer> Upload(Backend& b, const void* host,
                                    size_t bytes) {
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer buf, b.Allocate(bytes));
  if (buf.data() == nullptr || buf.bytes() != bytes) {
    return absl::InternalError(
        absl::StrCat("Allocate(", bytes, ") gave no memory"));
  }
  OCTET_RETURN_IF_ERROR(b.CopyToDevice(buf.data(), host, bytes));
  return buf;
}

template <typename T>
absl::StatusOr<DeviceBuffer> Upload(Backend& b, const std::vector<T>& v) {
  return Upload(b, v.data(), v.size() * sizeof(T));
}

// Activations in b's activation dtype (binary32 or bfloat16).
absl::StatusOr<DeviceBuffer> UploadAct(Backend& b,
                                       const std::vector<float>& v) {
  switch (b.activation_dtype()) {
    case DType::kF32:
      return Upload(b, v);
    case DType::kBf16:
      return Upload(b, ToBf16(v));
    default:
      return absl::InternalError("activation dtype is neither f32 nor bf16");
  }
}

// An activation output buffer of n elements, filled with kSentinel.
absl::StatusOr<DeviceBuffer> ActOut(Backend& b, int64_t n) {
  return UploadAct(b, std::vector<float>(n, kSentinel));
}

template <typename T>
absl::StatusOr<std::vector<T>> Read(Backend& b, const void* p, int64_t n) {
  std::vector<T> out(n);
  OCTET_RETURN_IF_ERROR(b.CopyToHost(out.data(), p, n * sizeof(T)));
  return out;
}

absl::StatusOr<std::vector<float>> ReadAct(Backend& b, const void* p,
                                           int64_t n) {
  if (b.activation_dtype() == DType::kF32) return Read<float>(b, p, n);
  OCTET_ASSIGN_OR_RETURN(std::vector<Bf16> h, Read<Bf16>(b, p, n));
  std::vector<float> out(n);
  for (int64_t i = 0; i < n; ++i) out[i] = Bf16ToFloat(h[i]);
  return out;
}

// ------------------------------------------------------------ outputs

template <typename T>
Field Bits(std::string name, const std::vector<T>& v) {
  Field f;
  f.name = std::move(name);
  f.check = Check::kBits;
  for (const T& x : v) {
    if constexpr (std::is_same_v<T, float>) {
      f.bits.push_back(std::bit_cast<uint32_t>(x));
    } else {
      f.bits.push_back(static_cast<uint32_t>(x));
    }
  }
  return f;
}

Field Near(std::string name, std::vector<float> v, bool activation,
           std::vector<float> bound = {}) {
  Field f;
  f.name = std::move(name);
  f.check = Check::kNear;
  f.values = std::move(v);
  f.bound = std::move(bound);
  f.activation = activation;
  return f;
}

// ------------------------------------------------------------ cases

// A linear weight's shape and dtype, its buffers still empty.
LinearWeight WeightShape(int64_t out, int64_t in, DType dtype) {
  LinearWeight w;
  w.out = out;
  w.in = in;
  w.dtype = dtype;
  return w;
}

// Memory: Allocate, copies both ways (also at odd addresses), Synchronize,
// Free (buffers coming and going, and a move), and the properties the
// harness relies on.
absl::StatusOr<Output> RunMemory(Backend& b, const Env&) {
  if (b.Describe().empty()) return absl::InternalError("Describe() is empty");
  const DType act = b.activation_dtype();
  const bool want_f32 = b.kind() == DeviceKind::kCpu;
  if (act != (want_f32 ? DType::kF32 : DType::kBf16)) {
    return absl::InternalError(
        absl::StrCat("activation dtype ", DTypeName(act), " on ", b.Describe(),
                     " (backend.h: binary32 on the CPU, bfloat16 on CUDA)"));
  }
  const std::vector<uint8_t> bytes = RandomBytes(1000, 1),
                             patch = RandomBytes(101, 2);
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer buf, Upload(b, bytes));
  OCTET_RETURN_IF_ERROR(
      b.CopyToDevice(buf.as<uint8_t>() + 7, patch.data(), patch.size()));
  for (int i = 0; i < 8; ++i) {
    OCTET_ASSIGN_OR_RETURN(DeviceBuffer t,
                           b.Allocate(size_t{1} << (8 + 2 * i)));
    if (t.data() == nullptr) return absl::InternalError("no memory");
  }
  DeviceBuffer moved = std::move(buf);
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer other, b.Allocate(64));
  other = std::move(moved);  // frees the 64 bytes
  OCTET_RETURN_IF_ERROR(b.Synchronize());
  OCTET_ASSIGN_OR_RETURN(std::vector<uint8_t> all,
                         Read<uint8_t>(b, other.data(), 1000));
  OCTET_ASSIGN_OR_RETURN(std::vector<uint8_t> part,
                         Read<uint8_t>(b, other.as<uint8_t>() + 3, 50));
  Output out;
  out.fields = {Bits("buffer", all), Bits("odd_read", part)};
  return out;
}

// Embedding of a vocabulary shard [row_begin, row_begin + rows): ids below,
// inside and above it.
absl::StatusOr<Output> RunEmbedding(Backend& b, DType table_dtype) {
  const bool bf16 = table_dtype == DType::kBf16;
  const int64_t rows = bf16 ? 50 : 40, cols = bf16 ? 64 : 96,
                row_begin = bf16 ? 50 : 0;
  const std::vector<int32_t> ids =
      bf16 ? std::vector<int32_t>{50, 99, 57, 10, 100, 0, 75, 60, 149, 51}
           : std::vector<int32_t>{0, 39, 40, 7, 7, 1000, 3};
  const int64_t n = ids.size();
  DeviceBuffer table;
  if (bf16) {
    OCTET_ASSIGN_OR_RETURN(
        table, Upload(b, ToBf16(NormalBf16Values(rows * cols, 11))));
  } else {
    // binary32 values that are not bfloat16-exact: CUDA rounds them once.
    OCTET_ASSIGN_OR_RETURN(table, Upload(b, F32Values(rows * cols, 12)));
  }
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer d_ids, Upload(b, ids));
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer out, ActOut(b, n * cols));
  OCTET_RETURN_IF_ERROR(b.Embedding(table.data(), table_dtype, rows, cols,
                                    row_begin, d_ids.as<int32_t>(), n,
                                    out.data()));
  OCTET_ASSIGN_OR_RETURN(std::vector<float> y,
                         ReadAct(b, out.data(), n * cols));
  Output o;
  o.fields = {Near("out", std::move(y), true)};
  return o;
}

absl::StatusOr<Output> RunRmsNorm(Backend& b, int64_t rows, int64_t cols,
                                  float eps, uint32_t seed) {
  const std::vector<float> x = NormalBf16Values(rows * cols, seed, 2.0f);
  const std::vector<float> w = F32Values(cols, seed + 1);  // binary32
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer dx, UploadAct(b, x));
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer dw, Upload(b, w));
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer out, ActOut(b, rows * cols));
  OCTET_RETURN_IF_ERROR(
      b.RmsNorm(dx.data(), dw.as<float>(), rows, cols, eps, out.data()));
  OCTET_ASSIGN_OR_RETURN(std::vector<float> y,
                         ReadAct(b, out.data(), rows * cols));
  Output o;
  o.fields = {Near("out", std::move(y), true)};
  return o;
}

// x += y: an exact binary32 sum of two bfloat16 values, rounded once.
absl::StatusOr<Output> RunAdd(Backend& b, const Env&) {
  const int64_t count = 37 * 200 + 3;
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer x,
                         UploadAct(b, NormalBf16Values(count, 21, 3.0f)));
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer y,
                         UploadAct(b, NormalBf16Values(count, 22)));
  OCTET_RETURN_IF_ERROR(b.Add(x.data(), y.data(), count));
  OCTET_ASSIGN_OR_RETURN(std::vector<float> sum, ReadAct(b, x.data(), count));
  Output o;
  o.fields = {Near("x", std::move(sum), true)};
  return o;
}

// A clock (profiles): no marks read as none; three marks around 32 Adds of
// a million activations and nothing read as 0, a positive time, and one no
// earlier (an error otherwise; the times themselves differ by device).
absl::StatusOr<Output> RunClock(Backend& b, const Env&) {
  const int64_t count = 1 << 20;
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer x,
                         UploadAct(b, std::vector<float>(count, 1.0f)));
  OCTET_ASSIGN_OR_RETURN(std::unique_ptr<DeviceClock> unused, b.NewClock());
  OCTET_ASSIGN_OR_RETURN(const std::vector<double> none, unused->Read());
  OCTET_ASSIGN_OR_RETURN(std::unique_ptr<DeviceClock> clock, b.NewClock());
  OCTET_RETURN_IF_ERROR(clock->Mark());
  for (int i = 0; i < 32; ++i) {
    OCTET_RETURN_IF_ERROR(b.Add(x.data(), x.data(), count));
  }
  OCTET_RETURN_IF_ERROR(clock->Mark());
  OCTET_RETURN_IF_ERROR(clock->Mark());
  OCTET_ASSIGN_OR_RETURN(const std::vector<double> ms, clock->Read());
  if (!none.empty() || ms.size() != 3 || ms[0] != 0.0 || !(ms[1] > 0.0) ||
      !(ms[2] >= ms[1])) {
    return absl::InternalError(absl::StrCat(
        "a clock without marks read ", none.size(), " times; three marks read ",
        ms.size(), " times: ", ms.empty() ? -1.0 : ms[0], ", ",
        ms.size() > 1 ? ms[1] : -1.0, ", ", ms.size() > 2 ? ms[2] : -1.0,
        " (want 0, > 0, >= that)"));
  }
  Output o;
  o.fields = {Bits("marks", std::vector<uint32_t>{3})};
  return o;
}

// Capture: an Add captured, its input refilled after the capture, then
// replayed twice: x = x0 + 2·y1 (small integers, exact in bfloat16). While
// capturing, host work is refused. A backend that cannot capture must say
// so (Unimplemented) and gets the same result by running the Add twice.
absl::StatusOr<Output> RunCapture(Backend& b, const Env&) {
  const int64_t count = 1000;
  std::vector<float> x0(count), y0(count, 100.0f), y1(count);
  for (int64_t i = 0; i < count; ++i) {
    x0[i] = static_cast<float>(i % 50);
    y1[i] = static_cast<float>(i % 7) - 3.0f;
  }
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer x, UploadAct(b, x0));
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer y, UploadAct(b, y0));
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer y_next, UploadAct(b, y1));
  const size_t bytes = count * DTypeSize(b.activation_dtype());
  std::vector<uint8_t> host(bytes);
  OCTET_RETURN_IF_ERROR(b.CopyToHost(host.data(), y_next.data(), bytes));
  if ((b.kind() == DeviceKind::kCuda) != (b.cuda_stream() != nullptr)) {
    return absl::InternalError("a CUDA backend names its stream, others none");
  }
  if (!b.can_capture()) {
    if (b.BeginCapture().code() != absl::StatusCode::kUnimplemented ||
        b.EndCapture().status().code() != absl::StatusCode::kUnimplemented) {
      return absl::InternalError("a backend that cannot capture must say so");
    }
    OCTET_RETURN_IF_ERROR(b.CopyToDevice(y.data(), host.data(), bytes));
    OCTET_RETURN_IF_ERROR(b.Add(x.data(), y.data(), count));
    OCTET_RETURN_IF_ERROR(b.Add(x.data(), y.data(), count));
  } else {
    OCTET_RETURN_IF_ERROR(b.BeginCapture());
    const absl::Status added = b.Add(x.data(), y.data(), count);
    const absl::Status refused = b.CopyToHost(host.data(), x.data(), 4);
    OCTET_ASSIGN_OR_RETURN(std::unique_ptr<CapturedWork> work, b.EndCapture());
    OCTET_RETURN_IF_ERROR(added);
    if (refused.code() != absl::StatusCode::kFailedPrecondition) {
      return absl::InternalError(absl::StrCat(
          "CopyToHost while capturing was not refused: ", refused.ToString()));
    }
    OCTET_RETURN_IF_ERROR(b.CopyToDevice(y.data(), host.data(), bytes));
    OCTET_RETURN_IF_ERROR(work->Replay());
    OCTET_RETURN_IF_ERROR(work->Replay());
  }
  OCTET_ASSIGN_OR_RETURN(std::vector<float> sum, ReadAct(b, x.data(), count));
  Output o;
  o.fields = {Near("x", std::move(sum), true)};
  return o;
}

// RoPE in place on rows of a fused [q | k | v] projection: q's heads, then
// k's in a second call from k's first head, each with the fused row's stride
// (the model's RopeWriteKv turns both in one call; RunRopeWriteKv checks
// that). The whole buffer is read back, so v (untouched) is checked too.
absl::StatusOr<Output> RunRope(Backend& b, int64_t heads, int64_t kv_heads,
                               int64_t head_dim,
                               const std::vector<int32_t>& positions) {
  const int64_t rows = positions.size();
  const int64_t stride = (heads + 2 * kv_heads) * head_dim;
  std::vector<float> inv_freq(head_dim / 2);
  for (int64_t i = 0; i < head_dim / 2; ++i) {
    inv_freq[i] = std::pow(10000.0f, -2.0f * i / head_dim);
  }
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer x,
                         UploadAct(b, NormalBf16Values(rows * stride, 31)));
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer pos, Upload(b, positions));
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer freq, Upload(b, inv_freq));
  OCTET_RETURN_IF_ERROR(b.Rope(x.data(), rows, heads, head_dim, stride,
                               pos.as<int32_t>(), freq.as<float>()));
  OCTET_RETURN_IF_ERROR(b.Rope(ActAt(x.data(), heads * head_dim, b), rows,
                               kv_heads, head_dim, stride, pos.as<int32_t>(),
                               freq.as<float>()));
  OCTET_ASSIGN_OR_RETURN(std::vector<float> y,
                         ReadAct(b, x.data(), rows * stride));
  Output o;
  o.fields = {Near("qkv", std::move(y), true)};
  return o;
}

// Qwen3's q/k norms: each q head, then each k head, of a fused QKV row
// normalized in place (the v heads must come back as they were).
absl::StatusOr<Output> RunRmsNormHeads(Backend& b, const Env&) {
  const int64_t rows = 9, heads = 4, kv_heads = 2, head_dim = 128;
  const int64_t stride = (heads + 2 * kv_heads) * head_dim;
  OCTET_ASSIGN_OR_RETURN(
      DeviceBuffer x, UploadAct(b, NormalBf16Values(rows * stride, 33, 2.0f)));
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer q_norm,
                         Upload(b, F32Values(head_dim, 34)));
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer k_norm,
                         Upload(b, F32Values(head_dim, 35)));
  OCTET_RETURN_IF_ERROR(b.RmsNormHeads(x.data(), rows, heads, head_dim, stride,
                                       q_norm.as<float>(), 1e-6f));
  OCTET_RETURN_IF_ERROR(b.RmsNormHeads(ActAt(x.data(), heads * head_dim, b),
                                       rows, kv_heads, head_dim, stride,
                                       k_norm.as<float>(), 1e-6f));
  OCTET_ASSIGN_OR_RETURN(std::vector<float> y,
                         ReadAct(b, x.data(), rows * stride));
  Output o;
  o.fields = {Near("qkv", std::move(y), true)};
  return o;
}

// Qwen2's q/k/v biases: x[r][c] += bias[c], a binary32 bias.
absl::StatusOr<Output> RunAddBias(Backend& b, const Env&) {
  const int64_t rows = 37, cols = 200;
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer x,
                         UploadAct(b, NormalBf16Values(rows * cols, 36, 3.0f)));
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer bias, Upload(b, F32Values(cols, 37)));
  OCTET_RETURN_IF_ERROR(b.AddBias(x.data(), bias.as<float>(), rows, cols));
  OCTET_ASSIGN_OR_RETURN(std::vector<float> y,
                         ReadAct(b, x.data(), rows * cols));
  Output o;
  o.fields = {Near("x", std::move(y), true)};
  return o;
}

absl::StatusOr<Output> RunSiluMul(Backend& b, const Env&) {
  const int64_t rows = 37, cols = 100;  // x rows are [gate | up], 2 * cols
  OCTET_ASSIGN_OR_RETURN(
      DeviceBuffer x,
      UploadAct(b, NormalBf16Values(rows * 2 * cols, 41, 3.0f)));
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer out, ActOut(b, rows * cols));
  OCTET_RETURN_IF_ERROR(b.SiluMul(x.data(), rows, cols, out.data()));
  OCTET_ASSIGN_OR_RETURN(std::vector<float> y,
                         ReadAct(b, out.data(), rows * cols));
  Output o;
  o.fields = {Near("out", std::move(y), true)};
  return o;
}

// Device copies of the int32 arrays of an AttentionMetadata.
struct DeviceMeta {
  DeviceBuffer positions, slots, token_seq, tables, tiles;
  AttentionMetadata meta;
};

// Sequences given as (first new position, new tokens); each gets a block
// table of distinct, scrambled blocks covering its positions up to its last
// token. Returns the metadata and, for every cached position of every
// sequence (0 .. last), its slot in `cached_slots`.
struct Layout {
  std::vector<int32_t> positions, slots, token_seq, tables;
  std::vector<int32_t> first_rows, new_tokens;  // per sequence
  std::vector<int32_t> cached_slots;
  int64_t max_blocks = 0, block_size = 0, num_slots = 0;
};

Layout MakeLayout(const std::vector<std::pair<int64_t, int64_t>>& seqs,
                  int64_t block_size, uint32_t seed) {
  Layout l;
  l.block_size = block_size;
  int64_t total = 0;
  std::vector<int64_t> need;
  for (const auto& [start, count] : seqs) {
    need.push_back((start + count + block_size - 1) / block_size);
    total += need.back();
    l.max_blocks = std::max(l.max_blocks, need.back());
  }
  total += 3;  // blocks no sequence owns
  std::vector<int32_t> blocks(total);
  std::iota(blocks.begin(), blocks.end(), 0);
  std::shuffle(blocks.begin(), blocks.end(), std::mt19937(seed));
  l.num_slots = total * block_size;
  l.tables.assign(seqs.size() * l.max_blocks, 0);
  int64_t next = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    for (int64_t j = 0; j < need[s]; ++j) {
      l.tables[s * l.max_blocks + j] = blocks[next++];
    }
    const auto [start, count] = seqs[s];
    l.first_rows.push_back(static_cast<int32_t>(l.slots.size()));
    l.new_tokens.push_back(static_cast<int32_t>(count));
    for (int64_t p = 0; p < start + count; ++p) {
      const int32_t slot = static_cast<int32_t>(
          l.tables[s * l.max_blocks + p / block_size] * block_size +
          p % block_size);
      l.cached_slots.push_back(slot);
      if (p >= start) {
        l.positions.push_back(static_cast<int32_t>(p));
        l.slots.push_back(slot);
        l.token_seq.push_back(static_cast<int32_t>(s));
      }
    }
  }
  return l;
}

// With `tiles`, the query tiles the backend asks for (if any).
absl::StatusOr<DeviceMeta> UploadMeta(Backend& b, const Layout& l,
                                      int64_t window, bool tiles = false) {
  DeviceMeta m;
  OCTET_ASSIGN_OR_RETURN(m.positions, Upload(b, l.positions));
  OCTET_ASSIGN_OR_RETURN(m.slots, Upload(b, l.slots));
  OCTET_ASSIGN_OR_RETURN(m.token_seq, Upload(b, l.token_seq));
  OCTET_ASSIGN_OR_RETURN(m.tables, Upload(b, l.tables));
  m.meta = AttentionMetadata{.num_tokens = static_cast<int64_t>(l.slots.size()),
                             .positions = m.positions.as<int32_t>(),
                             .slots = m.slots.as<int32_t>(),
                             .token_seq = m.token_seq.as<int32_t>(),
                             .block_tables = m.tables.as<int32_t>(),
                             .max_blocks = l.max_blocks,
                             .block_size = l.block_size,
                             .sliding_window = window};
  if (tiles && b.attention_query_tile() > 0) {
    const std::vector<int32_t> t =
        QueryTiles(l.first_rows, l.new_tokens,
                   static_cast<int32_t>(b.attention_query_tile()));
    OCTET_ASSIGN_OR_RETURN(m.tiles, Upload(b, t));
    m.meta.query_tiles = m.tiles.as<int32_t>();
    m.meta.num_query_tiles = static_cast<int64_t>(t.size() / 2);
  }
  return m;
}

// WriteKv from a fused [q | k | v] projection (k and v at their offsets in
// the fused row) into caches that already hold other values: the written
// slots change, every other slot keeps its value.
absl::StatusOr<Output> RunWriteKv(Backend& b, const Env&) {
  const int64_t heads = 4, kv_heads = 2, head_dim = 64;
  const int64_t width = kv_heads * head_dim;
  const int64_t stride = (heads + 2 * kv_heads) * head_dim;
  // Two sequences: one crossing a block boundary, one starting at 0.
  const Layout l = MakeLayout({{14, 4}, {0, 3}}, 16, 51);
  const int64_t tokens = l.slots.size();
  OCTET_ASSIGN_OR_RETURN(DeviceMeta m, UploadMeta(b, l, 0));
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer qkv,
                         UploadAct(b, NormalBf16Values(tokens * stride, 52)));
  OCTET_ASSIGN_OR_RETURN(
      DeviceBuffer kc, UploadAct(b, NormalBf16Values(l.num_slots * width, 53)));
  OCTET_ASSIGN_OR_RETURN(
      DeviceBuffer vc, UploadAct(b, NormalBf16Values(l.num_slots * width, 54)));
  OCTET_RETURN_IF_ERROR(
      b.WriteKv(ActAt(qkv.data(), heads * head_dim, b),
                ActAt(qkv.data(), (heads + kv_heads) * head_dim, b), stride,
                kv_heads, head_dim, m.meta, kc.data(), vc.data()));
  OCTET_ASSIGN_OR_RETURN(std::vector<float> k,
                         ReadAct(b, kc.data(), l.num_slots * width));
  OCTET_ASSIGN_OR_RETURN(std::vector<float> v,
                         ReadAct(b, vc.data(), l.num_slots * width));
  Output o;
  o.fields = {Near("k_cache", std::move(k), true),
              Near("v_cache", std::move(v), true)};
  return o;
}

// RopeWriteKv on a fused [q | k | v] projection (two sequences, one across
// a block boundary, and a padding row whose slot is -1): the projection and
// both caches, bit for bit what Rope then WriteKv give on the same backend
// (an error otherwise), and near the reference as Rope is. Each cache has
// one slot more in front, read back too, where slot -1 would land.
absl::StatusOr<Output> RunRopeWriteKv(Backend& b, const Env&) {
  const int64_t heads = 4, kv_heads = 2, head_dim = 64;
  const int64_t width = kv_heads * head_dim;
  const int64_t stride = (heads + 2 * kv_heads) * head_dim;
  Layout l = MakeLayout({{14, 4}, {0, 3}}, 16, 55);
  l.slots.back() = -1;
  const int64_t tokens = l.slots.size(), cached = (l.num_slots + 1) * width;
  std::vector<float> inv_freq(head_dim / 2);
  for (int64_t i = 0; i < head_dim / 2; ++i) {
    inv_freq[i] = std::pow(10000.0f, -2.0f * i / head_dim);
  }
  OCTET_ASSIGN_OR_RETURN(DeviceMeta m, UploadMeta(b, l, 0));
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer freq, Upload(b, inv_freq));
  std::vector<float> got[2][3];  // [fused, apart][qkv, k cache, v cache]
  for (int way = 0; way < 2; ++way) {
    OCTET_ASSIGN_OR_RETURN(DeviceBuffer x,
                           UploadAct(b, NormalBf16Values(tokens * stride, 56)));
    OCTET_ASSIGN_OR_RETURN(DeviceBuffer kc,
                           UploadAct(b, NormalBf16Values(cached, 57)));
    OCTET_ASSIGN_OR_RETURN(DeviceBuffer vc,
                           UploadAct(b, NormalBf16Values(cached, 58)));
    if (way == 0) {
      OCTET_RETURN_IF_ERROR(b.RopeWriteKv(
          x.data(), heads, kv_heads, head_dim, stride, freq.as<float>(), m.meta,
          ActAt(kc.data(), width, b), ActAt(vc.data(), width, b)));
    } else {
      OCTET_RETURN_IF_ERROR(b.Rope(x.data(), tokens, heads + kv_heads, head_dim,
                                   stride, m.meta.positions, freq.as<float>()));
      OCTET_RETURN_IF_ERROR(
          b.WriteKv(ActAt(x.data(), heads * head_dim, b),
                    ActAt(x.data(), (heads + kv_heads) * head_dim, b), stride,
                    kv_heads, head_dim, m.meta, ActAt(kc.data(), width, b),
                    ActAt(vc.data(), width, b)));
    }
    OCTET_ASSIGN_OR_RETURN(got[way][0], ReadAct(b, x.data(), tokens * stride));
    OCTET_ASSIGN_OR_RETURN(got[way][1], ReadAct(b, kc.data(), cached));
    OCTET_ASSIGN_OR_RETURN(got[way][2], ReadAct(b, vc.data(), cached));
  }
  for (int i = 0; i < 3; ++i) {
    if (got[0][i] != got[1][i]) {
      return absl::InternalError(absl::StrCat(
          "RopeWriteKv differs from Rope then WriteKv in output ", i));
    }
  }
  Output o;
  o.fields = {Near("qkv", std::move(got[0][0]), true),
              Near("k_cache", std::move(got[0][1]), true),
              Near("v_cache", std::move(got[0][2]), true)};
  return o;
}

struct AttentionCase {
  int64_t heads, kv_heads, head_dim;  // head_dim 0: Env::max_head_dim
  int64_t block_size, window;
  bool fused_q;  // q rows inside fused [q | k | v] rows (q_stride wider)
  std::vector<std::pair<int64_t, int64_t>> seqs;  // (start, new tokens)
  bool tiles = false;  // give the query tiles the backend asks for
  // Offer the backend a host plan first (PlanAttention; CUDA: FlashInfer
  // for a prefill), and follow it where it plans.
  bool planned = false;
};

// The host's view of a layout's sequences (AttentionBatch's arrays).
struct HostBatch {
  std::vector<int32_t> query_start = {0}, context;
};
HostBatch HostView(const Layout& l) {
  HostBatch h;
  for (size_t s = 0; s < l.first_rows.size(); ++s) {
    const int32_t last = l.first_rows[s] + l.new_tokens[s] - 1;
    h.query_start.push_back(last + 1);
    h.context.push_back(l.positions[last] + 1);
  }
  return h;
}

// Paged attention over caches holding every position of every sequence up
// to its last token; slots no sequence owns hold NaN, which must never be
// read.
absl::StatusOr<Output> RunAttention(Backend& b, const Env& env,
                                    const AttentionCase& c) {
  const int64_t head_dim = c.head_dim > 0 ? c.head_dim : env.max_head_dim;
  if (head_dim > b.max_head_dim()) {
    return absl::InternalError(
        absl::StrCat("head_dim ", head_dim, " above ", b.max_head_dim()));
  }
  const int64_t width = c.kv_heads * head_dim;
  const Layout l = MakeLayout(c.seqs, c.block_size, 61 + head_dim);
  const int64_t tokens = l.slots.size();
  const std::vector<float> kv = NormalBf16Values(2 * l.num_slots * width, 62);
  std::vector<float> k(l.num_slots * width, NAN), v(l.num_slots * width, NAN);
  for (int32_t slot : l.cached_slots) {
    for (int64_t i = 0; i < width; ++i) {
      k[slot * width + i] = kv[slot * width + i];
      v[slot * width + i] = kv[(l.num_slots + slot) * width + i];
    }
  }
  const int64_t q_stride =
      (c.fused_q ? c.heads + 2 * c.kv_heads : c.heads) * head_dim;
  OCTET_ASSIGN_OR_RETURN(DeviceMeta m, UploadMeta(b, l, c.window, c.tiles));
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer q,
                         UploadAct(b, NormalBf16Values(tokens * q_stride, 63)));
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer kc, UploadAct(b, k));
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer vc, UploadAct(b, v));
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer out,
                         ActOut(b, tokens * c.heads * head_dim));
  if (c.planned) {
    const HostBatch h = HostView(l);
    OCTET_ASSIGN_OR_RETURN(
        m.meta.host_planned,
        b.PlanAttention({h.query_start, h.context, l.tables}, m.meta, c.heads,
                        c.kv_heads, head_dim));
  }
  OCTET_RETURN_IF_ERROR(b.Attention(q.data(), q_stride, c.heads, c.kv_heads,
                                    head_dim, m.meta, kc.data(), vc.data(),
                                    out.data()));
  OCTET_ASSIGN_OR_RETURN(std::vector<float> y,
                         ReadAct(b, out.data(), tokens * c.heads * head_dim));
  Output o;
  o.fields = {Near("out", std::move(y), true)};
  return o;
}

// Σ|a·b| of each output of Y[rows][out] = A·Bᵀ, times |scale(r)|, times
// (2·γ_K + extra) and a 1% margin: the allowance for two binary32
// summations in different orders (and tensor-core accumulation).
template <typename A, typename B, typename S>
std::vector<float> GemmBound(int64_t rows, int64_t out, int64_t k, A a, B w,
                             S scale, double extra) {
  const double u = 0x1p-24, gamma = k * u / (1 - k * u);
  std::vector<float> bound(rows * out);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < out; ++o) {
      double magnitude = 0;
      for (int64_t i = 0; i < k; ++i) {
        magnitude += std::fabs(double(a(r * k + i)) * double(w(o * k + i)));
      }
      bound[r * out + o] = static_cast<float>(1.01 * (2 * gamma + extra) *
                                              magnitude * std::fabs(scale(r)));
    }
  }
  return bound;
}

// The tensor cores' extra error (tests/kernels/cuda_gemm_test.cc).
constexpr double kFp8TensorCoreRel = 0x1p-9;
double Bf16TensorCoreRel(int64_t k) { return k * 0x1p-24; }

// Unquantized linear layer: bfloat16 weights, y in the activation dtype or
// binary32 (logits).
absl::StatusOr<Output> RunGemm(Backend& b, int64_t rows, int64_t in,
                               int64_t out, bool f32_out, uint32_t seed) {
  const std::vector<float> x = NormalBf16Values(rows * in, seed);
  const std::vector<float> w = NormalBf16Values(out * in, seed + 1, 0.0625f);
  LinearWeight lw = WeightShape(out, in, DType::kBf16);
  OCTET_ASSIGN_OR_RETURN(lw.data, Upload(b, ToBf16(w)));
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer dx, UploadAct(b, x));
  const DType y_dtype = f32_out ? DType::kF32 : b.activation_dtype();
  OCTET_ASSIGN_OR_RETURN(
      DeviceBuffer y,
      Upload(b, std::vector<uint8_t>(rows * out * DTypeSize(y_dtype), 0xFF)));
  OCTET_RETURN_IF_ERROR(b.Gemm(dx.data(), rows, lw, y.data(), y_dtype));
  std::vector<float> got;
  if (f32_out) {
    OCTET_ASSIGN_OR_RETURN(got, Read<float>(b, y.data(), rows * out));
  } else {
    OCTET_ASSIGN_OR_RETURN(got, ReadAct(b, y.data(), rows * out));
  }
  Output o;
  o.fields = {Near("y", std::move(got), !f32_out,
                   GemmBound(
                       rows, out, in, [&](int64_t i) { return x[i]; },
                       [&](int64_t i) { return w[i]; },
                       [](int64_t) { return 1.0; }, Bf16TensorCoreRel(in)))};
  return o;
}

// AbsMax then Quantize for the groups of `sizes` (one group: the
// single-tensor kernels; several: the per-row ones), x placed `offset`
// elements past the start of its buffer and the codes likewise.
absl::StatusOr<Output> RunAbsMaxQuantize(Backend& b,
                                         const std::vector<float>& x,
                                         int64_t cols,
                                         const std::vector<int64_t>& sizes,
                                         int64_t offset) {
  const int64_t rows = x.size() / cols, groups = sizes.size();
  const std::vector<int32_t> map = RowMap(sizes);
  if (static_cast<int64_t>(map.size()) != rows) {
    return absl::InternalError("group sizes do not add up to the rows");
  }
  std::vector<float> padded(offset, 0.0f);
  padded.insert(padded.end(), x.begin(), x.end());
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer dx, UploadAct(b, padded));
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer dmap, Upload(b, map));
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer dmax,
                         Upload(b, std::vector<float>(groups, -1.0f)));
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer dscale,
                         Upload(b, std::vector<float>(groups, -1.0f)));
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer dq,
                         Upload(b, std::vector<uint8_t>(offset + rows * cols)));
  const RowGroups g =
      groups == 1 ? RowGroups{} : RowGroups{groups, dmap.as<int32_t>()};
  const void* xp = ActAt(dx.data(), offset, b);
  uint8_t* qp = dq.as<uint8_t>() + offset;
  OCTET_RETURN_IF_ERROR(b.AbsMax(xp, rows, cols, g, dmax.as<float>()));
  OCTET_RETURN_IF_ERROR(
      b.Quantize(xp, rows, cols, g, dmax.as<float>(), qp, dscale.as<float>()));
  OCTET_ASSIGN_OR_RETURN(std::vector<float> absmax,
                         Read<float>(b, dmax.data(), groups));
  OCTET_ASSIGN_OR_RETURN(std::vector<float> scale,
                         Read<float>(b, dscale.data(), groups));
  OCTET_ASSIGN_OR_RETURN(std::vector<uint8_t> q,
                         Read<uint8_t>(b, qp, rows * cols));
  Output o;
  o.fields = {Bits("absmax", absmax), Bits("scale", scale), Bits("codes", q)};
  return o;
}

// The fused FP8 input (FusedAbsMax, FusedQuantize) against the same
// backend's producer (RmsNorm or SiluMul) followed by AbsMax and Quantize:
// every absmax, scale and code equal, for groups of 3, 1 and 4 rows (and
// for one group). Each field is 1 where fused and unfused agree, so the
// CPU and a GPU (whose unfused values differ: bfloat16 activations) are
// held to the same all-ones answer.
absl::StatusOr<Output> RunFused(Backend& b, FusedInput::Op op, bool grouped) {
  const std::vector<int64_t> sizes =
      grouped ? std::vector<int64_t>{3, 1, 4} : std::vector<int64_t>{8};
  const int64_t rows = 8, cols = 320, groups = sizes.size();
  // Only the GPU's fused path saves work (the CPU makes the values twice).
  if (b.fuses_input_quantization() != (b.kind() == DeviceKind::kCuda)) {
    return absl::InternalError("fuses_input_quantization: only on CUDA");
  }
  const bool norm = op == FusedInput::Op::kRmsNorm;
  const int64_t in_cols = norm ? cols : 2 * cols;
  std::vector<float> x = NormalBf16Values(rows * in_cols, 141, 2.0f);
  for (int64_t c = 0; c < in_cols; ++c) x[2 * in_cols + c] *= 64.0f;  // loud
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer dx, UploadAct(b, x));
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer dw,
                         Upload(b, F32Values(cols, 142, 1.5f)));
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer dmap, Upload(b, RowMap(sizes)));
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer made, ActOut(b, rows * cols));
  const RowGroups g =
      grouped ? RowGroups{groups, dmap.as<int32_t>()} : RowGroups{};
  const FusedInput in{op, dx.data(), dw.as<float>(), 1e-5f};
  struct Result {
    std::vector<float> absmax, scale;
    std::vector<uint8_t> codes;
  };
  Result r[2];  // unfused, fused
  for (int fused = 0; fused < 2; ++fused) {
    OCTET_ASSIGN_OR_RETURN(DeviceBuffer dmax,
                           Upload(b, std::vector<float>(groups, -1.0f)));
    OCTET_ASSIGN_OR_RETURN(DeviceBuffer dscale,
                           Upload(b, std::vector<float>(groups, -1.0f)));
    OCTET_ASSIGN_OR_RETURN(DeviceBuffer dq,
                           Upload(b, std::vector<uint8_t>(rows * cols)));
    float* m = dmax.as<float>();
    if (fused == 1) {
      OCTET_RETURN_IF_ERROR(b.FusedAbsMax(in, rows, cols, g, m));
      OCTET_RETURN_IF_ERROR(b.FusedQuantize(
          in, rows, cols, g, m, dq.as<uint8_t>(), dscale.as<float>()));
    } else {
      OCTET_RETURN_IF_ERROR(
          norm ? b.RmsNorm(dx.data(), dw.as<float>(), rows, cols, 1e-5f,
                           made.data())
               : b.SiluMul(dx.data(), rows, cols, made.data()));
      OCTET_RETURN_IF_ERROR(b.AbsMax(made.data(), rows, cols, g, m));
      OCTET_RETURN_IF_ERROR(b.Quantize(made.data(), rows, cols, g, m,
                                       dq.as<uint8_t>(), dscale.as<float>()));
    }
    OCTET_ASSIGN_OR_RETURN(r[fused].absmax, Read<float>(b, m, groups));
    OCTET_ASSIGN_OR_RETURN(r[fused].scale,
                           Read<float>(b, dscale.data(), groups));
    OCTET_ASSIGN_OR_RETURN(r[fused].codes,
                           Read<uint8_t>(b, dq.data(), rows * cols));
  }
  auto agree = [](const auto& a, const auto& b) {
    std::vector<uint8_t> same(a.size());
    for (size_t i = 0; i < a.size(); ++i) {
      same[i] = std::memcmp(&a[i], &b[i], sizeof(a[i])) == 0;
    }
    return same;
  };
  Output o;
  o.fields = {Bits("absmax_agree", agree(r[0].absmax, r[1].absmax)),
              Bits("scale_agree", agree(r[0].scale, r[1].scale)),
              Bits("codes_agree", agree(r[0].codes, r[1].codes))};
  return o;
}

// Activations of four sequences of 3, 1, 7 and 2 rows whose magnitudes
// differ (exact powers of two), the last all signed zeros.
std::vector<float> GroupedActivations(int64_t cols) {
  std::vector<float> x = NormalBf16Values(13 * cols, 71);
  for (int64_t i = 3 * cols; i < 4 * cols; ++i) x[i] *= 32.0f;
  for (int64_t i = 4 * cols; i < 11 * cols; ++i) x[i] *= 0.0625f;
  for (int64_t i = 11 * cols; i < 13 * cols; ++i) x[i] = i % 2 ? -0.0f : 0.0f;
  return x;
}

// tests/kernels/test_data.h's awkward values (signed zeros, NaN, bfloat16
// subnormals, values around the e4m3 maximum, ties), rounded to bfloat16;
// with `inf`, one +inf and one -inf in the second half (an infinite absmax:
// an infinite scale, every finite value encodes to zero).
std::vector<float> SpecialActivations(int64_t n, uint32_t seed, bool inf) {
  std::vector<float> x = testing::MixedFloats(n, seed);
  for (float& v : x) v = Bf16ToFloat(FloatToBf16(v));
  if (inf) {
    x[n / 2 + 3] = std::numeric_limits<float>::infinity();
    x[n - 5] = -std::numeric_limits<float>::infinity();
  }
  return x;
}

// QuantizeGroups against the two calls it stands for on the same backend
// -- (Fused)AbsMax then (Fused)Quantize -- with the producer `op`, or with
// x in memory (op null), for groups of `sizes` rows (all 1: a decode step,
// CUDA's block per row; else a prefill's sequences, CUDA's cooperative
// grid): every absmax, scale and code equal (fields of ones, as
// RunFused's). Row 2 is loud, row 5 all zeros, row 6 special values.
absl::StatusOr<Output> RunOneCall(Backend& b, const FusedInput::Op* op,
                                  const std::vector<int64_t>& sizes,
                                  int64_t cols) {
  const int64_t groups = static_cast<int64_t>(sizes.size());
  int64_t rows = 0;
  for (int64_t n : sizes) rows += n;
  const bool silu = op != nullptr && *op == FusedInput::Op::kSiluMul;
  const int64_t in_cols = silu ? 2 * cols : cols;
  std::vector<float> x = NormalBf16Values(rows * in_cols, 171, 2.0f);
  for (int64_t c = 0; c < in_cols; ++c) {
    x[2 * in_cols + c] *= 64.0f;
    x[5 * in_cols + c] = 0.0f;
  }
  const std::vector<float> special = SpecialActivations(in_cols, 172, false);
  std::copy(special.begin(), special.end(), x.begin() + 6 * in_cols);
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer dx, UploadAct(b, x));
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer dw,
                         Upload(b, F32Values(cols, 173, 1.5f)));
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer dmap, Upload(b, RowMap(sizes)));
  const RowGroups g{groups, dmap.as<int32_t>()};
  const FusedInput in{op != nullptr ? *op : FusedInput::Op::kRmsNorm, dx.data(),
                      dw.as<float>(), 1e-5f};
  const FusedInput* producer = op != nullptr ? &in : nullptr;
  std::vector<uint8_t> got[2][3];  // [two calls, one][absmax, scale, q]
  for (int one_call = 0; one_call < 2; ++one_call) {
    OCTET_ASSIGN_OR_RETURN(DeviceBuffer dmax,
                           Upload(b, std::vector<float>(groups, -1.0f)));
    OCTET_ASSIGN_OR_RETURN(DeviceBuffer dscale,
                           Upload(b, std::vector<float>(groups, -1.0f)));
    OCTET_ASSIGN_OR_RETURN(DeviceBuffer dq,
                           Upload(b, std::vector<uint8_t>(rows * cols)));
    float* m = dmax.as<float>();
    uint8_t* q = dq.as<uint8_t>();
    float* sc = dscale.as<float>();
    if (one_call == 1) {
      OCTET_RETURN_IF_ERROR(
          b.QuantizeGroups(dx.data(), producer, rows, cols, g, m, q, sc));
    } else if (producer != nullptr) {
      OCTET_RETURN_IF_ERROR(b.FusedAbsMax(in, rows, cols, g, m));
      OCTET_RETURN_IF_ERROR(b.FusedQuantize(in, rows, cols, g, m, q, sc));
    } else {
      OCTET_RETURN_IF_ERROR(b.AbsMax(dx.data(), rows, cols, g, m));
      OCTET_RETURN_IF_ERROR(b.Quantize(dx.data(), rows, cols, g, m, q, sc));
    }
    OCTET_ASSIGN_OR_RETURN(got[one_call][0],
                           Read<uint8_t>(b, m, groups * sizeof(float)));
    OCTET_ASSIGN_OR_RETURN(got[one_call][1],
                           Read<uint8_t>(b, sc, groups * sizeof(float)));
    OCTET_ASSIGN_OR_RETURN(got[one_call][2], Read<uint8_t>(b, q, rows * cols));
  }
  Output o;
  const char* names[3] = {"absmax_agree", "scale_agree", "codes_agree"};
  for (int f = 0; f < 3; ++f) {
    std::vector<uint8_t> same(got[0][f].size());
    for (size_t i = 0; i < same.size(); ++i) {
      same[i] = got[0][f][i] == got[1][f][i];
    }
    o.fields.push_back(Bits(names[f], same));
  }
  return o;
}

// A static activation scale: codes saturate where |x| / scale > 448.
absl::StatusOr<Output> RunQuantizeStatic(Backend& b, int64_t count,
                                         int64_t offset) {
  std::vector<float> x(offset, 0.0f);
  const std::vector<float> v = NormalBf16Values(count, 81 + offset, 2.0f);
  x.insert(x.end(), v.begin(), v.end());
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer dx, UploadAct(b, x));
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer scale,
                         Upload(b, std::vector<float>{0.0123f}));
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer dq,
                         Upload(b, std::vector<uint8_t>(offset + count)));
  OCTET_RETURN_IF_ERROR(b.QuantizeStatic(ActAt(dx.data(), offset, b), count,
                                         scale.as<float>(),
                                         dq.as<uint8_t>() + offset));
  OCTET_ASSIGN_OR_RETURN(std::vector<uint8_t> q,
                         Read<uint8_t>(b, dq.as<uint8_t>() + offset, count));
  Output o;
  o.fields = {Bits("codes", q)};
  return o;
}

// An e4m3 weight with its per-tensor scale on b.
absl::StatusOr<LinearWeight> E4m3Weight(Backend& b, int64_t out, int64_t in,
                                        const std::vector<uint8_t>& codes,
                                        float scale) {
  LinearWeight w = WeightShape(out, in, DType::kE4m3);
  OCTET_ASSIGN_OR_RETURN(w.data, Upload(b, codes));
  OCTET_ASSIGN_OR_RETURN(w.scale, Upload(b, std::vector<float>{scale}));
  return w;
}

// The FP8 GEMM on given codes with one activation scale per group.
absl::StatusOr<Output> RunGemmE4m3(Backend& b, int64_t in, int64_t out,
                                   const std::vector<int64_t>& sizes,
                                   const std::vector<float>& q_scale,
                                   uint32_t seed) {
  const std::vector<int32_t> map = RowMap(sizes);
  const int64_t rows = map.size(), groups = sizes.size();
  const float w_scale = 1.0f / 3.0f;
  const std::vector<uint8_t> qx = testing::RandomCodes(rows * in, seed),
                             qw = testing::RandomCodes(out * in, seed + 1);
  OCTET_ASSIGN_OR_RETURN(LinearWeight w, E4m3Weight(b, out, in, qw, w_scale));
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer dq, Upload(b, qx));
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer ds, Upload(b, q_scale));
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer dmap, Upload(b, map));
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer y, ActOut(b, rows * out));
  const RowGroups g =
      groups == 1 ? RowGroups{} : RowGroups{groups, dmap.as<int32_t>()};
  OCTET_RETURN_IF_ERROR(
      b.GemmE4m3(dq.as<uint8_t>(), ds.as<float>(), g, rows, w, y.data()));
  OCTET_ASSIGN_OR_RETURN(std::vector<float> got,
                         ReadAct(b, y.data(), rows * out));
  Output o;
  o.fields = {
      Near("y", std::move(got), true,
           GemmBound(
               rows, out, in, [&](int64_t i) { return DecodeE4m3(qx[i]); },
               [&](int64_t i) { return DecodeE4m3(qw[i]); },
               [&](int64_t r) { return double(q_scale[map[r]] * w_scale); },
               kFp8TensorCoreRel))};
  return o;
}

// GemmE4m3 with each row its own sequence (a decode batch), run the first
// and the last way the backend has (RowGroupGemmWays; CUDA: outer-vector
// scales, and two passes or, on sm_90 with CUTLASS built, CUTLASS's GEMM):
// each within the GEMM bound of the reference. A
// backend with one way must answer SetRowGroupGemmWay Unimplemented.
absl::StatusOr<Output> RunGemmE4m3Ways(Backend& b) {
  const Backend::GemmWays ways = b.RowGroupGemmWays();
  const std::vector<int64_t> sizes(5, 1);
  LinearWeight shape;  // the ways are chosen by shape
  shape.out = 64;
  shape.in = 256;
  Output o;
  for (int last = 0; last < 2; ++last) {
    const int way = last ? static_cast<int>(ways.names.size()) - 1 : 0;
    const absl::Status set = b.SetRowGroupGemmWay(5, shape, way);
    if (ways.names.empty() ? !absl::IsUnimplemented(set) : !set.ok()) {
      return absl::InternalError(absl::StrCat("SetRowGroupGemmWay with ",
                                              ways.names.size(),
                                              " ways: ", set.ToString()));
    }
    OCTET_ASSIGN_OR_RETURN(
        Output one, RunGemmE4m3(b, 256, 64, sizes,
                                {0.5f, 0.03f, 2.0f, 1.0f / 64, 7.0f}, 163));
    one.fields[0].name = last ? "y_last_way" : "y_first_way";
    o.fields.push_back(std::move(one.fields[0]));
  }
  return o;
}

// For a backend without block sums: both optional ops must answer
// Unimplemented (backend.h), and the case reports itself unsupported.
absl::StatusOr<Output> NoBlockSums(Backend& b) {
  OCTET_ASSIGN_OR_RETURN(
      LinearWeight w, E4m3Weight(b, 16, 32, std::vector<uint8_t>(512), 1.0f));
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer x,
                         Upload(b, std::vector<uint8_t>(2 * 32)));
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer sums,
                         Upload(b, std::vector<float>(2 * 16)));
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer scale, Upload(b, std::vector<float>{1}));
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer y, ActOut(b, 2 * 16));
  const absl::Status sums_status =
      b.GemmBlockSums(x.data(), 2, w, 2, sums.as<float>());
  const absl::Status scale_status =
      b.ScaleRows(sums.as<float>(), 2, scale.as<float>(), RowGroups{}, w,
                  y.data(), b.activation_dtype(), RowsInto::kWrite);
  for (const absl::Status& s : {sums_status, scale_status}) {
    if (s.code() != absl::StatusCode::kUnimplemented) {
      return absl::InternalError(
          absl::StrCat("has_block_sums() is false but an optional op answered ",
                       s.ToString(), " instead of Unimplemented"));
    }
  }
  Output o;
  o.unsupported = absl::StrCat(b.Describe(),
                               " has no block sums (has_block_sums() false; "
                               "GemmBlockSums and ScaleRows answered "
                               "Unimplemented, as backend.h requires)");
  return o;
}

// GemmBlockSums: unscaled binary32 sums with K in `k_blocks` blocks, for e4m3
// weights (x: codes) or bfloat16 weights (x: activations); with lay_out,
// the weight laid out for those blocks first (LayOutWeight: the CPU's
// panels, CUDA's rows).
absl::StatusOr<Output> RunGemmBlockSums(Backend& b, bool e4m3, int64_t k_blocks,
                                        uint32_t seed, bool lay_out = false) {
  if (!b.has_block_sums()) return NoBlockSums(b);
  const int64_t rows = 13, in = 256, out = 64;
  std::vector<float> xf, wf;
  LinearWeight w;
  DeviceBuffer dx;
  if (e4m3) {
    const std::vector<uint8_t> qx = testing::RandomCodes(rows * in, seed),
                               qw = testing::RandomCodes(out * in, seed + 1);
    for (uint8_t c : qx) xf.push_back(DecodeE4m3(c));
    for (uint8_t c : qw) wf.push_back(DecodeE4m3(c));
    OCTET_ASSIGN_OR_RETURN(w, E4m3Weight(b, out, in, qw, 0.25f));
    OCTET_ASSIGN_OR_RETURN(dx, Upload(b, qx));
  } else {
    xf = NormalBf16Values(rows * in, seed);
    wf = NormalBf16Values(out * in, seed + 1, 0.0625f);
    w = WeightShape(out, in, DType::kBf16);
    OCTET_ASSIGN_OR_RETURN(w.data, Upload(b, ToBf16(wf)));
    OCTET_ASSIGN_OR_RETURN(dx, UploadAct(b, xf));
  }
  if (lay_out) OCTET_RETURN_IF_ERROR(b.LayOutWeight(w, k_blocks));
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer sums,
                         Upload(b, std::vector<float>(rows * out, kSentinel)));
  OCTET_RETURN_IF_ERROR(
      b.GemmBlockSums(dx.data(), rows, w, k_blocks, sums.as<float>()));
  OCTET_ASSIGN_OR_RETURN(std::vector<float> got,
                         Read<float>(b, sums.data(), rows * out));
  Output o;
  o.fields = {
      Near("sums", std::move(got), false,
           GemmBound(
               rows, out, in, [&](int64_t i) { return xf[i]; },
               [&](int64_t i) { return wf[i]; }, [](int64_t) { return 1.0; },
               e4m3 ? kFp8TensorCoreRel : Bf16TensorCoreRel(in)))};
  return o;
}

// ScaleRows: y = sums · (q_scale[g] · w.scale), the scales multiplied
// first, one rounding to the activation dtype: exact.
absl::StatusOr<Output> RunScaleRows(Backend& b, const Env&) {
  if (!b.has_block_sums()) return NoBlockSums(b);
  const std::vector<int64_t> sizes = {3, 1, 7, 2};
  const std::vector<int32_t> map = RowMap(sizes);
  const int64_t rows = map.size(), out = 48, in = 32;
  OCTET_ASSIGN_OR_RETURN(
      LinearWeight w,
      E4m3Weight(b, out, in, testing::RandomCodes(out * in, 91), 0.02f));
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer sums,
                         Upload(b, F32Values(rows * out, 92, 1000.0f)));
  OCTET_ASSIGN_OR_RETURN(
      DeviceBuffer scale,
      Upload(b, std::vector<float>{0.37f, 0.011f, 3.0f, 1e-3f}));
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer dmap, Upload(b, map));
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer y, ActOut(b, rows * out));
  OCTET_RETURN_IF_ERROR(b.ScaleRows(
      sums.as<float>(), rows, scale.as<float>(),
      RowGroups{static_cast<int64_t>(sizes.size()), dmap.as<int32_t>()}, w,
      y.data(), b.activation_dtype(), RowsInto::kWrite));
  OCTET_ASSIGN_OR_RETURN(std::vector<float> got,
                         ReadAct(b, y.data(), rows * out));
  Output o;
  o.fields = {Near("y", std::move(got), true)};
  return o;
}

// ScaleRows into a residual (RowsInto::kAdd), scaled and unscaled: y plus
// the rows as Add would add them, bit for bit what ScaleRows then Add give
// on the same backend (an error otherwise), and exact against the
// reference.
absl::StatusOr<Output> RunScaleRowsAdd(Backend& b, const Env&) {
  if (!b.has_block_sums()) return NoBlockSums(b);
  const std::vector<int64_t> sizes = {2, 5, 1};
  const std::vector<int32_t> map = RowMap(sizes);
  const int64_t rows = map.size(), out = 40, count = rows * out;
  OCTET_ASSIGN_OR_RETURN(
      LinearWeight w,
      E4m3Weight(b, out, 32, testing::RandomCodes(out * 32, 94), 0.03f));
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer sums,
                         Upload(b, F32Values(count, 95, 500.0f)));
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer scale,
                         Upload(b, std::vector<float>{0.21f, 0.013f, 2.0f}));
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer dmap, Upload(b, map));
  const RowGroups groups{static_cast<int64_t>(sizes.size()),
                         dmap.as<int32_t>()};
  const std::vector<float> residual = NormalBf16Values(count, 96, 4.0f);
  Output o;
  const float* scaled = scale.as<float>();
  for (const float* q_scale : {scaled, static_cast<const float*>(nullptr)}) {
    OCTET_ASSIGN_OR_RETURN(DeviceBuffer h, UploadAct(b, residual));
    OCTET_ASSIGN_OR_RETURN(DeviceBuffer h2, UploadAct(b, residual));
    OCTET_ASSIGN_OR_RETURN(DeviceBuffer proj, ActOut(b, count));
    const DType act = b.activation_dtype();
    OCTET_RETURN_IF_ERROR(b.ScaleRows(sums.as<float>(), rows, q_scale, groups,
                                      w, h.data(), act, RowsInto::kAdd));
    OCTET_RETURN_IF_ERROR(b.ScaleRows(sums.as<float>(), rows, q_scale, groups,
                                      w, proj.data(), act, RowsInto::kWrite));
    OCTET_RETURN_IF_ERROR(b.Add(h2.data(), proj.data(), count));
    OCTET_ASSIGN_OR_RETURN(std::vector<float> got, ReadAct(b, h.data(), count));
    OCTET_ASSIGN_OR_RETURN(std::vector<float> apart,
                           ReadAct(b, h2.data(), count));
    if (got != apart) {
      return absl::InternalError(
          "ScaleRows into a residual differs from ScaleRows then Add");
    }
    o.fields.push_back(
        Near(q_scale ? "h_scaled" : "h_unscaled", std::move(got), true));
  }
  return o;
}

// Codes of small integers (-3 .. 3): their products and any sum of up to
// 2^20 of them are exact in binary32, in whatever order a GEMM adds them.
std::vector<uint8_t> SmallIntegerCodes(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> pick(-3, 3);
  std::vector<uint8_t> codes(n);
  for (uint8_t& c : codes) c = EncodeE4m3(static_cast<float>(pick(rng)));
  return codes;
}

// GemmScaledBlockSums of codes x and w's, in `k_blocks` blocks, into y
// (starting as `residual`) as `into` says; an error unless it is bit for
// bit what GemmBlockSums then ScaleRows give on the same backend.
absl::StatusOr<std::vector<float>> ScaledBlockSumsAsApart(
    Backend& b, const DeviceBuffer& x, int64_t rows, const LinearWeight& w,
    int64_t k_blocks, const float* q_scale, const RowGroups& groups,
    const std::vector<float>& residual, RowsInto into) {
  const int64_t count = rows * w.out;
  const DType act = b.activation_dtype();
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer y, UploadAct(b, residual));
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer y2, UploadAct(b, residual));
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer sums,
                         Upload(b, std::vector<float>(count, kSentinel)));
  OCTET_RETURN_IF_ERROR(b.GemmScaledBlockSums(x.data(), rows, w, k_blocks,
                                              q_scale, groups, sums.as<float>(),
                                              y.data(), act, into));
  OCTET_RETURN_IF_ERROR(
      b.GemmBlockSums(x.data(), rows, w, k_blocks, sums.as<float>()));
  OCTET_RETURN_IF_ERROR(b.ScaleRows(sums.as<float>(), rows, q_scale, groups, w,
                                    y2.data(), act, into));
  OCTET_ASSIGN_OR_RETURN(std::vector<float> got, ReadAct(b, y.data(), count));
  OCTET_ASSIGN_OR_RETURN(std::vector<float> apart,
                         ReadAct(b, y2.data(), count));
  if (got != apart) {
    return absl::InternalError(
        absl::StrCat("GemmScaledBlockSums in ", k_blocks,
                     " blocks differs from GemmBlockSums then ScaleRows"));
  }
  return got;
}

// GemmScaledBlockSums, against GemmBlockSums then ScaleRows on the same
// backend, bit for bit: random codes (sums that depend on the order of
// their additions) in 1, 3, 12 and 24 blocks; and codes of small integers
// (exact sums) in 4 blocks, into a residual and over a buffer, exact
// against the reference too.
absl::StatusOr<Output> RunGemmScaledBlockSums(Backend& b, const Env&) {
  if (!b.has_block_sums()) return NoBlockSums(b);
  const std::vector<int64_t> sizes = {3, 1, 4};
  const std::vector<int32_t> map = RowMap(sizes);
  const int64_t rows = map.size(), out = 48, in = 384;
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer scale,
                         Upload(b, std::vector<float>{0.013f, 0.7f, 0.0041f}));
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer dmap, Upload(b, map));
  const RowGroups groups{static_cast<int64_t>(sizes.size()),
                         dmap.as<int32_t>()};
  const std::vector<float> residual = NormalBf16Values(rows * out, 99, 2.0f);
  {
    OCTET_ASSIGN_OR_RETURN(
        LinearWeight w,
        E4m3Weight(b, out, in, testing::RandomCodes(out * in, 96), 0.0371f));
    OCTET_ASSIGN_OR_RETURN(DeviceBuffer x,
                           Upload(b, testing::RandomCodes(rows * in, 95)));
    for (int64_t k_blocks : {1, 3, 12, 24}) {
      OCTET_RETURN_IF_ERROR(ScaledBlockSumsAsApart(b, x, rows, w, k_blocks,
                                                   scale.as<float>(), groups,
                                                   residual, RowsInto::kAdd)
                                .status());
    }
  }
  OCTET_ASSIGN_OR_RETURN(
      LinearWeight w,
      E4m3Weight(b, out, in, SmallIntegerCodes(out * in, 97), 0.0371f));
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer x,
                         Upload(b, SmallIntegerCodes(rows * in, 98)));
  Output o;
  for (RowsInto into : {RowsInto::kAdd, RowsInto::kWrite}) {
    OCTET_ASSIGN_OR_RETURN(
        std::vector<float> got,
        ScaledBlockSumsAsApart(b, x, rows, w, 4, scale.as<float>(), groups,
                               residual, into));
    o.fields.push_back(
        Near(into == RowsInto::kAdd ? "h" : "y", std::move(got), true));
  }
  return o;
}

// ScaleRows without scales (q_scale null): y = sums rounded once to the
// activation dtype, for unquantized row-parallel sums, and in place in
// binary32 (y = sums itself): exact.
absl::StatusOr<Output> RunScaleRowsUnscaled(Backend& b, const Env&) {
  if (!b.has_block_sums()) return NoBlockSums(b);
  const int64_t rows = 5, out = 40;
  const LinearWeight w = WeightShape(out, 16, DType::kBf16);
  const std::vector<float> values = F32Values(rows * out, 93, 100.0f);
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer sums, Upload(b, values));
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer y, ActOut(b, rows * out));
  OCTET_RETURN_IF_ERROR(b.ScaleRows(sums.as<float>(), rows, nullptr,
                                    RowGroups{}, w, y.data(),
                                    b.activation_dtype(), RowsInto::kWrite));
  OCTET_RETURN_IF_ERROR(b.ScaleRows(sums.as<float>(), rows, nullptr,
                                    RowGroups{}, w, sums.data(), DType::kF32,
                                    RowsInto::kWrite));
  OCTET_ASSIGN_OR_RETURN(std::vector<float> got,
                         ReadAct(b, y.data(), rows * out));
  OCTET_ASSIGN_OR_RETURN(std::vector<float> same,
                         Read<float>(b, sums.data(), rows * out));
  if (same != values) {
    return absl::InternalError(
        "ScaleRows in place without scales changed "
        "the sums");
  }
  Output o;
  o.fields = {Near("y", std::move(got), true)};
  return o;
}

// Sample on binary32 logits: greedy, temperature, top-k, top-p, penalty,
// with log-probabilities, the rows as given and in a decode graph's fixed
// layout (StageSample, SampleStaged, TakeSampled). Ids bit for bit: the draws
// of these few rows are far from a boundary between tokens (a GPU's sums in
// another order could otherwise move one;
// tests/kernels/backend_sampling_test.cc has the rest).
absl::StatusOr<Output> RunSample(Backend& b, const Env&) {
  const int64_t rows = 4, vocab = 1000;
  const std::vector<float> x = F32Values(rows * vocab, 77, 4.0f);
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer dx, Upload(b, x));
  static const std::vector<int32_t> history = {3, 999, 3, 500, 12};
  std::vector<SampleRow> sample;
  for (int64_t i = 0; i < 12; ++i) {
    SampleRow r{.logits_row = i % rows, .position = 40 + i};
    r.params = {.temperature = i % 3 == 0 ? 0.0f : 0.7f + 0.1f * (i % 4),
                .top_k = i % 4 == 1 ? 20 : 0,
                .top_p = i % 5 == 2 ? 0.8f : 1.0f,
                .seed = static_cast<uint64_t>(i)};
    r.repetition_penalty = i % 2 ? 1.2f : 1.0f;
    r.history = history;
    r.logprob = true;
    sample.push_back(r);
  }
  // The rows as given (Sample), then as a decode graph stages them: padded
  // to 16, every row sorted.
  std::vector<SampledToken> out(sample.size()), fixed(sample.size());
  OCTET_RETURN_IF_ERROR(b.Sample(dx.as<float>(), vocab, sample, out.data()));
  OCTET_RETURN_IF_ERROR(
      b.StageSample(vocab, sample, {.padded_rows = 16, .reserve_rows = 16})
          .status());
  OCTET_RETURN_IF_ERROR(b.SampleStaged(dx.as<float>(), vocab));
  OCTET_RETURN_IF_ERROR(b.TakeSampled(absl::MakeSpan(fixed)));
  std::vector<int32_t> ids;
  Field logprobs;
  logprobs.name = "logprobs";
  logprobs.check = Check::kNear;
  out.insert(out.end(), fixed.begin(), fixed.end());
  for (const SampledToken& t : out) {
    ids.push_back(t.id);
    logprobs.values.push_back(t.logprob);
  }
  Output o;
  o.fields = {Bits("ids", ids), logprobs};
  return o;
}

// Vocabulary-parallel logits of 3 ranks, 5 sequences, 7 columns each.
absl::StatusOr<Output> RunInterleaveParts(Backend& b, const Env&) {
  const int64_t parts = 3, rows = 5, cols = 7;
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer in,
                         Upload(b, F32Values(parts * rows * cols, 151, 5.0f)));
  OCTET_ASSIGN_OR_RETURN(
      DeviceBuffer out,
      Upload(b, std::vector<float>(rows * parts * cols, kSentinel)));
  OCTET_RETURN_IF_ERROR(
      b.InterleaveParts(in.as<float>(), parts, rows, cols, out.as<float>()));
  OCTET_ASSIGN_OR_RETURN(std::vector<float> y,
                         Read<float>(b, out.data(), rows * parts * cols));
  Output o;
  o.fields = {Bits("logits", y)};
  return o;
}

absl::StatusOr<Output> RunGatherRows(Backend& b, const Env&) {
  const int64_t rows = 37, cols = 200;
  const std::vector<int32_t> pick = {5, 0, 36, 5, 17};
  const int64_t n = pick.size();
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer x,
                         UploadAct(b, NormalBf16Values(rows * cols, 111)));
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer idx, Upload(b, pick));
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer out, ActOut(b, n * cols));
  OCTET_RETURN_IF_ERROR(
      b.GatherRows(x.data(), cols, idx.as<int32_t>(), n, out.data()));
  OCTET_ASSIGN_OR_RETURN(std::vector<float> y,
                         ReadAct(b, out.data(), n * cols));
  Output o;
  o.fields = {Near("out", std::move(y), true)};
  return o;
}

const std::vector<Case>& Cases() {
  static const auto* cases = new std::vector<Case>{
      {"Memory",
       {"Allocate", "CopyToDevice", "CopyToHost", "Synchronize", "Free", "kind",
        "activation_dtype", "Describe"},
       kExact,
       RunMemory},
      {"EmbeddingBf16Shard",
       {"Embedding"},
       kExact,
       [](Backend& b, const Env&) { return RunEmbedding(b, DType::kBf16); }},
      {"EmbeddingF32Table",
       {"Embedding"},
       kExact,
       [](Backend& b, const Env&) { return RunEmbedding(b, DType::kF32); }},
      {"RmsNorm",
       {"RmsNorm"},
       kOneRounding,
       [](Backend& b, const Env&) { return RunRmsNorm(b, 37, 200, 1e-5f, 1); }},
      {"RmsNormWide",
       {"RmsNorm"},
       kOneRounding,
       [](Backend& b, const Env&) { return RunRmsNorm(b, 3, 5120, 1e-6f, 3); }},
      {"Add", {"Add"}, kExact, RunAdd},
      // Device sincosf vs libm: a few binary32 ulps of values below ~4.
      {"RopeFusedQkv",
       {"Rope"},
       {0x1p-7, 1e-5},
       [](Backend& b, const Env&) {
         return RunRope(b, 3, 1, 64,
                        {0, 1, 2, 7, 100, 1000, 4095, 8191, 30000});
       }},
      {"RopeHeadDim128",
       {"Rope"},
       {0x1p-7, 1e-5},
       [](Backend& b, const Env&) {
         return RunRope(b, 8, 2, 128, {5, 131071});
       }},
      {"RmsNormHeads", {"RmsNormHeads"}, kOneRounding, RunRmsNormHeads},
      {"AddBias", {"AddBias"}, kOneRounding, RunAddBias},
      {"SiluMul", {"SiluMul"}, kOneRounding, RunSiluMul},
      {"WriteKv", {"WriteKv"}, kExact, RunWriteKv},
      // Rope's tolerance: device sincosf vs libm.
      {"RopeWriteKv",
       {"RopeWriteKv", "Rope", "WriteKv"},
       {0x1p-7, 1e-5},
       RunRopeWriteKv},
      // Scores differ by binary32 summation order (up to γ_d·Σ|q·k|) and
      // device expf, moving the softmax weights by well under 1e-3 relative;
      // outputs are averages of values below ~4: 2e-3 absolute.
      {"AttentionGqaPaged",
       {"Attention"},
       {0x1p-7, 2e-3},
       [](Backend& b, const Env& e) {
         return RunAttention(
             b, e, {4, 2, 64, 4, 0, true, {{0, 19}, {40, 1}, {10, 6}}});
       }},
      {"AttentionSlidingWindow",
       {"Attention"},
       {0x1p-7, 2e-3},
       [](Backend& b, const Env& e) {
         return RunAttention(
             b, e, {4, 2, 64, 4, 5, true, {{0, 19}, {40, 1}, {10, 6}}});
       }},
      // Mistral-7B's grouping at the context limit: decode tokens at
      // positions 0, 4095 and 32767 and a chunk deep in a long prompt, so
      // that a GPU cuts the keys into parts and merges them; and with its
      // sliding window (4096).
      {"AttentionLongContext",
       {"Attention"},
       {0x1p-7, 2e-3},
       [](Backend& b, const Env& e) {
         return RunAttention(b, e,
                             {8,
                              2,
                              128,
                              16,
                              0,
                              true,
                              {{0, 1}, {4095, 1}, {32767, 1}, {30000, 5}}});
       }},
      {"AttentionLongContextWindow",
       {"Attention"},
       {0x1p-7, 2e-3},
       [](Backend& b, const Env& e) {
         return RunAttention(
             b, e,
             {8, 2, 128, 16, 4096, true, {{4095, 1}, {32767, 1}, {30000, 5}}});
       }},
      // Enough tokens to fill a GPU: one part per token, no merge.
      {"AttentionPrefillOnePart",
       {"Attention"},
       {0x1p-7, 2e-3},
       [](Backend& b, const Env& e) {
         return RunAttention(b, e, {32, 8, 128, 16, 0, true, {{0, 40}}});
       }},
      // The same kind of batch with query tiles (the CUDA prefill kernel):
      // prompt chunks of 40 and 17 (tiles of 8 and a tail) and a decode
      // token, with and without a window that cuts into the chunks.
      {"AttentionPrefillTiles",
       {"Attention", "attention_query_tile"},
       {0x1p-7, 2e-3},
       [](Backend& b, const Env& e) {
         return RunAttention(
             b, e,
             {32, 8, 128, 16, 0, true, {{0, 40}, {100, 17}, {500, 1}}, true});
       }},
      {"AttentionPrefillTilesWindow",
       {"Attention", "attention_query_tile"},
       {0x1p-7, 2e-3},
       [](Backend& b, const Env& e) {
         return RunAttention(
             b, e,
             {32, 8, 64, 16, 20, true, {{0, 40}, {100, 17}, {500, 1}}, true});
       }},
      // The same batches offered a host plan (CUDA: FlashInfer's prefill
      // kernels where they serve, cuda_ops_test checks that they do), and
      // a chunk deep in a long context beside a short prompt, so that
      // FlashInfer splits the keys and merges.
      {"AttentionPlannedPrefill",
       {"Attention", "PlanAttention"},
       {0x1p-7, 2e-3},
       [](Backend& b, const Env& e) {
         AttentionCase c{
             32, 8, 128, 16, 0, true, {{0, 40}, {100, 17}, {500, 1}}};
         c.planned = true;
         return RunAttention(b, e, c);
       }},
      {"AttentionPlannedPrefillWindow",
       {"Attention", "PlanAttention"},
       {0x1p-7, 2e-3},
       [](Backend& b, const Env& e) {
         AttentionCase c{
             32, 8, 64, 16, 20, true, {{0, 40}, {100, 17}, {500, 1}}};
         c.planned = true;
         return RunAttention(b, e, c);
       }},
      {"AttentionPlannedLongContext",
       {"Attention", "PlanAttention"},
       {0x1p-7, 2e-3},
       [](Backend& b, const Env& e) {
         AttentionCase c{8, 2, 128, 16, 0, true, {{30000, 5}, {0, 33}}};
         c.planned = true;
         return RunAttention(b, e, c);
       }},
      {"AttentionMaxHeadDim",
       {"Attention", "max_head_dim"},
       {0x1p-7, 2e-3},
       [](Backend& b, const Env& e) {
         return RunAttention(b, e, {2, 2, 0, 16, 0, false, {{0, 33}, {20, 1}}});
       }},
      {"GemmBf16ToActivation",
       {"Gemm"},
       kGemmAct,
       [](Backend& b, const Env&) {
         return RunGemm(b, 13, 256, 64, false, 121);
       }},
      {"GemmBf16ToF32Logits",
       {"Gemm"},
       kGemmF32,
       [](Backend& b, const Env&) {
         return RunGemm(b, 3, 256, 512, true, 123);
       }},
      {"GemmBf16RaggedShape",  // odd K and N: whichever path takes them
       {"Gemm"},
       kGemmAct,
       [](Backend& b, const Env&) {
         return RunGemm(b, 5, 100, 33, false, 125);
       }},
      {"AbsMaxQuantizeOneGroup",
       {"AbsMax", "Quantize"},
       kExact,
       [](Backend& b, const Env&) {
         return RunAbsMaxQuantize(b, GroupedActivations(256), 256, {13}, 0);
       }},
      {"AbsMaxQuantizeRowGroups",
       {"AbsMax", "Quantize"},
       kExact,
       [](Backend& b, const Env&) {
         return RunAbsMaxQuantize(b, GroupedActivations(256), 256, {3, 1, 7, 2},
                                  0);
       }},
      {"AbsMaxQuantizeSpecialsMisaligned",
       {"AbsMax", "Quantize"},
       kExact,
       [](Backend& b, const Env&) {
         return RunAbsMaxQuantize(b, SpecialActivations(7 * 143, 131, false),
                                  143, {7}, 1);
       }},
      {"AbsMaxQuantizeSpecialsRowGroups",
       {"AbsMax", "Quantize"},
       kExact,
       [](Backend& b, const Env&) {
         return RunAbsMaxQuantize(b, SpecialActivations(6 * 333, 132, true),
                                  333, {2, 3, 1}, 0);
       }},
      {"QuantizeStatic",
       {"QuantizeStatic"},
       kExact,
       [](Backend& b, const Env&) { return RunQuantizeStatic(b, 1001, 0); }},
      {"QuantizeStaticMisaligned",
       {"QuantizeStatic"},
       kExact,
       [](Backend& b, const Env&) { return RunQuantizeStatic(b, 4097, 1); }},
      {"GemmE4m3OneGroup",
       {"GemmE4m3"},
       kGemmAct,
       [](Backend& b, const Env&) {
         return RunGemmE4m3(b, 256, 64, {13}, {0.37f}, 141);
       }},
      {"GemmE4m3RowGroups",
       {"GemmE4m3"},
       kGemmAct,
       [](Backend& b, const Env&) {
         return RunGemmE4m3(b, 256, 64, {3, 1, 7, 2},
                            {0.5f, 0.03f, 2.0f, 1e-3f}, 143);
       }},
      {"GemmE4m3RaggedShape",  // K, N not multiples of 16: the fallback
       {"GemmE4m3"},
       kGemmAct,
       [](Backend& b, const Env&) {
         return RunGemmE4m3(b, 100, 33, {2, 3}, {0.25f, 4.0f}, 145);
       }},
      {"GemmBlockSumsE4m3",
       {"has_block_sums", "GemmBlockSums"},
       kGemmF32,
       [](Backend& b, const Env&) {
         return RunGemmBlockSums(b, true, 4, 151);
       }},
      {"GemmBlockSumsBf16",
       {"has_block_sums", "GemmBlockSums"},
       kGemmF32,
       [](Backend& b, const Env&) {
         return RunGemmBlockSums(b, false, 2, 153);
       }},
      {"GemmBlockSumsE4m3LaidOut",
       {"has_block_sums", "LayOutWeight", "GemmBlockSums"},
       kGemmF32,
       [](Backend& b, const Env&) {
         return RunGemmBlockSums(b, true, 4, 155, true);
       }},
      {"GemmBlockSumsBf16LaidOut",
       {"has_block_sums", "LayOutWeight", "GemmBlockSums"},
       kGemmF32,
       [](Backend& b, const Env&) {
         return RunGemmBlockSums(b, false, 2, 157, true);
       }},
      {"ScaleRows", {"has_block_sums", "ScaleRows"}, kExact, RunScaleRows},
      {"ScaleRowsAdd",
       {"has_block_sums", "ScaleRows", "Add"},
       kExact,
       RunScaleRowsAdd},
      {"GemmScaledBlockSums",
       {"has_block_sums", "GemmScaledBlockSums", "GemmBlockSums", "ScaleRows"},
       kExact,
       RunGemmScaledBlockSums},
      {"ScaleRowsUnscaled",
       {"has_block_sums", "ScaleRows"},
       kExact,
       RunScaleRowsUnscaled},
      {"GatherRows", {"GatherRows"}, kExact, RunGatherRows},
      {"InterleaveParts", {"InterleaveParts"}, kExact, RunInterleaveParts},
      // Log-probabilities: binary64 sums in another order, one binary32
      // rounding.
      {"Sample",
       {"StageSample", "SampleStaged", "TakeSampled"},
       Tolerance{0x1p-20, 1e-6},
       RunSample},
      {"FusedRmsNormQuantizeGroups",
       {"FusedAbsMax", "FusedQuantize", "fuses_input_quantization", "RmsNorm",
        "AbsMax", "Quantize"},
       kExact,
       [](Backend& b, const Env&) {
         return RunFused(b, FusedInput::Op::kRmsNorm, true);
       }},
      {"FusedRmsNormQuantizeOneTensor",
       {"FusedAbsMax", "FusedQuantize"},
       kExact,
       [](Backend& b, const Env&) {
         return RunFused(b, FusedInput::Op::kRmsNorm, false);
       }},
      {"FusedSiluMulQuantizeGroups",
       {"FusedAbsMax", "FusedQuantize", "SiluMul"},
       kExact,
       [](Backend& b, const Env&) {
         return RunFused(b, FusedInput::Op::kSiluMul, true);
       }},
      {"QuantizeGroupsOwnRowsFromMemory",
       {"QuantizeGroups", "AbsMax", "Quantize"},
       kExact,
       [](Backend& b, const Env&) {
         return RunOneCall(b, nullptr, std::vector<int64_t>(7, 1), 288);
       }},
      {"QuantizeGroupsOwnRowsRmsNorm",
       {"QuantizeGroups", "FusedAbsMax", "FusedQuantize"},
       kExact,
       [](Backend& b, const Env&) {
         const FusedInput::Op op = FusedInput::Op::kRmsNorm;
         return RunOneCall(b, &op, std::vector<int64_t>(7, 1), 288);
       }},
      {"QuantizeGroupsOwnRowsSiluMul",
       {"QuantizeGroups", "FusedAbsMax", "FusedQuantize"},
       kExact,
       [](Backend& b, const Env&) {
         const FusedInput::Op op = FusedInput::Op::kSiluMul;
         return RunOneCall(b, &op, std::vector<int64_t>(7, 1), 288);
       }},
      // Several rows per group, one group, and more rows than a GPU holds
      // blocks at once (the grid's blocks take several rows each).
      {"QuantizeGroupsFromMemory",
       {"QuantizeGroups", "AbsMax", "Quantize"},
       kExact,
       [](Backend& b, const Env&) {
         return RunOneCall(b, nullptr, {2, 4, 1}, 288);
       }},
      {"QuantizeGroupsOneGroup",
       {"QuantizeGroups", "AbsMax", "Quantize"},
       kExact,
       [](Backend& b, const Env&) { return RunOneCall(b, nullptr, {7}, 288); }},
      {"QuantizeGroupsRmsNorm",
       {"QuantizeGroups", "FusedAbsMax", "FusedQuantize"},
       kExact,
       [](Backend& b, const Env&) {
         const FusedInput::Op op = FusedInput::Op::kRmsNorm;
         return RunOneCall(b, &op, {3, 1, 3}, 288);
       }},
      {"QuantizeGroupsSiluMulManyRows",
       {"QuantizeGroups", "FusedAbsMax", "FusedQuantize"},
       kExact,
       [](Backend& b, const Env&) {
         const FusedInput::Op op = FusedInput::Op::kSiluMul;
         return RunOneCall(b, &op, {1500, 7, 2493}, 64);
       }},
      {"GemmE4m3EachWay",
       {"RowGroupGemmWays", "SetRowGroupGemmWay", "GemmE4m3"},
       kGemmAct,
       [](Backend& b, const Env&) { return RunGemmE4m3Ways(b); }},
      {"Clock", {"NewClock", "Add"}, kExact, RunClock},
      {"CaptureReplay",
       {"can_capture", "BeginCapture", "EndCapture", "Add", "CopyToDevice",
        "CopyToHost", "cuda_stream"},
       kExact,
       RunCapture},
  };
  return *cases;
}

// ------------------------------------------------------------ comparison

// Every field of the reference has elements and not all of them zero (a
// case that reads back nothing would compare equal anywhere).
void ExpectMeaningful(const Output& ref) {
  ASSERT_FALSE(ref.fields.empty());
  for (const Field& f : ref.fields) {
    const size_t n = f.check == Check::kBits ? f.bits.size() : f.values.size();
    EXPECT_GT(n, 0u) << f.name;
    const bool any = std::any_of(f.bits.begin(), f.bits.end(),
                                 [](uint32_t v) { return v != 0; }) ||
                     std::any_of(f.values.begin(), f.values.end(), [](float v) {
                       return v != 0 && v != kSentinel;
                     });
    EXPECT_TRUE(any) << f.name << ": the reference output is all zeros";
  }
}

// `got` (from a backend whose activations are `got_act`) against the
// reference `want`.
void Compare(const Output& want, const Output& got, const Tolerance& tol,
             DType got_act, const std::string& label) {
  ASSERT_EQ(want.fields.size(), got.fields.size()) << label;
  constexpr int kShown = 8;
  for (size_t f = 0; f < want.fields.size(); ++f) {
    const Field& w = want.fields[f];
    const Field& g = got.fields[f];
    ASSERT_EQ(w.name, g.name) << label;
    if (w.check == Check::kBits) {
      ASSERT_EQ(w.bits.size(), g.bits.size()) << label << " " << w.name;
      int bad = 0;
      for (size_t i = 0; i < w.bits.size(); ++i) {
        if (w.bits[i] == g.bits[i]) continue;
        if (++bad <= kShown) {
          ADD_FAILURE() << label << " " << w.name << "[" << i << "]: got 0x"
                        << std::hex << g.bits[i] << " want 0x" << w.bits[i]
                        << std::dec << " (bit for bit)";
        }
      }
      EXPECT_EQ(bad, 0) << label << " " << w.name << ": " << bad << " of "
                        << w.bits.size() << " elements differ";
      continue;
    }
    ASSERT_EQ(w.values.size(), g.values.size()) << label << " " << w.name;
    const bool round = w.activation && got_act == DType::kBf16;
    int bad = 0;
    double max_err = 0, max_ratio = 0;
    for (size_t i = 0; i < w.values.size(); ++i) {
      const float want_v =
          round ? Bf16ToFloat(FloatToBf16(w.values[i])) : w.values[i];
      const float got_v = g.values[i];
      if (std::isnan(want_v) || std::isnan(got_v)) {
        if (std::isnan(want_v) && std::isnan(got_v)) continue;
      } else if (want_v == got_v) {
        continue;  // also equal infinities
      }
      const double err = std::fabs(double(got_v) - double(want_v));
      const double allowed = tol.rel * std::fabs(double(want_v)) + tol.abs +
                             (w.bound.empty() ? 0.0 : double(w.bound[i]));
      if (!std::isnan(err)) {
        max_err = std::max(max_err, err);
        max_ratio = std::max(max_ratio, allowed > 0 ? err / allowed : INFINITY);
      }
      if (err <= allowed) continue;
      if (++bad <= kShown) {
        ADD_FAILURE() << label << " " << w.name << "[" << i << "]: got "
                      << got_v << " want " << want_v << " (reference "
                      << w.values[i] << "), |err| " << err << " > " << allowed;
      }
    }
    EXPECT_EQ(bad, 0) << label << " " << w.name << ": " << bad << " of "
                      << w.values.size() << " elements out of tolerance";
    std::printf(
        "[ measured ] %s %s: max |err| %.3g, max |err|/tolerance %.3g\n",
        label.c_str(), w.name.c_str(), max_err, max_ratio);
  }
}

class BackendTableTest : public ::testing::TestWithParam<Case> {};

TEST_P(BackendTableTest, CudaMatchesCpu) {
  const Case& c = GetParam();
  std::unique_ptr<Backend> gpu;
  if (CudaDeviceSupported(0)) {
    absl::StatusOr<std::unique_ptr<Backend>> g = NewCudaBackend(0);
    ASSERT_TRUE(g.ok()) << g.status();
    gpu = *std::move(g);
  }
  // The reference: the CPU backend's scalar kernels on one thread.
  std::unique_ptr<Backend> ref =
      NewCpuBackend({.isa = CpuIsa::kScalar, .num_threads = 1});
  std::unique_ptr<Backend> cpu = NewCpuBackend();
  Env env{std::min(ref->max_head_dim(), cpu->max_head_dim())};
  if (gpu != nullptr) {
    env.max_head_dim = std::min(env.max_head_dim, gpu->max_head_dim());
  } else {
    env.max_head_dim = std::min<int64_t>(env.max_head_dim, 256);
  }

  absl::StatusOr<Output> want = c.run(*ref, env);
  ASSERT_TRUE(want.ok()) << ref->Describe() << ": " << want.status();
  ASSERT_TRUE(want->unsupported.empty()) << want->unsupported;
  ExpectMeaningful(*want);

  // The CPU backend as the worker runs it, against its scalar kernels.
  absl::StatusOr<Output> cpu_out = c.run(*cpu, env);
  ASSERT_TRUE(cpu_out.ok()) << cpu->Describe() << ": " << cpu_out.status();
  ASSERT_TRUE(cpu_out->unsupported.empty()) << cpu_out->unsupported;
  Compare(*want, *cpu_out, c.tol, cpu->activation_dtype(), "cpu vs cpu-scalar");
  if (HasFailure()) return;

  OCTET_REQUIRE_CUDA_DEVICE();
  ASSERT_NE(gpu, nullptr);
  absl::StatusOr<Output> got = c.run(*gpu, env);
  ASSERT_TRUE(got.ok()) << gpu->Describe() << ": " << got.status();
  OCTET_ASSERT_OK(gpu->Synchronize());
  if (!got->unsupported.empty()) GTEST_SKIP() << got->unsupported;
  Compare(*want, *got, c.tol, gpu->activation_dtype(), "cuda vs cpu-scalar");
}

// Test names: backend_table/BackendTableTest.CudaMatchesCpu/<case>, so that
// `ctest -R backend_table` selects them.
INSTANTIATE_TEST_SUITE_P(backend_table, BackendTableTest,
                         ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.name;
                         });

// ------------------------------------------------------------ coverage

// The names of the virtual methods of class Backend in backend.h (comments
// removed), destructor excluded.
std::set<std::string> DeclaredMethods(const std::string& header) {
  std::string text;
  for (size_t i = 0; i < header.size();) {
    if (header.compare(i, 2, "//") == 0) {
      i = header.find('\n', i);
      if (i == std::string::npos) break;
    } else {
      text += header[i++];
    }
  }
  std::set<std::string> names;
  const size_t begin = text.find("class Backend {");
  const size_t end = text.find("\n};", begin);
  if (begin == std::string::npos || end == std::string::npos) return names;
  const std::string body = text.substr(begin, end - begin);
  for (size_t at = body.find("virtual "); at != std::string::npos;
       at = body.find("virtual ", at + 1)) {
    const size_t paren = body.find('(', at);
    if (paren == std::string::npos) break;
    size_t e = paren;
    while (e > at && std::isspace(static_cast<unsigned char>(body[e - 1]))) --e;
    size_t s = e;
    while (s > at && (std::isalnum(static_cast<unsigned char>(body[s - 1])) ||
                      body[s - 1] == '_' || body[s - 1] == '~')) {
      --s;
    }
    const std::string name = body.substr(s, e - s);
    if (!name.empty() && name[0] != '~') names.insert(name);
  }
  return names;
}

// The worker calls its backend from whichever gRPC thread runs a step, and
// the CUDA runtime keeps the current device per thread. A backend on the
// last device, used from a thread whose current device is 0, must still
// allocate and run there. (On a one-GPU machine both are device 0 and this
// checks only that a fresh thread can use the backend.)
TEST(CudaBackendTest, UsesItsDeviceFromAnyThread) {
  OCTET_REQUIRE_CUDA_DEVICE();
  const int device = CudaDeviceCount() - 1;
  absl::StatusOr<std::unique_ptr<Backend>> gpu = NewCudaBackend(device);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  std::thread([&] {
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    absl::StatusOr<DeviceBuffer> buf = (*gpu)->Allocate(1024);
    ASSERT_TRUE(buf.ok()) << buf.status();
    cudaPointerAttributes attr{};
    ASSERT_EQ(cudaPointerGetAttributes(&attr, buf->data()), cudaSuccess);
    EXPECT_EQ(attr.device, device);
    const std::vector<uint16_t> ones(512, 0x3F80);  // bfloat16 1.0
    OCTET_ASSERT_OK((*gpu)->CopyToDevice(buf->data(), ones.data(), 1024));
    OCTET_ASSERT_OK((*gpu)->Add(buf->data(), buf->data(), 512));
    std::vector<uint16_t> twos(512);
    OCTET_ASSERT_OK((*gpu)->CopyToHost(twos.data(), buf->data(), 1024));
    EXPECT_EQ(twos, std::vector<uint16_t>(512, 0x4000));  // bfloat16 2.0
    int current = -1;
    ASSERT_EQ(cudaGetDevice(&current), cudaSuccess);
    EXPECT_EQ(current, device);
  }).join();
}

TEST(BackendTableCoverageTest, EveryBackendMethodHasACase) {
  const std::set<std::string> declared = DeclaredMethods(kBackendHeaderText);
  ASSERT_GE(declared.size(), 20u) << "backend.h no longer parses as expected";
  std::set<std::string> covered;
  for (const Case& c : Cases()) covered.insert(c.ops.begin(), c.ops.end());
  for (const std::string& m : declared) {
    EXPECT_TRUE(covered.count(m))
        << "Backend::" << m << " is in kernels/backend.h but no case of the "
        << "table runs it: add one to Cases()";
  }
  for (const std::string& m : covered) {
    EXPECT_TRUE(declared.count(m))
        << "the table names Backend::" << m << ", which backend.h lacks";
  }
}

}  // namespace
}  // namespace octet
