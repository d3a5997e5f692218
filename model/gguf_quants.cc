// Decoding GGML blocks (see gguf_quants.h). One function per type, each
// decoding one block in the element order ggml's dequantize_row_* writes:
// read it beside ggml-common.h's block structs. Products are formed in the
// order gguf/quants.py forms them ((d * sc) * q - dmin * m for the K-quants)
// and never fused (CMake compiles this file with -ffp-contract=off).
#include "model/gguf_quants.h"

#include <bit>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/f16.h"

namespace octet {
namespace {

constexpr int kQk = 32;    // values in a block of the simple types
constexpr int kQkK = 256;  // values in a K-quant super-block

float HalfAt(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  return F16ToFloat(F16{bits});
}

// Q4_0: f16 d, 16 bytes of nibbles; value j = low nibble of byte j, value
// j + 16 its high nibble; x = d * (q - 8).
void Q4_0Block(const uint8_t* b, float* out) {
  const float d = HalfAt(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < kQk / 2; ++j) {
    out[j] = d * static_cast<float>((qs[j] & 0x0F) - 8);
    out[j + kQk / 2] = d * static_cast<float>((qs[j] >> 4) - 8);
  }
}

// Q4_1: f16 d, f16 m, nibbles as Q4_0; x = d * q + m.
void Q4_1Block(const uint8_t* b, float* out) {
  const float d = HalfAt(b), m = HalfAt(b + 2);
  const uint8_t* qs = b + 4;
  for (int j = 0; j < kQk / 2; ++j) {
    out[j] = d * static_cast<float>(qs[j] & 0x0F) + m;
    out[j + kQk / 2] = d * static_cast<float>(qs[j] >> 4) + m;
  }
}

// The 5-bit value i of a Q5 block: nibble as Q4_0, bit 4 = bit i of qh.
int Q5Value(const uint8_t* qs, uint32_t qh, int i) {
  const int low = i < kQk / 2 ? (qs[i] & 0x0F) : (qs[i - kQk / 2] >> 4);
  return low | static_cast<int>(((qh >> i) & 1u) << 4);
}

// Q5_0: f16 d, u32 qh, 16 bytes of nibbles; x = d * (q - 16).
void Q5_0Block(const uint8_t* b, float* out) {
  const float d = HalfAt(b);
  uint32_t qh;
  std::memcpy(&qh, b + 2, 4);
  for (int i = 0; i < kQk; ++i) {
    out[i] = d * static_cast<float>(Q5Value(b + 6, qh, i) - 16);
  }
}

// Q5_1: f16 d, f16 m, u32 qh, nibbles; x = d * q + m.
void Q5_1Block(const uint8_t* b, float* out) {
  const float d = HalfAt(b), m = HalfAt(b + 2);
  uint32_t qh;
  std::memcpy(&qh, b + 4, 4);
  for (int i = 0; i < kQk; ++i) {
    out[i] = d * static_cast<float>(Q5Value(b + 8, qh, i)) + m;
  }
}

// Q8_0: f16 d, 32 int8; x = q * d.
void Q8_0Block(const uint8_t* b, float* out) {
  const float d = HalfAt(b);
  for (int i = 0; i < kQk; ++i) {
    out[i] = static_cast<float>(static_cast<int8_t>(b[2 + i])) * d;
  }
}

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K block, from
// its 12 packed bytes (ggml's get_scale_min_k4).
void ScaleMinK4(const uint8_t* s, int j, int* scale, int* min) {
  if (j < 4) {
    *scale = s[j] & 63;
    *min = s[j + 4] & 63;
  } else {
    *scale = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
    *min = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// A Q4_K/Q5_K sub-block's two factors: (d * scale) and (dmin * min), each
// rounded to binary32 as gguf/quants.py forms them.
struct KFactors {
  float dl, ml;
};
KFactors KSubBlock(const uint8_t* b, int j) {
  int sc, m;
  ScaleMinK4(b + 4, j, &sc, &m);
  return {HalfAt(b) * static_cast<float>(sc),
          HalfAt(b + 2) * static_cast<float>(m)};
}

// Q4_K: f16 d, f16 dmin, 12 bytes of scales, 128 bytes of nibbles. Eight
// sub-blocks of 32; sub-block j's values are the low (j even) or high (j
// odd) nibbles of bytes 32 * (j / 2) ... + 31. x = (d * sc) * q - dmin * m.
void Q4_KBlock(const uint8_t* b, float* out) {
  for (int j = 0; j < 8; ++j) {
    const KFactors f = KSubBlock(b, j);
    const uint8_t* q = b + 16 + 32 * (j / 2);
    for (int i = 0; i < 32; ++i) {
      const int v = (q[i] >> (4 * (j % 2))) & 0x0F;
      out[32 * j + i] = f.dl * static_cast<float>(v) - f.ml;
    }
  }
}

// Q5_K: as Q4_K with 32 bytes of high bits after the scales: bit j of byte
// i is bit 4 of value i of sub-block j.
void Q5_KBlock(const uint8_t* b, float* out) {
  const uint8_t* qh = b + 16;
  for (int j = 0; j < 8; ++j) {
    const KFactors f = KSubBlock(b, j);
    const uint8_t* q = b + 48 + 32 * (j / 2);
    for (int i = 0; i < 32; ++i) {
      const int v = ((q[i] >> (4 * (j % 2))) & 0x0F) | (((qh[i] >> j) & 1) << 4);
      out[32 * j + i] = f.dl * static_cast<float>(v) - f.ml;
    }
  }
}

// Q6_K: 128 bytes of low nibbles, 64 of high 2-bit pairs, 16 int8 scales,
// f16 d. Each half h of 128 values uses ql[64h ...] and qh[32h ...]: value
// 32 * s + i of the half (s = 0..3) takes the low (s < 2) or high nibble of
// ql[64h + 32 * (s % 2) + i] and bits 2s, 2s+1 of qh[32h + i]. x = (d *
// scale[v / 16]) * (q - 32).
void Q6_KBlock(const uint8_t* b, float* out) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const int8_t* scales = reinterpret_cast<const int8_t*>(b + 192);
  const float d = HalfAt(b + 208);
  for (int v = 0; v < kQkK; ++v) {
    const int h = v / 128, s = (v % 128) / 32, i = v % 32;
    const int low = (ql[64 * h + 32 * (s % 2) + i] >> (4 * (s / 2))) & 0x0F;
    const int high = (qh[32 * h + i] >> (2 * s)) & 3;
    const float dl = d * static_cast<float>(scales[v / 16]);
    out[v] = dl * static_cast<float>((low | (high << 4)) - 32);
  }
}

using BlockDecoder = void (*)(const uint8_t*, float*);

BlockDecoder DecoderOf(GgmlType type) {
  switch (type) {
    case GgmlType::kQ4_0: return Q4_0Block;
    case GgmlType::kQ4_1: return Q4_1Block;
    case GgmlType::kQ5_0: return Q5_0Block;
    case GgmlType::kQ5_1: return Q5_1Block;
    case GgmlType::kQ8_0: return Q8_0Block;
    case GgmlType::kQ4_K: return Q4_KBlock;
    case GgmlType::kQ5_K: return Q5_KBlock;
    case GgmlType::kQ6_K: return Q6_KBlock;
    default: return nullptr;  // the float types: element by element
  }
}

}  // namespace

std::optional<GgmlType> DecodableGgmlType(uint32_t number) {
  switch (static_cast<GgmlType>(number)) {
    case GgmlType::kF32:
    case GgmlType::kF16:
    case GgmlType::kBf16:
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_0:
    case GgmlType::kQ5_1:
    case GgmlType::kQ8_0:
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
    case GgmlType::kQ6_K:
      return static_cast<GgmlType>(number);
  }
  return std::nullopt;
}

std::string GgmlTypeName(uint32_t number) {
  // ggml.h's numbering; gaps are types ggml has removed.
  static constexpr const char* kNames[] = {
      "F32",     "F16",    "Q4_0",   "Q4_1",    "Q4_2",    "Q4_3",
      "Q5_0",    "Q5_1",   "Q8_0",   "Q8_1",    "Q2_K",    "Q3_K",
      "Q4_K",    "Q5_K",   "Q6_K",   "Q8_K",    "IQ2_XXS", "IQ2_XS",
      "IQ3_XXS", "IQ1_S",  "IQ4_NL", "IQ3_S",   "IQ2_S",   "IQ4_XS",
      "I8",      "I16",    "I32",    "I64",     "F64",     "IQ1_M",
      "BF16",    "Q4_0_4_4", "Q4_0_4_8", "Q4_0_8_8", "TQ1_0", "TQ2_0",
      "IQ4_NL_4_4", "IQ4_NL_4_8", "IQ4_NL_8_8", "MXFP4"};
  if (number < std::size(kNames)) return kNames[number];
  return absl::StrCat("type ", number);
}

GgmlBlock BlockOf(GgmlType type) {
  switch (type) {
    case GgmlType::kF32: return {1, 4};
    case GgmlType::kF16: return {1, 2};
    case GgmlType::kBf16: return {1, 2};
    case GgmlType::kQ4_0: return {kQk, 2 + kQk / 2};
    case GgmlType::kQ4_1: return {kQk, 4 + kQk / 2};
    case GgmlType::kQ5_0: return {kQk, 6 + kQk / 2};
    case GgmlType::kQ5_1: return {kQk, 8 + kQk / 2};
    case GgmlType::kQ8_0: return {kQk, 2 + kQk};
    case GgmlType::kQ4_K: return {kQkK, 4 + 12 + kQkK / 2};
    case GgmlType::kQ5_K: return {kQkK, 4 + 12 + kQkK / 8 + kQkK / 2};
    case GgmlType::kQ6_K: return {kQkK, kQkK / 2 + kQkK / 4 + kQkK / 16 + 2};
  }
  return {1, 1};  // unreachable: every enumerator is listed
}

void DequantizeGgml(GgmlType type, absl::Span<const uint8_t> bytes,
                    int64_t values, float* out) {
  const uint8_t* p = bytes.data();
  switch (type) {
    case GgmlType::kF32:
      std::memcpy(out, p, 4 * values);
      return;
    case GgmlType::kF16:
      for (int64_t i = 0; i < values; ++i) out[i] = HalfAt(p + 2 * i);
      return;
    case GgmlType::kBf16:
      for (int64_t i = 0; i < values; ++i) {
        uint16_t bits;
        std::memcpy(&bits, p + 2 * i, 2);
        out[i] = std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
      }
      return;
    default:
      break;
  }
  const GgmlBlock block = BlockOf(type);
  const BlockDecoder decode = DecoderOf(type);
  for (int64_t b = 0; b < values / block.block_values; ++b) {
    decode(p + b * block.block_bytes, out + b * block.block_values);
  }
}

}  // namespace octet
