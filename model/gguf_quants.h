// GGML's tensor types as GGUF stores them, and their decoding to binary32.
//
// A quantized tensor is a row of blocks: QK = 32 values (Q4_0, Q4_1, Q5_0,
// Q5_1, Q8_0) or 256 (the K-quants Q4_K, Q5_K, Q6_K) in a fixed number of
// bytes, f16 scales first or last (ggml-common.h has the structs). Decoding
// is exact scalar arithmetic in binary32, in the same order as the `gguf`
// package's numpy dequantizer (gguf/quants.py), so that the two agree bit
// for bit (tests/model/gguf_oracle.py); this file is compiled without FMA
// contraction for that reason. Every other ggml type (Q2_K, IQ*, ...) is
// refused by name where a file is opened.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace octet {

// ggml's type numbers (ggml.h `enum ggml_type`), the ones octet decodes.
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kBf16 = 30,
};

// The layout of one type: `block_values` values in `block_bytes` bytes.
struct GgmlBlock {
  int64_t block_values;
  int64_t block_bytes;
};

// The type numbered `number` when octet decodes it, else nullopt.
std::optional<GgmlType> DecodableGgmlType(uint32_t number);
// The name ggml gives type `number` ("Q4_K", "IQ2_XS", ...), or
// "type N" for numbers ggml does not define.
std::string GgmlTypeName(uint32_t number);
GgmlBlock BlockOf(GgmlType type);

// Decodes `values` values of `type` from `bytes` into `out` (binary32).
// `values` must be a whole number of blocks and `bytes` exactly their size
// (the caller, GgufFile, has checked both).
void DequantizeGgml(GgmlType type, absl::Span<const uint8_t> bytes,
                    int64_t values, float* out);

}  // namespace octet
