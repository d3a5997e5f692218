// The CUDA backend's operations (kernels/cuda/ops.h, through the Backend
// interface) against the CPU backend's, whose ops are the scalar references:
// the same inputs (bfloat16-exact values), outputs within bfloat16 rounding.
// Skips without a supported CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "base/bf16.h"
#include "kernels/backend.h"
#include "kernels/cpu/backend.h"
#include "kernels/cuda/attention_flashinfer.h"
#include "kernels/cuda/backend.h"
#include "kernels/cuda/device.h"
#include "tests/kernels/cuda_test_util.h"
#include "tests/kernels/test_data.h"
#include "tests/status_util.h"

namespace octet {
namespace {

using testing::NormalBf16Values;

class CudaOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    OCTET_REQUIRE_CUDA_DEVICE();
    auto g = NewCudaBackend(0);
    ASSERT_TRUE(g.ok()) << g.status();
    gpu_ = *std::move(g);
    cpu_ = NewCpuBackend();
  }

  // Activations: binary32 on the CPU, bfloat16 on the GPU.
  DeviceBuffer Act(Backend& b, const std::vector<float>& v) {
    if (b.kind() == DeviceKind::kCpu) return Raw(b, v.data(), v.size() * 4);
    std::vector<Bf16> h(v.size());
    for (size_t i = 0; i < v.size(); ++i) h[i] = FloatToBf16(v[i]);
    return Raw(b, h.data(), h.size() * 2);
  }
  template <typename T>
  DeviceBuffer Buf(Backend& b, const std::vector<T>& v) {
    return Raw(b, v.data(), v.size() * sizeof(T));
  }
  DeviceBuffer Raw(Backend& b, const void* p, size_t bytes) {
    auto buf = b.Allocate(bytes);
    OCTET_EXPECT_OK(buf);
    if (!buf.ok()) return DeviceBuffer();  // the test has failed already
    OCTET_EXPECT_OK(b.CopyToDevice(buf->data(), p, bytes));
    return *std::move(buf);
  }
  std::vector<float> Read(Backend& b, const DeviceBuffer& buf, size_t n) {
    std::vector<float> out(n);
    if (b.kind() == DeviceKind::kCpu) {
      OCTET_EXPECT_OK(b.CopyToHost(out.data(), buf.data(), n * 4));
    } else {
      std::vector<Bf16> h(n);
      OCTET_EXPECT_OK(b.CopyToHost(h.data(), buf.data(), n * 2));
      for (size_t i = 0; i < n; ++i) out[i] = Bf16ToFloat(h[i]);
    }
    return out;
  }
  // GPU result vs the CPU's rounded to bfloat16: rel_tol relative plus abs_tol.
  void ExpectNear(const std::vector<float>& gpu, const std::vector<float>& cpu,
                  double rel_tol, double abs_tol, const char* what) {
    ASSERT_EQ(gpu.size(), cpu.size());
    for (size_t i = 0; i < cpu.size(); ++i) {
      const float want = Bf16ToFloat(FloatToBf16(cpu[i]));
      ASSERT_LE(std::fabs(gpu[i] - want), rel_tol * std::fabs(want) + abs_tol)
          << what << " element " << i << ": gpu " << gpu[i] << " cpu "
          << cpu[i];
    }
  }

  std::unique_ptr<Backend> cpu_, gpu_;
};

TEST_F(CudaOpsTest, ElementwiseOpsMatchTheCpu) {
  const int64_t rows = 37, cols = 200;
  const std::vector<float> x = NormalBf16Values(rows * cols, 1, 2.0f),
                           y = NormalBf16Values(rows * cols, 2);
  std::vector<float> weight = NormalBf16Values(cols, 3);
  for (Backend* b : {cpu_.get(), gpu_.get()}) ASSERT_NE(b, nullptr);
  std::vector<std::vector<float>> norm(2), sum(2), silu(2), gathered(2);
  const std::vector<int32_t> pick = {5, 0, 36, 5};
  int i = 0;
  for (Backend* b : {cpu_.get(), gpu_.get()}) {
    DeviceBuffer dx = Act(*b, x), dy = Act(*b, y), out = Act(*b, x);
    DeviceBuffer w = Buf(*b, weight), rows_buf = Buf(*b, pick);
    OCTET_ASSERT_OK(
        b->RmsNorm(dx.data(), w.as<float>(), rows, cols, 1e-5f, out.data()));
    norm[i] = Read(*b, out, rows * cols);
    OCTET_ASSERT_OK(b->SiluMul(dx.data(), rows, cols / 2, out.data()));
    silu[i] = Read(*b, out, rows * cols / 2);
    OCTET_ASSERT_OK(
        b->GatherRows(dx.data(), cols, rows_buf.as<int32_t>(), 4, out.data()));
    gathered[i] = Read(*b, out, 4 * cols);
    OCTET_ASSERT_OK(b->Add(dx.data(), dy.data(), rows * cols));
    sum[i] = Read(*b, dx, rows * cols);
    ++i;
  }
  ExpectNear(norm[1], norm[0], 0x1p-7, 1e-6, "RmsNorm");
  ExpectNear(silu[1], silu[0], 0x1p-7, 1e-6, "SiluMul");
  ExpectNear(gathered[1], gathered[0], 0, 0, "GatherRows");
  ExpectNear(sum[1], sum[0], 0, 0, "Add");  // one rounding of an exact f32 sum
}

TEST_F(CudaOpsTest, EmbeddingAndRopeMatchTheCpu) {
  const int64_t vocab = 50, hidden = 64, tokens = 9, heads = 3, head_dim = 32;
  std::vector<Bf16> table(vocab * hidden);
  const std::vector<float> tv = NormalBf16Values(vocab * hidden, 4);
  for (size_t j = 0; j < tv.size(); ++j) table[j] = FloatToBf16(tv[j]);
  const std::vector<int32_t> ids = {0, 49, 7,  60, 7,
                                    3, 20, 19, 1};  // 60: other shard
  std::vector<int32_t> positions(tokens);
  std::iota(positions.begin(), positions.end(), 1000);
  std::vector<float> inv_freq(head_dim / 2);
  for (int64_t f = 0; f < head_dim / 2; ++f)
    inv_freq[f] = std::pow(10000.0f, -2.0f * f / head_dim);
  const std::vector<float> q = NormalBf16Values(tokens * heads * head_dim, 5);
  std::vector<std::vector<float>> emb(2), rope(2);
  int i = 0;
  for (Backend* b : {cpu_.get(), gpu_.get()}) {
    DeviceBuffer t = Buf(*b, table), id = Buf(*b, ids),
                 out = Act(*b, std::vector<float>(tokens * hidden));
    OCTET_ASSERT_OK(b->Embedding(t.data(), DType::kBf16, vocab, hidden, 0,
                                 id.as<int32_t>(), tokens, out.data()));
    emb[i] = Read(*b, out, tokens * hidden);
    DeviceBuffer dq = Act(*b, q), pos = Buf(*b, positions),
                 f = Buf(*b, inv_freq);
    OCTET_ASSERT_OK(b->Rope(dq.data(), tokens, heads, head_dim,
                            heads * head_dim, pos.as<int32_t>(),
                            f.as<float>()));
    rope[i] = Read(*b, dq, tokens * heads * head_dim);
    ++i;
  }
  ExpectNear(emb[1], emb[0], 0, 0, "Embedding");
  ExpectNear(rope[1], rope[0], 0x1p-7, 2e-3, "Rope");  // device sincosf vs libm
}

// Qwen's additions: q/k norms over each head of a strided row (only the
// heads' values change; the columns between rows keep theirs) and biases.
TEST_F(CudaOpsTest, HeadNormsAndBiasesMatchTheCpu) {
  const int64_t tokens = 7, heads = 3, head_dim = 64, stride = 5 * head_dim;
  const std::vector<float> x = NormalBf16Values(tokens * stride, 8);
  const std::vector<float> w = NormalBf16Values(head_dim, 9);
  const std::vector<float> bias = NormalBf16Values(stride, 10);
  std::vector<std::vector<float>> normed(2), biased(2);
  int i = 0;
  for (Backend* b : {cpu_.get(), gpu_.get()}) {
    DeviceBuffer dx = Act(*b, x), dw = Buf(*b, w), db = Buf(*b, bias);
    OCTET_ASSERT_OK(b->RmsNormHeads(dx.data(), tokens, heads, head_dim, stride,
                                    dw.as<float>(), 1e-6f));
    normed[i] = Read(*b, dx, tokens * stride);
    DeviceBuffer dy = Act(*b, x);
    OCTET_ASSERT_OK(b->AddBias(dy.data(), db.as<float>(), tokens, stride));
    biased[i] = Read(*b, dy, tokens * stride);
    ++i;
  }
  ExpectNear(normed[1], normed[0], 0x1p-7, 1e-6, "RmsNormHeads");
  for (int64_t t = 0; t < tokens; ++t) {  // untouched past the heads
    for (int64_t c = heads * head_dim; c < stride; ++c) {
      ASSERT_EQ(normed[1][t * stride + c], x[t * stride + c]) << t << "," << c;
    }
  }
  ExpectNear(biased[1], biased[0], 0x1p-8, 0, "AddBias");  // one rounding
}

TEST_F(CudaOpsTest, Fp8RowGroupsMatchTheCpu) {
  // The FP8 linear steps with one scale per sequence: three sequences of 3,
  // 1 and 9 rows whose activations differ in size (the GPU's per-row kernels
  // and GEMM epilogue), then the same rows as one group (its single-tensor
  // kernels). Absmax, scales and codes are bit for bit the CPU's; the GEMM
  // output differs only by summation order and bfloat16 rounding.
  const int64_t in = 256, out = 64;
  const std::vector<int32_t> seq = {0, 0, 0, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2};
  const int64_t rows = static_cast<int64_t>(seq.size());
  std::vector<float> x = NormalBf16Values(rows * in, 8);
  for (int64_t j = 3 * in; j < 4 * in; ++j) x[j] *= 32.0f;       // exact
  for (int64_t j = 4 * in; j < rows * in; ++j) x[j] *= 0.0625f;  // exact
  const std::vector<uint8_t> codes = testing::RandomCodes(out * in, 9);
  for (int64_t groups : {int64_t{3}, int64_t{1}}) {
    std::vector<std::vector<float>> absmax(2), scale(2), y(2);
    std::vector<std::vector<uint8_t>> q(2, std::vector<uint8_t>(rows * in));
    int i = 0;
    for (Backend* b : {cpu_.get(), gpu_.get()}) {
      DeviceBuffer dx = Act(*b, x), dseq = Buf(*b, seq),
                   dy = Act(*b, std::vector<float>(rows * out));
      DeviceBuffer dmax = Buf(*b, std::vector<float>(groups, -1.0f)),
                   dscale = Buf(*b, std::vector<float>(groups, -1.0f)),
                   dq = Buf(*b, std::vector<uint8_t>(rows * in));
      LinearWeight w;
      w.out = out;
      w.in = in;
      w.dtype = DType::kE4m3;
      w.data = Buf(*b, codes);
      w.scale = Buf(*b, std::vector<float>{0.02f});
      const RowGroups g =
          groups == 1 ? RowGroups{} : RowGroups{groups, dseq.as<int32_t>()};
      OCTET_ASSERT_OK(b->AbsMax(dx.data(), rows, in, g, dmax.as<float>()));
      OCTET_ASSERT_OK(b->Quantize(dx.data(), rows, in, g, dmax.as<float>(),
                                  dq.as<uint8_t>(), dscale.as<float>()));
      OCTET_ASSERT_OK(b->GemmE4m3(dq.as<uint8_t>(), dscale.as<float>(), g, rows,
                                  w, dy.data()));
      absmax[i].resize(groups);
      scale[i].resize(groups);
      OCTET_ASSERT_OK(b->CopyToHost(absmax[i].data(), dmax.data(), groups * 4));
      OCTET_ASSERT_OK(
          b->CopyToHost(scale[i].data(), dscale.data(), groups * 4));
      OCTET_ASSERT_OK(b->CopyToHost(q[i].data(), dq.data(), rows * in));
      y[i] = Read(*b, dy, rows * out);
      ++i;
    }
    EXPECT_EQ(absmax[1], absmax[0]) << groups << " groups";
    EXPECT_EQ(scale[1], scale[0]) << groups << " groups";
    if (groups == 3) {
      EXPECT_NE(scale[0][0], scale[0][1]);
    }
    EXPECT_EQ(q[1], q[0]) << groups << " groups";
    float largest = 0.0f;
    for (float v : y[0]) largest = std::max(largest, std::fabs(v));
    ExpectNear(y[1], y[0], 0x1p-7, 1e-3 * largest, "GemmE4m3");
  }
}

TEST_F(CudaOpsTest, PagedAttentionMatchesTheCpu) {
  // Three sequences in one pass: a 19-token prefill, a decode at position
  // 40, and a 6-token chunk starting at 10; scrambled blocks of 4; GQA
  // (4 heads over 2 KV heads); with and without a sliding window.
  const int64_t heads = 4, kv_heads = 2, head_dim = 64, block = 4, blocks = 40;
  const std::vector<std::vector<int32_t>> tables = {
      {7, 2, 9, 0, 13},
      {1, 3, 5, 8, 10, 11, 12, 14, 15, 16, 17},
      {20, 4, 6, 21}};
  struct Seq {
    int64_t start, count;
  };
  const std::vector<Seq> seqs = {{0, 19}, {40, 1}, {10, 6}};
  std::vector<int32_t> positions, slots, token_seq, flat(3 * 11, 0);
  for (size_t s = 0; s < seqs.size(); ++s) {
    std::copy(tables[s].begin(), tables[s].end(), flat.begin() + s * 11);
  }
  // Cache contents: every position of every sequence up to its last token.
  const int64_t width = kv_heads * head_dim;
  std::vector<float> k_cache(blocks * block * width),
      v_cache(blocks * block * width);
  const std::vector<float> kv = NormalBf16Values(2 * blocks * block * width, 6);
  for (size_t s = 0; s < seqs.size(); ++s) {
    for (int64_t p = 0; p < seqs[s].start + seqs[s].count; ++p) {
      const int64_t slot = tables[s][p / block] * block + p % block;
      for (int64_t c = 0; c < width; ++c) {
        k_cache[slot * width + c] = kv[slot * width + c];
        v_cache[slot * width + c] = kv[(blocks * block + slot) * width + c];
      }
      if (p >= seqs[s].start) {
        positions.push_back(static_cast<int32_t>(p));
        slots.push_back(static_cast<int32_t>(slot));
        token_seq.push_back(static_cast<int32_t>(s));
      }
    }
  }
  const int64_t tokens = positions.size();
  const std::vector<float> q = NormalBf16Values(tokens * heads * head_dim, 7);
  for (int64_t window : {0, 5}) {
    std::vector<std::vector<float>> out(2);
    int i = 0;
    for (Backend* b : {cpu_.get(), gpu_.get()}) {
      DeviceBuffer dq = Act(*b, q), dk = Act(*b, k_cache),
                   dv = Act(*b, v_cache);
      DeviceBuffer dpos = Buf(*b, positions), dslots = Buf(*b, slots),
                   dseq = Buf(*b, token_seq), dtab = Buf(*b, flat),
                   o = Act(*b, std::vector<float>(tokens * heads * head_dim));
      AttentionMetadata meta{tokens,
                             dpos.as<int32_t>(),
                             dslots.as<int32_t>(),
                             dseq.as<int32_t>(),
                             dtab.as<int32_t>(),
                             11,
                             block,
                             window};
      OCTET_ASSERT_OK(b->Attention(dq.data(), heads * head_dim, heads, kv_heads,
                                   head_dim, meta, dk.data(), dv.data(),
                                   o.data()));
      out[i++] = Read(*b, o, tokens * heads * head_dim);
    }
    ExpectNear(out[1], out[0], 0x1p-6, 5e-3,
               window ? "windowed attention" : "attention");
  }
}

// The backend table checks planned attention's numbers against the
// reference; this checks that a prefill is planned at all where FlashInfer
// serves (else those cases would test octet's kernel twice), and that a
// decode, or shapes it does not serve, are left to octet's kernel.
TEST_F(CudaOpsTest, APrefillIsPlannedForFlashInferAndADecodeIsNot) {
  if (!cuda::FlashInferPrefill::Serves(32, 8, 128, CudaComputeCapability(0))) {
    GTEST_SKIP() << "FlashInfer's prefill is not built for this GPU (sm_89 "
                    "or sm_90a)";
  }
  const std::vector<int32_t> tables = {7, 2, 9, 0, 1, 3, 5, 8};
  AttentionMetadata meta;
  meta.block_size = 16;
  meta.full_heads = 32;
  meta.full_kv_heads = 8;
  const std::vector<int32_t> prefill_start = {0, 40}, prefill_context = {40};
  const AttentionBatch prefill{prefill_start, prefill_context, tables};
  absl::StatusOr<bool> planned = gpu_->PlanAttention(prefill, meta, 32, 8, 128);
  OCTET_ASSERT_OK(planned);
  EXPECT_TRUE(*planned);
  // A rank's slice of the heads (TP = 2), planned for TP = 1's.
  planned = gpu_->PlanAttention(prefill, meta, 16, 4, 128);
  OCTET_ASSERT_OK(planned);
  EXPECT_TRUE(*planned);
  const std::vector<int32_t> decode_start = {0, 1, 2}, decode_context = {9, 30};
  planned = gpu_->PlanAttention({decode_start, decode_context, tables}, meta,
                                32, 8, 128);
  OCTET_ASSERT_OK(planned);
  EXPECT_FALSE(*planned);
  planned = gpu_->PlanAttention(prefill, meta, 32, 8, 96);
  OCTET_ASSERT_OK(planned);
  EXPECT_FALSE(*planned);
  // TP = 16 over 8 KV heads: a rank's 2 query heads share a replicated KV
  // head, grouped unlike TP = 1's 4 per KV head.
  planned = gpu_->PlanAttention(prefill, meta, 2, 1, 128);
  OCTET_ASSERT_OK(planned);
  EXPECT_FALSE(*planned);
}

}  // namespace
}  // namespace octet
