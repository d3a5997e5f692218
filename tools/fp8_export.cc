#include "tools/fp8_export.h"

#include <filesystem>
#include <new>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/aligned.h"
#include "kernels/cpu/quantize.h"
#include "kernels/fp8.h"
#include "kernels/status_macros.h"
#include "model/checkpoint.h"
#include "model/checkpoint_writer.h"
#include "worker/linear_loader.h"

namespace octet {
namespace {

namespace fs = std::filesystem;

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

// ExportFp8Checkpoint's work; it may throw std::bad_alloc.
absl::Status Export(const std::string& in_dir, const std::string& out_dir,
                    const Fp8ExportOptions& options) {
  OCTET_ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> ckpt,
                         Checkpoint::Open(in_dir));
  const ModelConfig& in_config = ckpt->config();
  if (in_config.fp8) {
    return absl::FailedPreconditionError(
        absl::StrCat(in_dir, ": already an FP8 checkpoint"));
  }
  if (fs::exists(out_dir) && fs::equivalent(in_dir, out_dir)) {
    return absl::InvalidArgumentError("--out must differ from --in");
  }
  const std::vector<ExpectedTensor> expected = ExpectedTensors(in_config);
  // Scales are known only after each weight is quantized; the writer takes
  // a projection's codes, then its scale right after.
  std::vector<float> scales(expected.size(), 0.0f);
  std::vector<TensorSource> sources;
  for (size_t i = 0; i < expected.size(); ++i) {
    const ExpectedTensor& e = expected[i];
    OCTET_ASSIGN_OR_RETURN(const TensorView view, ckpt->Get(e.name));
    if (!e.linear) {
      sources.push_back({{e.name, view.dtype, view.shape},
                         [view, &ckpt](SafetensorsWriter& w) {
                           absl::Status s = w.Write(view.bytes);
                           ckpt->ReleasePages(view.name);
                           return s;
                         }});
      continue;
    }
    float* scale = &scales[i];
    sources.push_back({{e.name, DType::kE4m3, view.shape},
                       [view, scale, &options, &ckpt](SafetensorsWriter& w) {
                         absl::Status s =
                             QuantizeInto(view, options.cpu, w, scale);
                         ckpt->ReleasePages(view.name);
                         return s;
                       }});
    sources.push_back(
        {{e.name + "_scale", DType::kF32, {}}, [scale](SafetensorsWriter& w) {
           return w.Write(
               {reinterpret_cast<const uint8_t*>(scale), sizeof(float)});
         }});
  }
  OCTET_RETURN_IF_ERROR(
      WriteCheckpointTensors(out_dir, sources, options.shard_bytes));

  ModelConfig config = in_config;
  config.fp8 = Fp8CheckpointConfig{.ignored_layers = {"lm_head"}};
  OCTET_RETURN_IF_ERROR(WriteTextFile(
      (fs::path(out_dir) / "config.json").string(), ModelConfigToJson(config)));
  const fs::path tokenizer = fs::path(in_dir) / "tokenizer.model";
  if (fs::exists(tokenizer)) {
    std::error_code ec;
    fs::copy_file(tokenizer, fs::path(out_dir) / "tokenizer.model",
                  fs::copy_options::overwrite_existing, ec);
    if (ec) {
      return absl::InternalError(
          absl::StrCat("copying the tokenizer: ", ec.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ExportFp8Checkpoint(const std::string& in_dir,
                                 const std::string& out_dir,
                                 const Fp8ExportOptions& options) {
  try {
    return Export(in_dir, out_dir, options);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        absl::StrCat("out of host memory exporting ", in_dir));
  }
}

}  // namespace octet
