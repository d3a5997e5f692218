// The GGUF reader: a file built here byte by byte parses to what was written;
// every cut of it, and every way a header can lie, is an error naming what is
// wrong; blocks decode to hand-computed values; a tiny llama file opens as a
// Checkpoint with Hugging Face's names, shapes and q/k rows. The `gguf`
// package's dequantizer and transformers are the oracles of
// tests/model/gguf_oracle.py; these are the cases that need no PyPI.
#include "model/gguf.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/f16.h"
#include "model/chat_template.h"
#include "model/checkpoint.h"
#include "model/gguf_checkpoint.h"
#include "model/gguf_quants.h"
#include "model/gguf_tokenizer.h"
#include "model/rope.h"
#include "model/tensor_names.h"
#include "nlohmann/json.hpp"

namespace octet {
namespace {

// Appends little-endian values, as a GGUF writer lays them out.
struct Bytes {
  std::string s;
  template <typename T>
  Bytes& Put(T v) {
    s.append(reinterpret_cast<const char*>(&v), sizeof(T));
    return *this;
  }
  Bytes& Str(const std::string& v) {
    Put<uint64_t>(v.size());
    s += v;
    return *this;
  }
};

// A GGUF file under construction: metadata entries, tensor infos, data.
class GgufBuilder {
 public:
  GgufBuilder& U32(const std::string& key, uint32_t v) {
    kv_.Str(key).Put<uint32_t>(4).Put(v);
    ++n_kv_;
    return *this;
  }
  GgufBuilder& F32(const std::string& key, float v) {
    kv_.Str(key).Put<uint32_t>(6).Put(v);
    ++n_kv_;
    return *this;
  }
  GgufBuilder& Str(const std::string& key, const std::string& v) {
    kv_.Str(key).Put<uint32_t>(8).Str(v);
    ++n_kv_;
    return *this;
  }
  GgufBuilder& Strs(const std::string& key, const std::vector<std::string>& v) {
    kv_.Str(key).Put<uint32_t>(9).Put<uint32_t>(8).Put<uint64_t>(v.size());
    for (const std::string& x : v) kv_.Str(x);
    ++n_kv_;
    return *this;
  }
  GgufBuilder& I32s(const std::string& key, const std::vector<int32_t>& v) {
    kv_.Str(key).Put<uint32_t>(9).Put<uint32_t>(5).Put<uint64_t>(v.size());
    for (int32_t x : v) kv_.Put(x);
    ++n_kv_;
    return *this;
  }
  GgufBuilder& F32s(const std::string& key, const std::vector<float>& v) {
    kv_.Str(key).Put<uint32_t>(9).Put<uint32_t>(6).Put<uint64_t>(v.size());
    for (float x : v) kv_.Put(x);
    ++n_kv_;
    return *this;
  }
  GgufBuilder& Bool(const std::string& key, bool v) {
    kv_.Str(key).Put<uint32_t>(7).Put<uint8_t>(v ? 1 : 0);
    ++n_kv_;
    return *this;
  }
  GgufBuilder& Raw(const std::string& bytes) {  // a hand-made entry
    kv_.s += bytes;
    ++n_kv_;
    return *this;
  }
  // A tensor of `type` with `dims` (innermost first) and its bytes.
  GgufBuilder& Tensor(const std::string& name, GgmlType type,
                      std::vector<uint64_t> dims, const std::string& data) {
    infos_.Str(name).Put<uint32_t>(dims.size());
    for (uint64_t d : dims) infos_.Put(d);
    infos_.Put(static_cast<uint32_t>(type)).Put<uint64_t>(data_.size());
    data_ += data;
    data_.resize((data_.size() + 31) / 32 * 32, '\0');
    ++n_tensors_;
    return *this;
  }
  // A binary32 tensor of `values`.
  GgufBuilder& Floats(const std::string& name, std::vector<uint64_t> dims,
                      const std::vector<float>& values) {
    return Tensor(name, GgmlType::kF32, std::move(dims),
                  std::string(reinterpret_cast<const char*>(values.data()),
                              4 * values.size()));
  }
  std::string Build(uint32_t version = 3) const {
    Bytes b;
    b.s = "GGUF";
    b.Put(version).Put<uint64_t>(n_tensors_).Put<uint64_t>(n_kv_);
    b.s += kv_.s + infos_.s;
    b.s.resize((b.s.size() + 31) / 32 * 32, '\0');
    return b.s + data_;
  }

 private:
  Bytes kv_, infos_;
  std::string data_;
  uint64_t n_kv_ = 0, n_tensors_ = 0;
};

std::string F32Bytes(std::vector<float> v) {
  return std::string(reinterpret_cast<const char*>(v.data()), 4 * v.size());
}

absl::Status ParseOf(const std::string& file) {
  return ParseGguf(file, "m.gguf").status();
}

void ExpectRejected(const std::string& file, const std::string& fragment) {
  const absl::Status s = ParseOf(file);
  EXPECT_FALSE(s.ok()) << "accepted; wanted an error with '" << fragment
                       << "'";
  EXPECT_NE(s.message().find(fragment), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("m.gguf"), std::string::npos) << s.message();
}

GgufBuilder TwoTensors() {
  GgufBuilder b;
  b.Str("general.architecture", "llama").U32("llama.block_count", 2);
  b.F32("llama.rope.freq_base", 500000.0f);
  b.Strs("tokenizer.ggml.tokens", {"a", "b", "ab"});
  b.Floats("x", {4, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  b.Floats("y", {3}, {9, 10, 11});
  return b;
}

TEST(GgufFormat, ParsesWhatWasWritten) {
  const std::string file = TwoTensors().Build();
  absl::StatusOr<GgufContents> c = ParseGguf(file, "m.gguf");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->version, 3u);
  EXPECT_EQ(c->metadata.at("general.architecture").s, "llama");
  EXPECT_EQ(c->metadata.at("llama.block_count").u, 2u);
  EXPECT_EQ(c->metadata.at("llama.rope.freq_base").f, 500000.0);
  EXPECT_EQ(c->metadata.at("tokenizer.ggml.tokens").strings,
            (std::vector<std::string>{"a", "b", "ab"}));
  ASSERT_EQ(c->tensors.size(), 2u);
  EXPECT_EQ(c->tensors[0].dims, (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(c->tensors[0].bytes, 32u);
  EXPECT_EQ(c->tensors[1].offset, 32u);
  EXPECT_EQ(c->data_offset % 32, 0u);
  float y0;
  std::memcpy(&y0, file.data() + c->data_offset + 32, 4);
  EXPECT_EQ(y0, 9.0f);
}

TEST(GgufFormat, EveryCutOfAFileIsAnError) {
  const std::string file = TwoTensors().Build();
  const GgufContents c = *ParseGguf(file, "m.gguf");
  const GgufTensorInfo& last = c.tensors.back();
  // (What follows the last tensor is padding a cut may drop.)
  for (size_t n = 0; n < c.data_offset + last.offset + last.bytes; ++n) {
    const absl::Status s = ParseOf(file.substr(0, n));
    EXPECT_FALSE(s.ok()) << "the first " << n << " bytes were accepted";
  }
}

TEST(GgufFormat, LiesInTheHeaderAreErrors) {
  ExpectRejected("GGML" + TwoTensors().Build().substr(4), "\"GGUF\"");
  ExpectRejected(TwoTensors().Build(1), "version 1");
  ExpectRejected(TwoTensors().Build(0x03000000), "big-endian");
  std::string many = TwoTensors().Build();
  many[8] = '\x7f';  // tensor count
  ExpectRejected(many, "tensors");
  many = TwoTensors().Build();
  many[16 + 7] = '\x10';  // metadata count's high byte
  ExpectRejected(many, "metadata entries");
  GgufBuilder b;
  b.Raw(Bytes().Str("k").Put<uint32_t>(8).Put<uint64_t>(1u << 30).s);
  ExpectRejected(b.Build(), "claims 1073741824 bytes");
  b = GgufBuilder();
  b.Raw(Bytes().Str("k").Put<uint32_t>(9).Put<uint32_t>(4).Put<uint64_t>(
                    uint64_t{1} << 40).s);
  ExpectRejected(b.Build(), "elements");
  b = GgufBuilder();
  b.Raw(Bytes().Str("k").Put<uint32_t>(9).Put<uint32_t>(9).Put<uint64_t>(0).s);
  ExpectRejected(b.Build(), "array of arrays");
  b = GgufBuilder();
  b.Raw(Bytes().Str("k").Put<uint32_t>(13).s);
  ExpectRejected(b.Build(), "unknown value type 13");
  b = GgufBuilder();
  b.Raw(Bytes().Str("k").Put<uint32_t>(7).Put<uint8_t>(2).s);
  ExpectRejected(b.Build(), "bool");
  ExpectRejected(GgufBuilder().U32("k", 1).U32("k", 2).Build(), "twice");
}

TEST(GgufFormat, LiesInTheTensorsAreErrors) {
  const std::string four = F32Bytes({1, 2, 3, 4});
  ExpectRejected(GgufBuilder().Floats("t", {}, {}).Build(), "0 dimensions");
  ExpectRejected(GgufBuilder().Floats("t", {1, 1, 1, 1, 1}, {1}).Build(),
                 "5 dimensions");
  ExpectRejected(GgufBuilder().Floats("t", {4, 0}, {}).Build(),
                 "dimension 1 = 0");
  ExpectRejected(
      GgufBuilder().Floats("t", {4}, {1, 2, 3, 4}).Floats("t", {1}, {1}).Build(),
      "appears twice");
  // More values than the data section holds.
  ExpectRejected(GgufBuilder().Tensor("t", GgmlType::kF32, {64}, four).Build(),
                 "inside the");
  // Q8_0 rows must be whole blocks of 32.
  ExpectRejected(
      GgufBuilder().Tensor("t", GgmlType::kQ8_0, {16}, std::string(34, 0)).Build(),
      "whole number of Q8_0 blocks");
  // An offset pointing into another tensor (alignment 16 allows it), and
  // one off the alignment.
  const std::string zeros = F32Bytes(std::vector<float>(8));
  std::string file = GgufBuilder()
                         .U32("general.alignment", 16)
                         .Tensor("a", GgmlType::kF32, {8}, zeros)
                         .Tensor("b", GgmlType::kF32, {8}, zeros)
                         .Build();
  // b's offset follows its name, n_dims, one dim and its type.
  const size_t b_offset = file.find(std::string("\x01\0\0\0\0\0\0\0b", 9), 24) + 9 + 4 + 8 + 4;
  std::string overlap = file;
  overlap[b_offset] = 16;
  ExpectRejected(overlap, "overlap");
  std::string misaligned = file;
  misaligned[b_offset] = 40;
  ExpectRejected(misaligned, "aligned");
}

TEST(GgufFormat, ATypeOctetDoesNotDecodeIsRefusedByName) {
  const std::string q2k(84, '\0');
  for (auto [number, name] : {std::pair<uint32_t, const char*>{10, "Q2_K"},
                             {16, "IQ2_XXS"},
                             {99, "type 99"}}) {
    const absl::Status s = ParseOf(
        GgufBuilder().Tensor("w", static_cast<GgmlType>(number), {256}, q2k).Build());
    EXPECT_NE(s.message().find(absl::StrCat("'w' has type ", name)),
              std::string::npos)
        << s.message();
  }
}

// ---------------------------------------------------------------- blocks

std::string Half(float v) {
  const uint16_t bits = FloatToF16(v).bits;
  return std::string(reinterpret_cast<const char*>(&bits), 2);
}

std::vector<float> Decode(GgmlType type, const std::string& block,
                          int64_t values) {
  std::vector<float> out(values);
  DequantizeGgml(type,
                 absl::MakeConstSpan(
                     reinterpret_cast<const uint8_t*>(block.data()), block.size()),
                 values, out.data());
  return out;
}

TEST(GgmlBlocks, SimpleTypesDecodeByHand) {
  std::string qs(16, '\0');
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<char>(j | ((15 - j) << 4));
  // Q4_0: d = 0.5; value j = d * (j - 8), value j + 16 = d * (7 - j).
  std::vector<float> v = Decode(GgmlType::kQ4_0, Half(0.5f) + qs, 32);
  EXPECT_EQ(v[0], -4.0f);
  EXPECT_EQ(v[15], 3.5f);
  EXPECT_EQ(v[16], 3.5f);
  EXPECT_EQ(v[31], -4.0f);
  // Q4_1: d = 0.25, m = -1: d * q + m.
  v = Decode(GgmlType::kQ4_1, Half(0.25f) + Half(-1.0f) + qs, 32);
  EXPECT_EQ(v[3], -0.25f);
  EXPECT_EQ(v[16], 2.75f);
  // Q5_0: bit i of qh is bit 4 of value i: value 1 = 0.5 * (1 + 16 - 16).
  std::string qh = Bytes().Put<uint32_t>(0x80000002u).s;
  v = Decode(GgmlType::kQ5_0, Half(0.5f) + qh + qs, 32);
  EXPECT_EQ(v[0], -8.0f);
  EXPECT_EQ(v[1], 0.5f);
  EXPECT_EQ(v[31], 0.0f);  // q = 0 | 16, minus 16
  // Q8_0: d * int8.
  std::string q8;
  for (int i = 0; i < 32; ++i) q8 += static_cast<char>(i - 16);
  v = Decode(GgmlType::kQ8_0, Half(2.0f) + q8, 32);
  EXPECT_EQ(v[0], -32.0f);
  EXPECT_EQ(v[31], 30.0f);
}

TEST(GgmlBlocks, KQuantScalesUnpackAsGgmlPacksThem) {
  // Q4_K: sub-block 5's scale is (byte 9 & 15) | (byte 1 >> 6) << 4, its
  // min (byte 9 >> 4) | (byte 5 >> 6) << 4.
  std::string scales(12, '\0');
  scales[1] = static_cast<char>(0xC0 | 7);  // scale 1 = 7, bits for scale 5
  scales[5] = static_cast<char>(0x40 | 3);  // min 1 = 3, bits for min 5
  scales[9] = static_cast<char>(0x21);      // scale 5 low 1, min 5 low 2
  std::string qs(128, static_cast<char>(0x52));  // low nibble 2, high 5
  std::vector<float> v =
      Decode(GgmlType::kQ4_K, Half(1.0f) + Half(0.5f) + scales + qs, 256);
  EXPECT_EQ(v[32], 7.0f * 5 - 0.5f * 3);          // sub-block 1: high nibbles
  EXPECT_EQ(v[5 * 32], (1 | 48) * 5.0f - 0.5f * (2 | 16));  // sub-block 5
  // Q6_K: value 200 (half 1, s = 2, i = 8) takes the high nibble of
  // ql[64 + 8] and bits 4-5 of qh[32 + 8]; its scale is scales[12].
  std::string ql(128, '\0'), qh6(64, '\0'), sc6(16, '\0');
  ql[72] = static_cast<char>(0xA0);
  qh6[40] = static_cast<char>(0x30);
  sc6[12] = static_cast<char>(-2);
  v = Decode(GgmlType::kQ6_K, ql + qh6 + sc6 + Half(0.5f), 256);
  EXPECT_EQ(v[200], 0.5f * -2 * ((10 | 48) - 32));
  EXPECT_EQ(v[0], 0.5f * sc6[0] * -32);
}

// ---------------------------------------------------------------- checkpoint

constexpr int kHidden = 8, kHeads = 2, kKvHeads = 1, kHeadDim = 4, kFfn = 16,
              kVocab = 10;

std::vector<float> Iota(int n, float from) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[i] = from + i;
  return v;
}

// A one-layer llama whose tensors hold distinct values.
GgufBuilder TinyLlama(uint32_t eos = 2) {
  GgufBuilder b;
  b.Str("general.architecture", "llama")
      .U32("llama.block_count", 1)
      .U32("llama.context_length", 64)
      .U32("llama.embedding_length", kHidden)
      .U32("llama.feed_forward_length", kFfn)
      .U32("llama.attention.head_count", kHeads)
      .U32("llama.attention.head_count_kv", kKvHeads)
      .F32("llama.attention.layer_norm_rms_epsilon", 1e-5f)
      .U32("tokenizer.ggml.eos_token_id", eos);
  const uint64_t h = kHidden, q = kHeads * kHeadDim, kv = kKvHeads * kHeadDim;
  b.Floats("token_embd.weight", {h, kVocab}, Iota(kHidden * kVocab, 0));
  b.Floats("blk.0.attn_norm.weight", {h}, Iota(kHidden, 1));
  b.Floats("blk.0.attn_q.weight", {h, q}, Iota(kHidden * q, 0));
  b.Floats("blk.0.attn_k.weight", {h, kv}, Iota(kHidden * kv, 0));
  b.Floats("blk.0.attn_v.weight", {h, kv}, Iota(kHidden * kv, 0));
  b.Floats("blk.0.attn_output.weight", {q, h}, Iota(kHidden * q, 0));
  b.Floats("blk.0.ffn_norm.weight", {h}, Iota(kHidden, 1));
  b.Floats("blk.0.ffn_gate.weight", {h, kFfn}, Iota(kHidden * kFfn, 0));
  b.Floats("blk.0.ffn_up.weight", {h, kFfn}, Iota(kHidden * kFfn, 0));
  b.Floats("blk.0.ffn_down.weight", {kFfn, h}, Iota(kHidden * kFfn, 0));
  b.Floats("output_norm.weight", {h}, Iota(kHidden, 1));
  return b;
}

std::string WriteTemp(const std::string& name, const std::string& bytes) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            absl::StrCat("octet_gguf_", ::getpid(), "_", name))
                               .string();
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

TEST(GgufCheckpointTest, ATinyLlamaOpensWithCanonicalNamesAndRows) {
  const std::string path = WriteTemp("tiny.gguf", TinyLlama().Build());
  absl::StatusOr<std::unique_ptr<GgufCheckpoint>> c = GgufCheckpoint::Open(path);
  ASSERT_TRUE(c.ok()) << c.status();
  const ModelConfig& config = (*c)->config();
  EXPECT_EQ(config.architecture, "LlamaForCausalLM");
  EXPECT_EQ(config.head_dim, kHeadDim);
  EXPECT_TRUE(config.tie_word_embeddings);
  EXPECT_EQ(config.vocab_size, kVocab);
  EXPECT_EQ(config.eos_token_ids, std::vector<int64_t>{2});
  EXPECT_EQ(config.torch_dtype, DType::kF32);
  // Shapes reversed; v is a view of the file as stored.
  absl::StatusOr<TensorView> v = (*c)->Get(TensorName(0, LayerTensor::kV));
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->shape, (std::vector<int64_t>{kKvHeads * kHeadDim, kHidden}));
  // q: Hugging Face row (head, half, i) was stored at (head, i, half): with
  // head_dim 4, rows 0 1 2 3 come from stored rows 0 2 1 3.
  absl::StatusOr<TensorView> q = (*c)->Get(TensorName(0, LayerTensor::kQ));
  ASSERT_TRUE(q.ok()) << q.status();
  ASSERT_EQ(q->dtype, DType::kF32);
  std::vector<float> rows(q->bytes.size() / 4);
  std::memcpy(rows.data(), q->bytes.data(), q->bytes.size());
  const int stored[] = {0, 2, 1, 3, 4, 6, 5, 7};
  for (int r = 0; r < kHeads * kHeadDim; ++r) {
    EXPECT_EQ(rows[r * kHidden], stored[r] * kHidden) << "row " << r;
  }
  (*c)->ReleasePages(TensorName(0, LayerTensor::kQ));
  std::filesystem::remove(path);
}

TEST(GgufCheckpointTest, RopeFreqsDivideEachPairsFrequency) {
  GgufBuilder b = TinyLlama();
  b.F32("llama.rope.freq_base", 10000.0f);
  b.Floats("rope_freqs.weight", {kHeadDim / 2}, {1.0f, 8.0f});
  const std::string path = WriteTemp("freqs.gguf", b.Build());
  absl::StatusOr<std::unique_ptr<GgufCheckpoint>> c =
      GgufCheckpoint::Open(path);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ((*c)->config().rope_freq_factors, (std::vector<float>{1, 8}));
  // theta^(-2i / head_dim) / factor i: 1, then 10000^(-1/2) / 8.
  EXPECT_EQ(RopeInverseFrequencies((*c)->config()),
            (std::vector<float>{1.0f, static_cast<float>(0.01 / 8)}));
  std::filesystem::remove(path);
}

TEST(GgufCheckpointTest, WhatOctetCannotServeIsNamed) {
  auto expect_error = [](GgufBuilder b, const std::string& fragment) {
    const std::string path = WriteTemp("bad.gguf", b.Build());
    const absl::Status s = GgufCheckpoint::Open(path).status();
    EXPECT_NE(s.message().find(fragment), std::string::npos)
        << "want '" << fragment << "', got: " << s;
    std::filesystem::remove(path);
  };
  GgufBuilder gpt2 = TinyLlama();
  gpt2.Str("general.architecture", "gpt2");  // a second value for the key
  expect_error(gpt2, "appears twice");
  GgufBuilder extra = TinyLlama();
  extra.Floats("blk.0.ffn_gate_exps.weight", {1}, {0});
  expect_error(extra, "no use for: blk.0.ffn_gate_exps.weight");
  GgufBuilder freqs = TinyLlama();
  freqs.Floats("rope_freqs.weight", {3}, {1, 1, 1});
  expect_error(freqs, "'rope_freqs.weight' must be F32 with 2 values");
  GgufBuilder zero = TinyLlama();
  zero.Floats("rope_freqs.weight", {2}, {1, 0});
  expect_error(zero, "rope_freqs.weight[1] is 0");
  GgufBuilder experts = TinyLlama();
  experts.U32("llama.expert_count", 8);
  expect_error(experts, "mixture-of-experts");
  GgufBuilder rotary = TinyLlama();
  rotary.U32("llama.rope.dimension_count", 2);
  expect_error(rotary, "rope.dimension_count' is 2");
  GgufBuilder no_layers;
  no_layers.Str("general.architecture", "llama");
  expect_error(no_layers, "'llama.block_count' is missing");
  GgufBuilder bert;
  bert.Str("general.architecture", "bert");
  expect_error(bert, "'bert'");
  expect_error(TinyLlama(/*eos=*/kVocab), "special token id 10 is outside");
}

TEST(GgufTokenizerTest, BuildsByteLevelBpeAndRefusesUnknownModels) {
  GgufBuilder b;
  b.Str("tokenizer.ggml.model", "gpt2")
      .Str("tokenizer.ggml.pre", "smollm")
      .Strs("tokenizer.ggml.tokens", {"<s>", "a", "b", "ab", "1", "2", "Ġ"})
      .I32s("tokenizer.ggml.token_type", {3, 1, 1, 1, 1, 1, 1})
      .Strs("tokenizer.ggml.merges", {"a b"});
  const std::string path = WriteTemp("tok.gguf", b.Build());
  absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = GgufTokenizer(**f);
  ASSERT_TRUE(t.ok()) << t.status();
  // "ab" merges; digits split one by one; "<s>" is a special token.
  EXPECT_EQ((*t)->Encode("ab12<s>", false),
            (std::vector<int64_t>{3, 4, 5, 0}));
  EXPECT_EQ((*t)->Decode({3, 6, 4, 0}), "ab 1");
  std::filesystem::remove(path);

  GgufBuilder t5;
  t5.Str("tokenizer.ggml.model", "t5");
  const std::string t5_path = WriteTemp("t5.gguf", t5.Build());
  f = GgufFile::Open(t5_path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_NE(GgufTokenizer(**f).status().message().find("'t5'"),
            std::string::npos);
  std::filesystem::remove(t5_path);

  GgufBuilder pre;
  pre.Str("tokenizer.ggml.model", "gpt2")
      .Str("tokenizer.ggml.pre", "falcon")
      .Strs("tokenizer.ggml.tokens", {"a"})
      .Strs("tokenizer.ggml.merges", {});
  const std::string pre_path = WriteTemp("pre.gguf", pre.Build());
  f = GgufFile::Open(pre_path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_NE(GgufTokenizer(**f).status().message().find("'falcon'"),
            std::string::npos);
  std::filesystem::remove(pre_path);
}

// A SentencePiece vocabulary as llama.cpp writes one: <unk>, <s>, </s>, the
// 256 byte pieces, then pieces with scores (higher merges first).
GgufBuilder SentencePieceVocabulary() {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<int32_t> types = {2, 3, 3};
  std::vector<float> scores = {0, 0, 0};
  for (int b = 0; b < 256; ++b) {
    tokens.push_back(absl::StrFormat("<0x%02X>", b));
    types.push_back(6);
    scores.push_back(0);
  }
  const std::vector<std::pair<std::string, float>> pieces = {
      {"\u2581", -1},  {"a", -2},  {"b", -3},
      {"\u2581a", -4}, {"ab", -5}, {"\u2581ab", -6}};
  for (const auto& [piece, score] : pieces) {
    tokens.push_back(piece);
    types.push_back(1);
    scores.push_back(score);
  }
  GgufBuilder b;
  b.Str("tokenizer.ggml.model", "llama")
      .Strs("tokenizer.ggml.tokens", tokens)
      .F32s("tokenizer.ggml.scores", scores)
      .I32s("tokenizer.ggml.token_type", types)
      .U32("tokenizer.ggml.bos_token_id", 1)
      .U32("tokenizer.ggml.eos_token_id", 2);
  return b;
}

absl::StatusOr<std::unique_ptr<Tokenizer>> TokenizerOf(const GgufBuilder& b) {
  const std::string path = WriteTemp("spm.gguf", b.Build());
  absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::Open(path);
  std::filesystem::remove(path);  // the mapping stays valid
  if (!f.ok()) return f.status();
  return GgufTokenizer(**f);
}

TEST(GgufTokenizerTest, SentencePieceScoresBecomeSentencePiecesModel) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> t =
      TokenizerOf(SentencePieceVocabulary());
  ASSERT_TRUE(t.ok()) << t.status();
  constexpr int64_t kFirst = 3 + 256;  // "▁"
  const int64_t space = kFirst, a = kFirst + 1, b = kFirst + 2,
                space_a = kFirst + 3, space_ab = kFirst + 5;
  EXPECT_EQ((*t)->vocab_size(), kFirst + 6);
  EXPECT_EQ((*t)->bos_id(), 1);
  EXPECT_EQ((*t)->eos_id(), 2);
  // A space in front ("▁ab"), the best-scored merge first ("▁a" before
  // "ab"), bytes for what no piece covers ("\xC3\xA9" is e-acute).
  EXPECT_EQ((*t)->Encode("ab", true), (std::vector<int64_t>{1, space_ab}));
  EXPECT_EQ((*t)->Encode("ba b", false),
            (std::vector<int64_t>{space, b, a, space, b}));
  EXPECT_EQ((*t)->Encode("a\xC3\xA9", false),
            (std::vector<int64_t>{space_a, 3 + 0xC3, 3 + 0xA9}));
  EXPECT_EQ((*t)->Decode({1, space_ab, space, b, 3 + 0xC3, 3 + 0xA9, 2}),
            "ab b\xC3\xA9");

  // The file's flags: no BOS, no space in front.
  GgufBuilder plain = SentencePieceVocabulary();
  plain.Bool("tokenizer.ggml.add_bos_token", false)
      .Bool("tokenizer.ggml.add_space_prefix", false);
  t = TokenizerOf(plain);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->bos_id(), 1);  // the chat template's <s> still maps to it
  EXPECT_EQ((*t)->Encode("ab", true), (std::vector<int64_t>{kFirst + 4}));

  // An EOS that is not CONTROL is none (generation stops on the config's).
  GgufBuilder eos_a;
  eos_a.Str("tokenizer.ggml.model", "llama")
      .Strs("tokenizer.ggml.tokens", {"<unk>", "<s>", "▁", "a"})
      .F32s("tokenizer.ggml.scores", {0, 0, 0, 0})
      .I32s("tokenizer.ggml.token_type", {2, 3, 1, 1})
      .U32("tokenizer.ggml.bos_token_id", 1)
      .U32("tokenizer.ggml.eos_token_id", 3);
  t = TokenizerOf(eos_a);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->eos_id(), -1);
  EXPECT_EQ((*t)->Encode("a", true), (std::vector<int64_t>{1, 2, 3}));
}

// What `octet quantize` writes for a GGUF's tokenizer reads back as the
// GGUF's: no BOS where it says so, the chat template with its BOS and EOS.
TEST(GgufTokenizerTest, ItsFilesReadBackAsADirectorysTokenizer) {
  GgufBuilder b = SentencePieceVocabulary();
  b.Bool("tokenizer.ggml.add_bos_token", false)
      .Str("tokenizer.chat_template", "{{ bos_token }}x{{ eos_token }}");
  const std::string path = WriteTemp("files.gguf", b.Build());
  absl::StatusOr<std::unique_ptr<GgufFile>> f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  absl::StatusOr<std::vector<GgufTokenizerFile>> files =
      GgufTokenizerFiles(**f);
  ASSERT_TRUE(files.ok()) << files.status();
  const std::filesystem::path dir = path + ".dir";
  std::filesystem::create_directories(dir);
  for (const GgufTokenizerFile& file : *files) {
    std::ofstream(dir / file.name, std::ios::binary) << file.bytes;
  }
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::Load(dir.string());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->bos_id(), 1);
  EXPECT_EQ((*t)->Encode("ab", true), (*t)->Encode("ab", false));
  absl::StatusOr<std::optional<ChatTemplateSource>> chat =
      ReadHfChatTemplate(dir.string());
  ASSERT_TRUE(chat.ok() && chat->has_value()) << chat.status();
  EXPECT_EQ((*chat)->text, "{{ bos_token }}x{{ eos_token }}");
  EXPECT_EQ((*chat)->bos_token, "<s>");
  EXPECT_EQ((*chat)->eos_token, "</s>");
  std::filesystem::remove_all(dir);
  std::filesystem::remove(path);

  // A template alone is a tokenizer_config.json alone; one that is not
  // UTF-8 is an error naming it.
  GgufBuilder chat_only;
  chat_only.Str("tokenizer.chat_template", "hi");
  const std::string chat_path = WriteTemp("chat_only.gguf", chat_only.Build());
  f = GgufFile::Open(chat_path);
  ASSERT_TRUE(f.ok()) << f.status();
  files = GgufTokenizerFiles(**f);
  ASSERT_TRUE(files.ok()) << files.status();
  ASSERT_EQ(files->size(), 1u);
  EXPECT_EQ((*files)[0].name, "tokenizer_config.json");
  std::filesystem::remove(chat_path);
  GgufBuilder bad;
  bad.Str("tokenizer.chat_template", "\xFF");
  const std::string bad_path = WriteTemp("bad_chat.gguf", bad.Build());
  f = GgufFile::Open(bad_path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_NE(GgufTokenizerFiles(**f).status().message().find(
                "chat_template is not valid UTF-8"),
            std::string::npos);
  std::filesystem::remove(bad_path);
}

TEST(GgufTokenizerTest, ASentencePieceVocabularyOctetCannotReadIsNamed) {
  auto expect_error = [](const GgufBuilder& b, const std::string& fragment) {
    const absl::Status s = TokenizerOf(b).status();
    EXPECT_NE(s.message().find(fragment), std::string::npos)
        << "want '" << fragment << "', got: " << s;
  };
  GgufBuilder no_scores;
  no_scores.Str("tokenizer.ggml.model", "llama")
      .Strs("tokenizer.ggml.tokens", {"<unk>"})
      .I32s("tokenizer.ggml.token_type", {2});
  expect_error(no_scores, "tokenizer.ggml.scores");
  GgufBuilder short_scores;
  short_scores.Str("tokenizer.ggml.model", "llama")
      .Strs("tokenizer.ggml.tokens", {"<unk>", "a"})
      .F32s("tokenizer.ggml.scores", {0})
      .I32s("tokenizer.ggml.token_type", {2, 1});
  expect_error(short_scores, "they must match");
  GgufBuilder no_unknown;
  no_unknown.Str("tokenizer.ggml.model", "llama")
      .Strs("tokenizer.ggml.tokens", {"a"})
      .F32s("tokenizer.ggml.scores", {0})
      .I32s("tokenizer.ggml.token_type", {1});
  expect_error(no_unknown, "no token has token_type 2");
  GgufBuilder odd_type;
  odd_type.Str("tokenizer.ggml.model", "llama")
      .Strs("tokenizer.ggml.tokens", {"<unk>", "a"})
      .F32s("tokenizer.ggml.scores", {0, 0})
      .I32s("tokenizer.ggml.token_type", {2, 9});
  expect_error(odd_type, "token 1 has token_type 9");
  GgufBuilder inf_score;
  inf_score.Str("tokenizer.ggml.model", "llama")
      .Strs("tokenizer.ggml.tokens", {"<unk>", "a"})
      .F32s("tokenizer.ggml.scores", {0, INFINITY})
      .I32s("tokenizer.ggml.token_type", {2, 1});
  expect_error(inf_score, "token 1 has score inf");
  GgufBuilder normal_bos;
  normal_bos.Str("tokenizer.ggml.model", "llama")
      .Strs("tokenizer.ggml.tokens", {"<unk>", "a"})
      .F32s("tokenizer.ggml.scores", {0, 0})
      .I32s("tokenizer.ggml.token_type", {2, 1})
      .U32("tokenizer.ggml.bos_token_id", 1);
  expect_error(normal_bos, "bos_token_id 1 is not a CONTROL token");
  GgufBuilder eos = SentencePieceVocabulary();
  eos.Bool("tokenizer.ggml.add_eos_token", true);
  expect_error(eos, "add_eos_token is true");
  GgufBuilder flag = SentencePieceVocabulary();
  flag.Str("tokenizer.ggml.add_space_prefix", "yes");
  expect_error(flag, "add_space_prefix");
}

TEST(GgufChatTemplateTest, TheTemplateComesWithItsSpecialTokensText) {
  GgufBuilder b;
  b.Str("tokenizer.chat_template", "{{ bos_token }}{{ messages[0].content }}")
      .Strs("tokenizer.ggml.tokens", {"<s>", "</s>", "a"})
      .U32("tokenizer.ggml.bos_token_id", 0)
      .U32("tokenizer.ggml.eos_token_id", 1);
  const std::string path = WriteTemp("chat.gguf", b.Build());
  absl::StatusOr<std::optional<ChatTemplateSource>> source =
      ReadCheckpointChatTemplate(path);
  ASSERT_TRUE(source.ok()) << source.status();
  ASSERT_TRUE(source->has_value());
  EXPECT_EQ((*source)->bos_token, "<s>");
  EXPECT_EQ((*source)->eos_token, "</s>");
  absl::StatusOr<ChatTemplate> t = ChatTemplate::Compile(**source);
  ASSERT_TRUE(t.ok()) << t.status();
  const nlohmann::json conversation = {{{"role", "user"}, {"content", "hi"}}};
  EXPECT_EQ(*t->Render(conversation, true), "<s>hi");
  std::filesystem::remove(path);

  GgufBuilder bad;
  bad.Str("tokenizer.chat_template", "x")
      .Strs("tokenizer.ggml.tokens", {"a"})
      .U32("tokenizer.ggml.eos_token_id", 7);
  const std::string bad_path = WriteTemp("badchat.gguf", bad.Build());
  EXPECT_NE(ReadCheckpointChatTemplate(bad_path).status().message().find(
                "tokenizer.ggml.eos_token_id = 7"),
            std::string::npos);
  std::filesystem::remove(bad_path);

  GgufBuilder none;
  none.Str("general.architecture", "llama");
  const std::string none_path = WriteTemp("nochat.gguf", none.Build());
  source = ReadCheckpointChatTemplate(none_path);
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_FALSE(source->has_value());
  std::filesystem::remove(none_path);
}

}  // namespace
}  // namespace octet
