// `octet quantize` (fp8_export.h says what it writes): each projection
// weight quantized as it streams into the checkpoint writer, the rest
// copied; then the tokenizer files and config.json.
#include "tools/fp8_export.h"

#include <filesystem>
#include <functional>
#include <iterator>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/file_util.h"
#include "base/status_macros.h"
#include "kernels/aligned.h"
#include "kernels/cpu/quantize.h"
#include "kernels/fp8.h"
#include "model/checkpoint.h"
#include "model/checkpoint_writer.h"
#include "model/gguf.h"
#include "model/gguf_tokenizer.h"
#include "worker/linear_loader.h"

namespace octet {
namespace {

namespace fs = std::filesystem;

constexpr size_t kMaxTokenizerFileBytes = size_t{64} << 20;  // real: < 20 MB
// The files of a directory's tokenizer and chat template that an export
// carries over (and clears from --out before it writes).
constexpr const char* kTokenizerFiles[] = {"tokenizer.model", "tokenizer.json",
                                           "tokenizer_config.json",
                                           "chat_template.jinja"};

absl::Status QuantizeInto(const TensorView& t, const CpuKernelOptions& o,
                          SafetensorsWriter& w, float* scale_out) {
  std::vector<float> values;  // binary32 copy only for F16 tensors
  absl::StatusOr<float> absmax;
  if (t.dtype == DType::kBf16) {
    absmax = AbsMax(reinterpret_cast<const Bf16*>(t.bytes.data()),
                    t.num_elements(), o);
  } else if (t.dtype == DType::kF32) {
    absmax = AbsMax(reinterpret_cast<const float*>(t.bytes.data()),
                    t.num_elements(), o);
  } else {
    values = ToFloat(t);
    absmax = AbsMax(values.data(), t.num_elements(), o);
  }
  if (!absmax.ok()) return absmax.status();
  const E4m3Scale s = E4m3ScaleFromAbsmax(*absmax);
  *scale_out = s.scale;
  AlignedVector<uint8_t> codes(t.num_elements());
  absl::Status st;
  if (t.dtype == DType::kBf16) {
    st = QuantizeE4m3(reinterpret_cast<const Bf16*>(t.bytes.data()),
                      t.num_elements(), s.inv, codes.data(), o);
  } else if (t.dtype == DType::kF32) {
    st = QuantizeE4m3(reinterpret_cast<const float*>(t.bytes.data()),
                      t.num_elements(), s.inv, codes.data(), o);
  } else {
    st = QuantizeE4m3(values.data(), t.num_elements(), s.inv, codes.data(), o);
  }
  if (!st.ok()) return st;
  return w.Write({codes.data(), codes.size()});
}

// Per-channel: each row with its own scale, written into `scales` [rows].
absl::Status QuantizeRowsInto(const TensorView& t, const CpuKernelOptions& o,
                              SafetensorsWriter& w,
                              std::vector<float>& scales) {
  AlignedVector<uint8_t> codes(t.num_elements());
  scales.resize(t.shape[0]);
  OCTET_RETURN_IF_ERROR(QuantizeEachRow(t, o, codes.data(), scales.data()));
  return w.Write({codes.data(), codes.size()});
}

// The quantization_config for `scheme` (Fp8ExportOptions::scheme).
absl::StatusOr<Fp8CheckpointConfig> ConfigFor(const std::string& scheme) {
  // The lm_head is written as it was, and the config says so.
  Fp8CheckpointConfig c{
      .ignored_layers = {ModuleName(TensorName(ModelTensor::kLmHead))}};
  if (scheme.empty()) return c;
  c.layout = Fp8CheckpointConfig::Layout::kCompressedTensors;
  if (scheme == "fp8-tensor") return c;
  if (scheme == "fp8-channel-token") {
    c.weight_per_channel = c.activation_per_token = true;
    return c;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--scheme: '", scheme, "' is not fp8-tensor or fp8-channel-token"));
}

// A tensor for the checkpoint writer: its spec and what writes its bytes.
// (Built field by field: GCC 12 at -O3 takes the braced form's shape for
// uninitialized.)
TensorSource Source(std::string name, DType dtype, std::vector<int64_t> shape,
                    std::function<absl::Status(SafetensorsWriter&)> write) {
  TensorSource t;
  t.spec.name = std::move(name);
  t.spec.dtype = dtype;
  t.spec.shape = std::move(shape);
  t.write = std::move(write);
  return t;
}

// ExportFp8Checkpoint's tensors, into a folder cleared of an earlier
// export's config and tokenizer files; returns the config.json to write.
// It may throw std::bad_alloc.
absl::StatusOr<ModelConfig> Export(const std::string& in_dir,
                                   const std::string& out_dir,
                                   const Fp8ExportOptions& options) {
  OCTET_ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> ckpt,
                         Checkpoint::Open(in_dir));
  const ModelConfig& in_config = ckpt->config();
  if (in_config.fp8) {
    return absl::FailedPreconditionError(
        absl::StrCat(in_dir, ": already an FP8 checkpoint"));
  }
  if (!in_config.rope_freq_factors.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        in_dir,
        ": RoPE is scaled by tensor 'rope_freqs.weight', which "
        "config.json cannot say; serve the GGUF file with --quantization "
        "fp8 instead"));
  }
  if (fs::exists(out_dir) && fs::equivalent(in_dir, out_dir)) {
    return absl::InvalidArgumentError("--out must differ from --in");
  }
  OCTET_ASSIGN_OR_RETURN(const Fp8CheckpointConfig fp8,
                         ConfigFor(options.scheme));
  std::vector<std::string> stale = {"config.json"};
  stale.insert(stale.end(), std::begin(kTokenizerFiles),
               std::end(kTokenizerFiles));
  for (const std::string& name : stale) {
    std::error_code ec;
    fs::remove(fs::path(out_dir) / name, ec);
    if (ec) {
      return absl::InternalError(absl::StrCat(
          out_dir, ": cannot remove an earlier ", name, ": ", ec.message()));
    }
  }
  const std::vector<ExpectedTensor> expected = ExpectedTensors(in_config);
  // Scales are known only after each weight is quantized; the writer takes
  // a projection's codes, then its scales right after.
  std::vector<std::vector<float>> scales(expected.size());
  std::vector<TensorSource> sources;
  for (size_t i = 0; i < expected.size(); ++i) {
    const ExpectedTensor& e = expected[i];
    OCTET_ASSIGN_OR_RETURN(const TensorView view, ckpt->Get(e.name));
    if (!e.linear) {
      sources.push_back(Source(e.name, view.dtype, view.shape,
                               [view, &ckpt](SafetensorsWriter& w) {
                                 absl::Status s = w.Write(view.bytes);
                                 ckpt->ReleasePages(view.name);
                                 return s;
                               }));
      continue;
    }
    std::vector<float>* scale = &scales[i];
    const bool per_row = fp8.weight_per_channel;
    sources.push_back(Source(
        e.name, DType::kE4m3, view.shape,
        [view, scale, per_row, &options, &ckpt](SafetensorsWriter& w) {
          scale->resize(1);
          absl::Status s =
              per_row ? QuantizeRowsInto(view, options.cpu, w, *scale)
                      : QuantizeInto(view, options.cpu, w, scale->data());
          ckpt->ReleasePages(view.name);
          return s;
        }));
    // vLLM's layout: a scalar; compressed-tensors': [1] or [rows, 1].
    const std::vector<int64_t> shape =
        fp8.layout == Fp8CheckpointConfig::Layout::kVllmFp8
            ? std::vector<int64_t>{}
        : per_row ? std::vector<int64_t>{view.shape[0], 1}
                  : std::vector<int64_t>{1};
    sources.push_back(Source(
        WeightScaleName(e.name), DType::kF32, shape,
        [scale](SafetensorsWriter& w) {
          return w.Write({reinterpret_cast<const uint8_t*>(scale->data()),
                          scale->size() * sizeof(float)});
        }));
  }
  OCTET_RETURN_IF_ERROR(
      WriteCheckpointTensors(out_dir, sources, options.shard_bytes));

  ModelConfig config = in_config;
  config.fp8 = fp8;
  return config;
}

// The tokenizer files and chat template the output takes, read before
// any tensor is written: a directory's own, a GGUF file's written as a
// directory holds them (GgufTokenizerFiles).
absl::StatusOr<std::vector<GgufTokenizerFile>> TokenizerFilesOf(
    const std::string& in_dir) {
  if (fs::is_regular_file(in_dir)) {
    OCTET_ASSIGN_OR_RETURN(const std::unique_ptr<GgufFile> gguf,
                           GgufFile::Open(in_dir));
    return GgufTokenizerFiles(*gguf);
  }
  std::vector<GgufTokenizerFile> files;
  for (const char* name : kTokenizerFiles) {
    const std::string path = (fs::path(in_dir) / name).string();
    OCTET_ASSIGN_OR_RETURN(const bool exists, PathExists(path));
    if (!exists) continue;
    OCTET_ASSIGN_OR_RETURN(std::string bytes,
                           ReadSmallFile(path, kMaxTokenizerFileBytes));
    files.push_back({name, std::move(bytes)});
  }
  return files;
}

}  // namespace

absl::Status ExportFp8Checkpoint(const std::string& in_dir,
                                 const std::string& out_dir,
                                 const Fp8ExportOptions& options) {
  try {
    // The tokenizer is read before the tensors are written, and config.json
    // written last: a failed export is never a checkpoint.
    OCTET_ASSIGN_OR_RETURN(const std::vector<GgufTokenizerFile> tokenizer,
                           TokenizerFilesOf(in_dir));
    OCTET_ASSIGN_OR_RETURN(const ModelConfig config,
                           Export(in_dir, out_dir, options));
    for (const GgufTokenizerFile& file : tokenizer) {
      OCTET_RETURN_IF_ERROR(
          WriteTextFile((fs::path(out_dir) / file.name).string(), file.bytes));
    }
    return WriteTextFile((fs::path(out_dir) / "config.json").string(),
                         ModelConfigToJson(config));
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        absl::StrCat("out of host memory exporting ", in_dir));
  }
}

}  // namespace octet
