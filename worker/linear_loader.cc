#include "worker/linear_loader.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/bf16.h"
#include "base/f16.h"
#include "base/status_macros.h"
#include "kernels/aligned.h"
#include "kernels/cpu/quantize.h"
#include "kernels/fp8.h"

namespace octet {
namespace {

// Host staging of one weight, then one upload.
absl::StatusOr<DeviceBuffer> Upload(Backend& backend, const void* data,
                                    size_t bytes) {
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer buf, backend.Allocate(bytes));
  OCTET_RETURN_IF_ERROR(backend.CopyToDevice(buf.data(), data, bytes));
  return buf;
}

absl::StatusOr<DeviceBuffer> UploadScalar(Backend& backend, float v) {
  return Upload(backend, &v, sizeof(v));
}

// Converts `n` values of a float tensor starting at element `begin` to f32.
void Widen(const TensorView& t, int64_t begin, int64_t n, float* out) {
  const uint8_t* p = t.bytes.data();
  switch (t.dtype) {
    case DType::kF32:
      std::memcpy(out, p + begin * 4, n * 4);
      break;
    case DType::kBf16: {
      const Bf16* b = reinterpret_cast<const Bf16*>(p) + begin;
      for (int64_t i = 0; i < n; ++i) out[i] = Bf16ToFloat(b[i]);
      break;
    }
    case DType::kF16: {
      const F16* h = reinterpret_cast<const F16*>(p) + begin;
      for (int64_t i = 0; i < n; ++i) out[i] = F16ToFloat(h[i]);
      break;
    }
    default:
      std::fill(out, out + n, 0.0f);
  }
}

constexpr int64_t kChunk = int64_t{1} << 20;

// AbsMax of a float tensor (chunked, so F16 needs no full copy).
absl::StatusOr<float> TensorAbsMax(const TensorView& t,
                                   const CpuKernelOptions& o) {
  if (t.dtype == DType::kBf16) {
    return AbsMax(reinterpret_cast<const Bf16*>(t.bytes.data()),
                  t.num_elements(), o);
  }
  if (t.dtype == DType::kF32) {
    return AbsMax(reinterpret_cast<const float*>(t.bytes.data()),
                  t.num_elements(), o);
  }
  std::vector<float> buf(kChunk);
  float m = 0.0f;
  for (int64_t i = 0; i < t.num_elements(); i += kChunk) {
    const int64_t n = std::min(kChunk, t.num_elements() - i);
    Widen(t, i, n, buf.data());
    OCTET_ASSIGN_OR_RETURN(const float c, AbsMax(buf.data(), n, o));
    m = fmaxf(m, c);
  }
  return m;
}

absl::Status QuantizeTensor(const TensorView& t, float inv, uint8_t* q,
                            const CpuKernelOptions& o) {
  if (t.dtype == DType::kBf16) {
    return QuantizeE4m3(reinterpret_cast<const Bf16*>(t.bytes.data()),
                        t.num_elements(), inv, q, o);
  }
  if (t.dtype == DType::kF32) {
    return QuantizeE4m3(reinterpret_cast<const float*>(t.bytes.data()),
                        t.num_elements(), inv, q, o);
  }
  std::vector<float> buf(kChunk);
  for (int64_t i = 0; i < t.num_elements(); i += kChunk) {
    const int64_t n = std::min(kChunk, t.num_elements() - i);
    Widen(t, i, n, buf.data());
    OCTET_RETURN_IF_ERROR(QuantizeE4m3(buf.data(), n, inv, q + i, o));
  }
  return absl::OkStatus();
}

// The dtype unquantized float weights take on this backend.
DType DenseDType(const std::vector<TensorView>& parts, const WeightPolicy& p) {
  if (p.bf16_only) return DType::kBf16;
  for (const TensorView& t : parts) {
    if (t.dtype != DType::kBf16) return DType::kF32;
  }
  return DType::kBf16;
}

// Writes float tensor values as `dtype` (kF32 or kBf16).
void StoreDense(const TensorView& t, DType dtype, uint8_t* out) {
  const int64_t n = t.num_elements();
  if (dtype == t.dtype) {
    std::memcpy(out, t.bytes.data(), t.bytes.size());
    return;
  }
  std::vector<float> buf(kChunk);
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t len = std::min(kChunk, n - i);
    Widen(t, i, len, buf.data());
    if (dtype == DType::kF32) {
      std::memcpy(out + i * 4, buf.data(), len * 4);
    } else {
      Bf16* dst = reinterpret_cast<Bf16*>(out) + i;
      for (int64_t j = 0; j < len; ++j) dst[j] = FloatToBf16(buf[j]);
    }
  }
}

}  // namespace

std::vector<float> ToFloat(const TensorView& t) {
  std::vector<float> out(t.num_elements());
  Widen(t, 0, t.num_elements(), out.data());
  return out;
}

namespace {

// Narrows `t` to `slice`'s rows (of part `i`) and columns; a column slice is
// copied into `staging`, which must outlive `t`.
absl::Status SliceView(const WeightSlice& slice, size_t i, TensorView& t,
                       std::vector<uint8_t>& staging) {
  const size_t elem = DTypeSize(t.dtype);
  if (!slice.rows.empty()) {
    const auto [begin, end] = slice.rows[i];
    if (begin < 0 || begin > end || end > t.shape[0]) {
      return absl::InvalidArgumentError(
          absl::StrCat(t.file, ": tensor '", t.name, "' has ", t.shape[0],
                       " rows, no slice [", begin, ", ", end, ")"));
    }
    const size_t row_bytes = t.shape[1] * elem;
    t.bytes = t.bytes.subspan(begin * row_bytes, (end - begin) * row_bytes);
    t.shape[0] = end - begin;
  }
  if (slice.col_end >= 0) {
    const int64_t begin = slice.col_begin, end = slice.col_end;
    if (begin < 0 || begin > end || end > t.shape[1]) {
      return absl::InvalidArgumentError(
          absl::StrCat(t.file, ": tensor '", t.name, "' has ", t.shape[1],
                       " columns, no slice [", begin, ", ", end, ")"));
    }
    const size_t width = (end - begin) * elem, row_bytes = t.shape[1] * elem;
    staging.resize(t.shape[0] * width);
    for (int64_t r = 0; r < t.shape[0]; ++r) {
      std::memcpy(staging.data() + r * width,
                  t.bytes.data() + r * row_bytes + begin * elem, width);
    }
    t.bytes = absl::MakeConstSpan(staging);
    t.shape[1] = end - begin;
  }
  return absl::OkStatus();
}

// The tensors of `parts`: matrices with the same number of columns.
absl::StatusOr<std::vector<TensorView>> GetParts(
    const Checkpoint& ckpt, const std::vector<std::string>& parts) {
  std::vector<TensorView> views;
  for (const std::string& name : parts) {
    OCTET_ASSIGN_OR_RETURN(TensorView t, ckpt.Get(name));
    if (t.shape.size() != 2 ||
        (!views.empty() && t.shape[1] != views[0].shape[1])) {
      return absl::InvalidArgumentError(
          absl::StrCat(t.file, ": tensor '", name,
                       "' is not a matrix matching its fused parts"));
    }
    views.push_back(std::move(t));
  }
  return views;
}

// Stacks the float parts, unquantized, into w's device data.
absl::Status LoadDense(const Checkpoint& ckpt,
                       const std::vector<std::string>& parts,
                       const std::vector<TensorView>& views,
                       const WeightPolicy& policy, Backend& backend,
                       LinearWeight& w) {
  w.dtype = DenseDType(views, policy);
  AlignedVector<uint8_t> host(w.out * w.in * DTypeSize(w.dtype));
  int64_t row = 0;
  for (const TensorView& t : views) {
    StoreDense(t, w.dtype, host.data() + row * w.in * DTypeSize(w.dtype));
    row += t.shape[0];
  }
  OCTET_ASSIGN_OR_RETURN(w.data, Upload(backend, host.data(), host.size()));
  for (const std::string& name : parts) ckpt.ReleasePages(name);
  return absl::OkStatus();
}

// The fused FP8 scale: the absmax of all float parts, or the largest
// checkpoint scale of the e4m3 parts (float parts are then measured on the
// same footing: their absmax / 448). Sets part_scales[i] to e4m3 part i's
// checkpoint scale (0 for float parts).
// An FP8 checkpoint's scales are global already: every rank uses them as
// they are. Float parts' absmax is this slice's, or all ranks' when the
// policy reduces it (global weight scales).
absl::StatusOr<float> FusedScale(const Checkpoint& ckpt,
                                 const std::vector<std::string>& parts,
                                 const std::vector<TensorView>& views,
                                 const WeightPolicy& policy,
                                 std::vector<float>& part_scales) {
  part_scales.assign(views.size(), 0.0f);
  float scale = 0.0f, float_absmax = 0.0f;
  bool any_float = false;
  for (size_t i = 0; i < views.size(); ++i) {
    if (views[i].dtype == DType::kE4m3) {
      OCTET_ASSIGN_OR_RETURN(part_scales[i],
                             ckpt.GetScalar(WeightScaleName(parts[i])));
      scale = std::max(scale, part_scales[i]);
    } else {
      OCTET_ASSIGN_OR_RETURN(const float m, TensorAbsMax(views[i], policy.cpu));
      float_absmax = std::fmax(float_absmax, m);
      any_float = true;
    }
  }
  if (any_float) {
    if (policy.reduce_absmax) {
      OCTET_RETURN_IF_ERROR(policy.reduce_absmax(&float_absmax));
    }
    scale = std::max(scale, E4m3ScaleFromAbsmax(float_absmax).scale);
  }
  return scale;
}

// Requantizes e4m3 codes of scale `from` to the fused scale (`inv`, its
// inverse): encode((decode(c) * from) * inv), i.e. the contract's
// dequantize, then its quantize, in chunks.
absl::Status Requantize(const TensorView& t, float from, float inv,
                        uint8_t* dst, const CpuKernelOptions& o) {
  std::vector<float> chunk(kChunk);
  for (int64_t j = 0; j < t.num_elements(); j += kChunk) {
    const int64_t n = std::min(kChunk, t.num_elements() - j);
    OCTET_RETURN_IF_ERROR(
        DequantizeE4m3(t.bytes.data() + j, n, from, chunk.data(), o));
    OCTET_RETURN_IF_ERROR(QuantizeE4m3(chunk.data(), n, inv, dst + j, o));
  }
  return absl::OkStatus();
}

// Stacks the parts' codes at the fused `scale` into `codes` ([rows][in]):
// float parts quantized, e4m3 parts copied when already at it, requantized
// otherwise.
absl::Status FuseCodes(const std::vector<TensorView>& views,
                       const std::vector<float>& part_scales, float scale,
                       int64_t in, const CpuKernelOptions& o, uint8_t* codes) {
  const float inv = 1.0f / scale;
  int64_t row = 0;
  for (size_t i = 0; i < views.size(); ++i) {
    const TensorView& t = views[i];
    uint8_t* dst = codes + row * in;
    if (t.dtype != DType::kE4m3) {
      OCTET_RETURN_IF_ERROR(QuantizeTensor(t, inv, dst, o));
    } else if (part_scales[i] == scale) {
      std::memcpy(dst, t.bytes.data(), t.bytes.size());
    } else {
      OCTET_RETURN_IF_ERROR(Requantize(t, part_scales[i], inv, dst, o));
    }
    row += t.shape[0];
  }
  return absl::OkStatus();
}

// The fused parts' static input scale: the largest of the e4m3 parts'.
// The fused parts share one input; parts stored as floats carry no
// input_scale (Checkpoint::Validate requires it of e4m3 parts only).
absl::StatusOr<float> FusedInputScale(const Checkpoint& ckpt,
                                      const std::vector<std::string>& parts,
                                      const std::vector<TensorView>& views) {
  float input_scale = 0.0f;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (views[i].dtype != DType::kE4m3) continue;
    OCTET_ASSIGN_OR_RETURN(const float v,
                           ckpt.GetScalar(InputScaleName(parts[i])));
    input_scale = std::max(input_scale, v);
  }
  return input_scale;
}

// For a checkpoint with per-channel weight scales: the parts' codes stacked
// as they are, with their scales for the rows `slice` keeps (no common scale,
// so never requantized); parts stored as floats get a scale per row of their
// own. Static input scales as LoadFp8.
absl::Status LoadFp8PerChannel(const Checkpoint& ckpt,
                               const std::vector<std::string>& parts,
                               const std::vector<TensorView>& views,
                               const WeightSlice& slice,
                               const WeightPolicy& policy, Backend& backend,
                               LinearWeight& w) {
  w.dtype = DType::kE4m3;
  w.scale_per_row = true;
  AlignedVector<uint8_t> codes(w.out * w.in);
  std::vector<float> scales(w.out);
  int64_t row = 0;
  for (size_t i = 0; i < views.size(); ++i) {
    const TensorView& t = views[i];
    if (t.dtype == DType::kE4m3) {
      OCTET_ASSIGN_OR_RETURN(const TensorView whole, ckpt.Get(parts[i]));
      OCTET_ASSIGN_OR_RETURN(
          const std::vector<float> part,
          ckpt.GetRowScales(WeightScaleName(parts[i]), whole.shape[0]));
      const int64_t first = slice.rows.empty() ? 0 : slice.rows[i].first;
      std::copy_n(part.begin() + first, t.shape[0], scales.begin() + row);
      std::memcpy(codes.data() + row * w.in, t.bytes.data(), t.bytes.size());
    } else {
      OCTET_RETURN_IF_ERROR(QuantizeEachRow(
          t, policy.cpu, codes.data() + row * w.in, scales.data() + row));
    }
    row += t.shape[0];
  }
  OCTET_ASSIGN_OR_RETURN(w.data, Upload(backend, codes.data(), codes.size()));
  for (const std::string& name : parts) ckpt.ReleasePages(name);
  OCTET_ASSIGN_OR_RETURN(
      w.scale, Upload(backend, scales.data(), scales.size() * sizeof(float)));
  if (ckpt.config().fp8->static_activations) {
    OCTET_ASSIGN_OR_RETURN(const float input_scale,
                           FusedInputScale(ckpt, parts, views));
    OCTET_ASSIGN_OR_RETURN(w.input_scale, UploadScalar(backend, input_scale));
  }
  return absl::OkStatus();
}

// Fuses the parts into one e4m3 weight with its scale and, for a checkpoint
// with static activation scales and e4m3 parts, its input scale.
absl::Status LoadFp8(const Checkpoint& ckpt,
                     const std::vector<std::string>& parts,
                     const std::vector<TensorView>& views, bool any_fp8,
                     const WeightPolicy& policy, Backend& backend,
                     LinearWeight& w) {
  std::vector<float> part_scales;
  OCTET_ASSIGN_OR_RETURN(const float scale,
                         FusedScale(ckpt, parts, views, policy, part_scales));
  w.dtype = DType::kE4m3;
  AlignedVector<uint8_t> codes(w.out * w.in);
  OCTET_RETURN_IF_ERROR(
      FuseCodes(views, part_scales, scale, w.in, policy.cpu, codes.data()));
  OCTET_ASSIGN_OR_RETURN(w.data, Upload(backend, codes.data(), codes.size()));
  for (const std::string& name : parts) ckpt.ReleasePages(name);
  OCTET_ASSIGN_OR_RETURN(w.scale, UploadScalar(backend, scale));

  const ModelConfig& config = ckpt.config();
  if (config.fp8 && config.fp8->static_activations && any_fp8) {
    OCTET_ASSIGN_OR_RETURN(const float input_scale,
                           FusedInputScale(ckpt, parts, views));
    OCTET_ASSIGN_OR_RETURN(w.input_scale, UploadScalar(backend, input_scale));
  }
  return absl::OkStatus();
}

// LoadLinear's work; it may throw std::bad_alloc.
absl::StatusOr<LinearWeight> LoadLinearStaged(
    const Checkpoint& ckpt, const std::vector<std::string>& parts,
    const WeightPolicy& policy, Backend& backend, const WeightSlice& slice) {
  if (!slice.rows.empty() && slice.rows.size() != parts.size()) {
    return absl::InvalidArgumentError("LoadLinear: one row slice per part");
  }
  // Column slices are copied into `staging`, which `views` point into.
  std::vector<std::vector<uint8_t>> staging(parts.size());
  OCTET_ASSIGN_OR_RETURN(std::vector<TensorView> views, GetParts(ckpt, parts));
  LinearWeight w;
  for (size_t i = 0; i < views.size(); ++i) {
    w.full_out += views[i].shape[0];  // before slicing: TP = 1's shape
    w.full_in = views[i].shape[1];
    OCTET_RETURN_IF_ERROR(SliceView(slice, i, views[i], staging[i]));
    w.out += views[i].shape[0];
    w.in = views[i].shape[1];
  }
  const bool any_fp8 =
      std::any_of(views.begin(), views.end(),
                  [](const TensorView& t) { return t.dtype == DType::kE4m3; });
  if (any_fp8 && policy.method != LinearMethod::kFp8) {
    return absl::FailedPreconditionError(absl::StrCat(
        ckpt.dir(), ": tensor '", parts[0],
        "' is FP8; load this checkpoint with the fp8 quantization method"));
  }
  if (policy.method == LinearMethod::kNone) {
    OCTET_RETURN_IF_ERROR(LoadDense(ckpt, parts, views, policy, backend, w));
  } else if (any_fp8 && ckpt.config().fp8->weight_per_channel) {
    OCTET_RETURN_IF_ERROR(
        LoadFp8PerChannel(ckpt, parts, views, slice, policy, backend, w));
  } else {
    OCTET_RETURN_IF_ERROR(
        LoadFp8(ckpt, parts, views, any_fp8, policy, backend, w));
  }
  return w;
}

}  // namespace

absl::StatusOr<LinearWeight> LoadLinear(const Checkpoint& ckpt,
                                        const std::vector<std::string>& parts,
                                        const WeightPolicy& policy,
                                        Backend& backend,
                                        const WeightSlice& slice) {
  // The host staging buffers are as large as the weight; a checkpoint whose
  // (validated) shapes exceed this machine's memory fails here, not abort.
  try {
    return LoadLinearStaged(ckpt, parts, policy, backend, slice);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        absl::StrCat("out of host memory staging '", parts.front(), "'"));
  }
}

absl::StatusOr<LinearWeight> LoadTable(const Checkpoint& ckpt,
                                       const std::string& name,
                                       const WeightPolicy& policy,
                                       Backend& backend,
                                       const WeightSlice& slice) {
  WeightPolicy dense = policy;
  dense.method = LinearMethod::kNone;
  OCTET_ASSIGN_OR_RETURN(const TensorView t, ckpt.Get(name));
  if (!IsFloat(t.dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat(t.file, ": tensor '", name, "' must be a float tensor"));
  }
  return LoadLinear(ckpt, {name}, dense, backend, slice);
}

// Each row of the float matrix `t` as e4m3 with its own scale (the FP8
// contract on that row's absmax): codes [rows][in], scales [rows].
absl::Status QuantizeEachRow(const TensorView& t, const CpuKernelOptions& o,
                             uint8_t* codes, float* scales) {
  const int64_t rows = t.shape[0], in = t.shape[1];
  std::vector<float> row(in);
  for (int64_t r = 0; r < rows; ++r) {
    Widen(t, r * in, in, row.data());
    OCTET_ASSIGN_OR_RETURN(
        const E4m3Scale s,
        QuantizeE4m3Dynamic(row.data(), in, codes + r * in, o));
    scales[r] = s.scale;
  }
  return absl::OkStatus();
}

absl::StatusOr<LinearWeight> LoadTableE4m3PerRow(const Checkpoint& ckpt,
                                                 const std::string& name,
                                                 const WeightPolicy& policy,
                                                 Backend& backend,
                                                 const WeightSlice& slice) {
  OCTET_ASSIGN_OR_RETURN(std::vector<TensorView> views, GetParts(ckpt, {name}));
  TensorView& t = views[0];
  if (!IsFloat(t.dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat(t.file, ": tensor '", name, "' must be a float tensor"));
  }
  LinearWeight w;
  w.full_out = t.shape[0];  // before slicing: TP = 1's shape
  w.full_in = t.shape[1];
  std::vector<uint8_t> staging;
  OCTET_RETURN_IF_ERROR(SliceView(slice, 0, t, staging));
  w.out = t.shape[0];
  w.in = t.shape[1];
  w.dtype = DType::kE4m3;
  w.scale_per_row = true;
  try {
    AlignedVector<uint8_t> codes(w.out * w.in);
    std::vector<float> scales(w.out);
    OCTET_RETURN_IF_ERROR(
        QuantizeEachRow(t, policy.cpu, codes.data(), scales.data()));
    ckpt.ReleasePages(name);
    OCTET_ASSIGN_OR_RETURN(w.data, Upload(backend, codes.data(), codes.size()));
    OCTET_ASSIGN_OR_RETURN(
        w.scale, Upload(backend, scales.data(), scales.size() * sizeof(float)));
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        absl::StrCat("out of host memory staging '", name, "'"));
  }
  return w;
}

absl::StatusOr<DeviceBuffer> LoadVectorF32(const Checkpoint& ckpt,
                                           const std::string& name,
                                           Backend& backend) {
  return LoadVectorF32(ckpt, std::vector<std::string>{name}, backend);
}

absl::StatusOr<DeviceBuffer> LoadVectorF32(
    const Checkpoint& ckpt, const std::vector<std::string>& parts,
    Backend& backend, const WeightSlice& slice) {
  std::vector<float> v;
  for (size_t i = 0; i < parts.size(); ++i) {
    OCTET_ASSIGN_OR_RETURN(const TensorView t, ckpt.Get(parts[i]));
    if (!IsFloat(t.dtype) || t.shape.size() != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          t.file, ": tensor '", parts[i], "' must be a float vector"));
    }
    const std::vector<float> all = ToFloat(t);
    ckpt.ReleasePages(parts[i]);
    int64_t first = 0, last = t.shape[0];
    if (!slice.rows.empty()) std::tie(first, last) = slice.rows.at(i);
    if (first < 0 || first > last || last > t.shape[0]) {
      return absl::InvalidArgumentError(
          absl::StrCat(t.file, ": tensor '", parts[i], "' has ", t.shape[0],
                       " values; this rank's slice [", first, ", ", last,
                       ") is outside them"));
    }
    v.insert(v.end(), all.begin() + first, all.begin() + last);
  }
  return Upload(backend, v.data(), v.size() * sizeof(float));
}

}  // namespace octet
