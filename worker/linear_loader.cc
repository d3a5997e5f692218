#include "worker/linear_loader.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/aligned.h"
#include "kernels/bf16.h"
#include "kernels/cpu/quantize.h"
#include "kernels/f16.h"
#include "kernels/fp8.h"

namespace octet {
namespace {

bool IsFloat(DType d) {
  return d == DType::kF32 || d == DType::kBf16 || d == DType::kF16;
}

// Host staging of one weight, then one upload.
absl::StatusOr<DeviceBuffer> Upload(Backend& backend, const void* data,
                                    size_t bytes) {
  absl::StatusOr<DeviceBuffer> buf = backend.Allocate(bytes);
  if (!buf.ok()) return buf.status();
  absl::Status s = backend.CopyToDevice(buf->data(), data, bytes);
  if (!s.ok()) return s;
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
    absl::StatusOr<float> c = AbsMax(buf.data(), n, o);
    if (!c.ok()) return c.status();
    m = fmaxf(m, *c);
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
    absl::Status s = QuantizeE4m3(buf.data(), n, inv, q + i, o);
    if (!s.ok()) return s;
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

// LoadLinear's work; it may throw std::bad_alloc.
absl::StatusOr<LinearWeight> LoadLinearStaged(
    const Checkpoint& ckpt, const std::vector<std::string>& parts,
    const WeightPolicy& policy, Backend& backend, const WeightSlice& slice) {
  if (!slice.rows.empty() && slice.rows.size() != parts.size()) {
    return absl::InvalidArgumentError("LoadLinear: one row slice per part");
  }
  std::vector<std::vector<uint8_t>> staging(parts.size());
  std::vector<TensorView> views;
  LinearWeight w;
  for (const std::string& name : parts) {
    absl::StatusOr<TensorView> t = ckpt.Get(name);
    if (!t.ok()) return t.status();
    if (t->shape.size() != 2 ||
        (!views.empty() && t->shape[1] != views[0].shape[1])) {
      return absl::InvalidArgumentError(
          absl::StrCat(t->file, ": tensor '", name,
                       "' is not a matrix matching its fused parts"));
    }
    views.push_back(*std::move(t));
  }
  for (size_t i = 0; i < views.size(); ++i) {
    absl::Status s = SliceView(slice, i, views[i], staging[i]);
    if (!s.ok()) return s;
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
    w.dtype = DenseDType(views, policy);
    AlignedVector<uint8_t> host(w.out * w.in * DTypeSize(w.dtype));
    int64_t row = 0;
    for (const TensorView& t : views) {
      StoreDense(t, w.dtype, host.data() + row * w.in * DTypeSize(w.dtype));
      row += t.shape[0];
    }
    absl::StatusOr<DeviceBuffer> data =
        Upload(backend, host.data(), host.size());
    if (!data.ok()) return data.status();
    w.data = *std::move(data);
    for (const std::string& name : parts) ckpt.ReleasePages(name);
    return w;
  }

  // FP8. The fused scale: the absmax of all float parts, or the largest
  // checkpoint scale of the e4m3 parts (float parts are then measured on the
  // same footing: their absmax / 448).
  // An FP8 checkpoint's scales are global already: every rank uses them as
  // they are. Float parts' absmax is this slice's, or all ranks' when the
  // policy reduces it (global weight scales).
  std::vector<float> part_scales(views.size(), 0.0f);
  float scale = 0.0f, float_absmax = 0.0f;
  bool any_float = false;
  for (size_t i = 0; i < views.size(); ++i) {
    if (views[i].dtype == DType::kE4m3) {
      absl::StatusOr<float> s = ckpt.GetScalar(parts[i] + "_scale");
      if (!s.ok()) return s.status();
      part_scales[i] = *s;
      scale = std::max(scale, *s);
    } else {
      absl::StatusOr<float> m = TensorAbsMax(views[i], policy.cpu);
      if (!m.ok()) return m.status();
      float_absmax = std::fmax(float_absmax, *m);
      any_float = true;
    }
  }
  if (any_float) {
    if (policy.reduce_absmax) {
      absl::Status s = policy.reduce_absmax(&float_absmax);
      if (!s.ok()) return s;
    }
    scale = std::max(scale, E4m3ScaleFromAbsmax(float_absmax).scale);
  }
  const float inv = 1.0f / scale;
  w.dtype = DType::kE4m3;
  AlignedVector<uint8_t> codes(w.out * w.in);
  int64_t row = 0;
  for (size_t i = 0; i < views.size(); ++i) {
    const TensorView& t = views[i];
    uint8_t* dst = codes.data() + row * w.in;
    if (t.dtype != DType::kE4m3) {
      absl::Status s = QuantizeTensor(t, inv, dst, policy.cpu);
      if (!s.ok()) return s;
    } else if (part_scales[i] == scale) {
      std::memcpy(dst, t.bytes.data(), t.bytes.size());
    } else {
      // Requantize to the fused scale: encode((decode(c) * s_i) * inv),
      // i.e. the contract's dequantize, then its quantize, in chunks.
      std::vector<float> chunk(kChunk);
      for (int64_t j = 0; j < t.num_elements(); j += kChunk) {
        const int64_t n = std::min(kChunk, t.num_elements() - j);
        absl::Status st = DequantizeE4m3(t.bytes.data() + j, n, part_scales[i],
                                         chunk.data(), policy.cpu);
        if (st.ok())
          st = QuantizeE4m3(chunk.data(), n, inv, dst + j, policy.cpu);
        if (!st.ok()) return st;
      }
    }
    row += t.shape[0];
  }
  absl::StatusOr<DeviceBuffer> data =
      Upload(backend, codes.data(), codes.size());
  if (!data.ok()) return data.status();
  w.data = *std::move(data);
  for (const std::string& name : parts) ckpt.ReleasePages(name);
  absl::StatusOr<DeviceBuffer> s = UploadScalar(backend, scale);
  if (!s.ok()) return s.status();
  w.scale = *std::move(s);

  const ModelConfig& config = ckpt.config();
  if (config.fp8 && config.fp8->static_activations && any_fp8) {
    // The fused parts share one input; parts stored as floats carry no
    // input_scale (Checkpoint::Validate requires it of e4m3 parts only).
    float input_scale = 0.0f;
    for (size_t i = 0; i < parts.size(); ++i) {
      if (views[i].dtype != DType::kE4m3) continue;
      const std::string& name = parts[i];
      const std::string stem = name.substr(0, name.size() - 7);  // ".weight"
      absl::StatusOr<float> v = ckpt.GetScalar(stem + ".input_scale");
      if (!v.ok()) return v.status();
      input_scale = std::max(input_scale, *v);
    }
    absl::StatusOr<DeviceBuffer> is = UploadScalar(backend, input_scale);
    if (!is.ok()) return is.status();
    w.input_scale = *std::move(is);
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
  absl::StatusOr<TensorView> t = ckpt.Get(name);
  if (!t.ok()) return t.status();
  if (!IsFloat(t->dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat(t->file, ": tensor '", name, "' must be a float tensor"));
  }
  return LoadLinear(ckpt, {name}, dense, backend, slice);
}

absl::StatusOr<DeviceBuffer> LoadVectorF32(const Checkpoint& ckpt,
                                           const std::string& name,
                                           Backend& backend) {
  absl::StatusOr<TensorView> t = ckpt.Get(name);
  if (!t.ok()) return t.status();
  if (!IsFloat(t->dtype) || t->shape.size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(t->file, ": tensor '", name, "' must be a float vector"));
  }
  const std::vector<float> v = ToFloat(*t);
  ckpt.ReleasePages(name);
  return Upload(backend, v.data(), v.size() * sizeof(float));
}

}  // namespace octet
