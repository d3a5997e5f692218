// The element types tensors are stored in and cross every API with: in
// checkpoints (model/), on the wire to collectives (parallel/) and in the
// kernels.
//
// Kernels take raw pointers plus a DType where one entry point serves several
// element types (GEMM outputs, quantizer inputs). Storage types are plain
// bit containers: `Bf16` below, and `uint8_t` for float8 e4m3 codes.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"

namespace octet {

enum class DType : uint8_t {
  kF32,   // IEEE binary32
  kBf16,  // bfloat16: the upper half of a binary32
  kF16,   // IEEE binary16 (checkpoints only; see base/f16.h)
  kE4m3,  // OCP float8 e4m3fn code (see kernels/fp8.h)
};

// A float type whose values are stored as they are (not e4m3 codes).
constexpr bool IsFloat(DType t) {
  return t == DType::kF32 || t == DType::kBf16 || t == DType::kF16;
}

constexpr size_t DTypeSize(DType t) {
  switch (t) {
    case DType::kF32:
      return 4;
    case DType::kBf16:
    case DType::kF16:
      return 2;
    case DType::kE4m3:
      return 1;
  }
  return 0;
}

constexpr absl::string_view DTypeName(DType t) {
  switch (t) {
    case DType::kF32:
      return "f32";
    case DType::kBf16:
      return "bf16";
    case DType::kF16:
      return "f16";
    case DType::kE4m3:
      return "e4m3";
  }
  return "?";
}

// The names users know from PyTorch and HF configs (ModelInfo.dtype).
constexpr absl::string_view DTypeLongName(DType t) {
  switch (t) {
    case DType::kF32:
      return "float32";
    case DType::kBf16:
      return "bfloat16";
    case DType::kF16:
      return "float16";
    case DType::kE4m3:
      return "float8_e4m3fn";
  }
  return "?";
}

}  // namespace octet
