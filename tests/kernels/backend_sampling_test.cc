// The sampling rules (kernels/sampling.h) through Backend::Sample: one set of
// tests that every backend's sampler passes. Built twice: as
// backend_sampling_test for the CPU backend (the host reference, label
// unit) and, with OCTET_SAMPLING_ON_CUDA, as cuda_sampling_test for the
// CUDA backend's kernels (label gpu; skipped without a usable GPU, which
// scripts/gpu-check.sh counts as a failure).
//
// Each test puts its logits on the backend's device, asks for a batch of
// rows, and checks what comes back: greedy and its tie and non-finite rules,
// the softmax at a temperature (counted over many draws), top-k and top-p
// cuts, the repetition penalty (once per distinct token), log-probabilities,
// determinism in (seed, position) whatever the batch, and, on vocabularies
// of real size, agreement with the host reference SampleOne: every token on
// the CPU, all but draws within rounding of a boundary on a GPU (whose sums
// run in a different order; kernels/cuda/sampling.h). Then the three calls
// Sample is made of (StageSample, SampleStaged, TakeSampled) as a decode
// graph uses them: a fixed, padded layout gives the tokens of the rows as
// given, and one capture of SampleStaged serves later stagings (on the CPU
// through tests/worker/capturing_backend.h, on CUDA as a CUDA graph).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <set>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/backend.h"
#include "kernels/sampling.h"
#include "tests/status_util.h"
#include "tests/worker/capturing_backend.h"

#ifdef OCTET_SAMPLING_ON_CUDA
#include "kernels/cuda/backend.h"
#include "tests/kernels/cuda_test_util.h"
#endif

namespace octet {
namespace {

constexpr float kNaN = NAN, kInf = INFINITY;

// The suite's name says which backend ran (ctest names are gtest names, and
// both programs hold the same tests).
#ifdef OCTET_SAMPLING_ON_CUDA
#define OCTET_SAMPLING_SUITE CudaSampling
#else
#define OCTET_SAMPLING_SUITE CpuSampling
#endif

class BackendSampling : public ::testing::Test {
 protected:
  void SetUp() override {
#ifdef OCTET_SAMPLING_ON_CUDA
    OCTET_REQUIRE_CUDA_DEVICE();
    absl::StatusOr<std::unique_ptr<Backend>> b = NewCudaBackend(0);
    ASSERT_TRUE(b.ok()) << b.status();
    backend_ = *std::move(b);
#else
    backend_ = NewCpuBackend();
#endif
  }

  // Samples `rows` from logits [*][vocab] (host), through the backend.
  std::vector<SampledToken> Sample(const std::vector<float>& logits,
                                   int64_t vocab,
                                   const std::vector<SampleRow>& rows) {
    absl::StatusOr<DeviceBuffer> d =
        backend_->Allocate(logits.size() * sizeof(float));
    EXPECT_TRUE(d.ok()) << d.status();
    if (!d.ok()) return {};
    OCTET_EXPECT_OK(backend_->CopyToDevice(d->data(), logits.data(),
                                           logits.size() * sizeof(float)));
    std::vector<SampledToken> out(rows.size());
    const absl::Status s =
        backend_->Sample(d->as<float>(), vocab, rows, out.data());
    EXPECT_TRUE(s.ok()) << s;
    return out;
  }
  // `values` on the backend's device.
  DeviceBuffer Upload(const std::vector<float>& values) {
    absl::StatusOr<DeviceBuffer> d =
        backend_->Allocate(values.size() * sizeof(float));
    EXPECT_TRUE(d.ok()) << d.status();
    if (!d.ok()) return DeviceBuffer();
    OCTET_EXPECT_OK(backend_->CopyToDevice(d->data(), values.data(),
                                           values.size() * sizeof(float)));
    return *std::move(d);
  }
  std::vector<int32_t> Ids(const std::vector<float>& logits, int64_t vocab,
                           const std::vector<SampleRow>& rows) {
    std::vector<int32_t> ids;
    for (const SampledToken& t : Sample(logits, vocab, rows)) {
      ids.push_back(t.id);
    }
    return ids;
  }

  std::unique_ptr<Backend> backend_;
};
using OCTET_SAMPLING_SUITE = BackendSampling;

SampleRow Row(int64_t logits_row, SamplingParams params, int64_t position) {
  return SampleRow{
      .logits_row = logits_row, .params = params, .position = position};
}

// Rows 0..n-1 of one logits row, at positions 0..n-1.
std::vector<SampleRow> Draws(SamplingParams params, int n,
                             int64_t logits_row = 0) {
  std::vector<SampleRow> rows;
  for (int i = 0; i < n; ++i) rows.push_back(Row(logits_row, params, i));
  return rows;
}

TEST_F(OCTET_SAMPLING_SUITE, GreedyFollowsTheArgmaxRule) {
  // Ties go to the lowest id, NaN is never largest, -inf is a value, no
  // number at all gives 0.
  const std::vector<std::vector<float>> cases = {
      {0.1f, 3.0f, -2.0f, 3.0f}, {kNaN, 1.0f, kNaN, 0.0f},
      {kNaN, kNaN, kNaN, kNaN},  {kNaN, -kInf, -kInf, kNaN},
      {-1.0f, kInf, kInf, 2.0f}, {-0.0f, 0.0f, -1.0f, -3.0f}};
  const std::vector<int32_t> want = {1, 1, 0, 1, 1, 0};
  std::vector<float> logits;
  std::vector<SampleRow> rows;
  for (size_t i = 0; i < cases.size(); ++i) {
    logits.insert(logits.end(), cases[i].begin(), cases[i].end());
    rows.push_back(Row(i, {.temperature = 0.0f}, 0));
  }
  EXPECT_EQ(Ids(logits, 4, rows), want);
}

TEST_F(OCTET_SAMPLING_SUITE, DrawsFollowTheSoftmaxAtTheTemperature) {
  const std::vector<float> logits = {std::log(0.7f), std::log(0.2f),
                                     std::log(0.1f)};
  const int n = 40000;
  for (auto [temperature, want0] :
       {std::pair{1.0f, 0.7}, {0.5f, 0.49 / 0.54}}) {
    std::vector<int> counts(3);
    for (int32_t id :
         Ids(logits, 3, Draws({.temperature = temperature, .seed = 11}, n))) {
      ASSERT_TRUE(id >= 0 && id < 3) << id;
      counts[id]++;
    }
    // Binomial standard deviations are below 0.0025; 0.01 is four of them.
    EXPECT_NEAR(counts[0] / double(n), want0, 0.01) << temperature;
    if (temperature == 1.0f) {
      EXPECT_NEAR(counts[1] / double(n), 0.2, 0.01);
      EXPECT_NEAR(counts[2] / double(n), 0.1, 0.01);
    }
  }
}

TEST_F(OCTET_SAMPLING_SUITE, TopKAndTopPCutTheTail) {
  const std::vector<float> logits = {std::log(0.05f), std::log(0.3f),
                                     std::log(0.15f), std::log(0.5f)};
  auto seen = [&](SamplingParams p, int n) {
    std::set<int32_t> ids;
    for (int32_t id : Ids(logits, 4, Draws(p, n))) ids.insert(id);
    return ids;
  };
  EXPECT_EQ(seen({.temperature = 1.0f, .top_k = 2, .seed = 1}, 4000),
            (std::set<int32_t>{1, 3}));
  // 0.5 + 0.3 >= 0.75: the nucleus is the two most likely.
  EXPECT_EQ(seen({.temperature = 1.0f, .top_p = 0.75f, .seed = 2}, 4000),
            (std::set<int32_t>{1, 3}));
  EXPECT_EQ(seen({.temperature = 1.0f, .top_k = 1, .seed = 3}, 200),
            (std::set<int32_t>{3}));
  EXPECT_EQ(seen({.temperature = 1.0f, .top_p = 1e-6f, .seed = 4}, 200),
            (std::set<int32_t>{3}));
  // Both: top_k first, then the nucleus of what is left.
  EXPECT_EQ(
      seen({.temperature = 1.0f, .top_k = 3, .top_p = 0.6f, .seed = 5}, 4000),
      (std::set<int32_t>{1, 3}));
  EXPECT_EQ(seen({.temperature = 1.0f, .seed = 6}, 4000),
            (std::set<int32_t>{0, 1, 2, 3}));
}

TEST_F(OCTET_SAMPLING_SUITE, ATokenDependsOnSeedAndPositionOnly) {
  const int64_t vocab = 1000;
  std::vector<float> logits(2 * vocab);
  for (int64_t i = 0; i < vocab; ++i) {
    logits[i] = std::sin(i * 0.37f);
    logits[vocab + i] = std::cos(i * 0.11f);
  }
  const SamplingParams p{.temperature = 0.8f, .top_p = 0.9f, .seed = 42};
  const std::vector<int32_t> alone = Ids(logits, vocab, Draws(p, 200));
  EXPECT_EQ(Ids(logits, vocab, Draws(p, 200)), alone);
  // The same rows again, each batched with others: a greedy row, another
  // seed, another logits row.
  std::vector<SampleRow> mixed;
  for (int i = 0; i < 200; ++i) {
    mixed.push_back(Row(1, {.temperature = 0.0f}, i));
    mixed.push_back(Row(0, p, i));
    mixed.push_back(
        Row(0, {.temperature = 0.8f, .top_p = 0.9f, .seed = 43}, i));
    mixed.push_back(Row(1, {.temperature = 1.0f, .top_k = 5, .seed = 42}, i));
  }
  const std::vector<int32_t> batched = Ids(logits, vocab, mixed);
  ASSERT_EQ(batched.size(), mixed.size());
  int other_seed_differs = 0;
  for (int i = 0; i < 200; ++i) {
    EXPECT_EQ(batched[4 * i + 1], alone[i]) << i;
    other_seed_differs += batched[4 * i + 2] != alone[i];
  }
  EXPECT_GT(other_seed_differs, 100);
  // ...and the positions' draws differ (not one token over and over).
  EXPECT_GT(std::set<int32_t>(alone.begin(), alone.end()).size(), 10u);
}

TEST_F(OCTET_SAMPLING_SUITE, NonFiniteLogitsFollowTheGreedyRule) {
  const std::vector<float> logits = {kNaN, 0.0f, kNaN,  0.0f,  //
                                     1.0f, kInf, kNaN,  kInf,  //
                                     kNaN, kNaN, -kInf, kNaN,  //
                                     kNaN, kNaN, kNaN,  kNaN};
  std::vector<SampleRow> rows;
  for (int i = 0; i < 50; ++i) {
    for (int64_t r = 0; r < 4; ++r) {
      rows.push_back(Row(r, {.temperature = 1.0f, .seed = 7}, i));
    }
  }
  const std::vector<int32_t> ids = Ids(logits, 4, rows);
  ASSERT_EQ(ids.size(), rows.size());
  for (int i = 0; i < 50; ++i) {
    // NaN is never drawn; the rest share the mass.
    EXPECT_TRUE(ids[4 * i] == 1 || ids[4 * i] == 3) << ids[4 * i];
    // An infinite logit takes all the mass (the first one on ties).
    EXPECT_EQ(ids[4 * i + 1], 1);
    // Only -inf is left: the first -inf; no number at all: index 0.
    EXPECT_EQ(ids[4 * i + 2], 2);
    EXPECT_EQ(ids[4 * i + 3], 0);
  }
}

TEST_F(OCTET_SAMPLING_SUITE, RepetitionPenaltyLowersEachRepeatedTokenOnce) {
  // 2.0 / 1.25 = 1.6 falls below 1.9; -1 * 1.25 = -1.25. A token three
  // times in the history is penalized once; ids outside the vocabulary are
  // ignored.
  const std::vector<float> logits = {2.0f, 1.9f, -1.0f, -3.0f};
  const std::vector<int32_t> history = {0, 0, 2, 0, -5, 77};
  SampleRow row = Row(0, {.temperature = 0.0f}, 0);
  row.repetition_penalty = 1.25f;
  row.history = history;
  row.logprob = true;
  SampleRow plain = Row(0, {.temperature = 0.0f}, 0);
  plain.logprob = true;
  const std::vector<SampledToken> out = Sample(logits, 4, {row, plain});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].id, 1);
  EXPECT_EQ(out[1].id, 0);
  // log softmax of {1.6, 1.9, -1.25, -3} at 1 and of the logits at 0.
  auto log_softmax = [](std::vector<double> x, int id) {
    double z = 0;
    for (double v : x) z += std::exp(v);
    return x[id] - std::log(z);
  };
  EXPECT_NEAR(out[0].logprob, log_softmax({1.6, 1.9, -1.25, -3.0}, 1), 1e-6);
  EXPECT_NEAR(out[1].logprob, log_softmax({2.0, 1.9, -1.0, -3.0}, 0), 1e-6);
}

TEST_F(OCTET_SAMPLING_SUITE, LogProbsOfNonFiniteRows) {
  const std::vector<float> logits = {1.0f, kInf,  kNaN, kInf,  //
                                     kNaN, -kInf, kNaN, -kInf};
  std::vector<SampleRow> rows = {Row(0, {.temperature = 0.0f}, 0),
                                 Row(1, {.temperature = 0.0f}, 0)};
  for (SampleRow& r : rows) r.logprob = true;
  const std::vector<SampledToken> out = Sample(logits, 4, rows);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].id, 1);
  EXPECT_FLOAT_EQ(out[0].logprob, -std::log(2.0f));  // two +inf share it
  EXPECT_EQ(out[1].id, 1);
  EXPECT_EQ(out[1].logprob, -kInf);  // no mass anywhere
}

// Real vocabulary sizes, every kind of row, against the host reference.
TEST_F(OCTET_SAMPLING_SUITE, AgreesWithTheHostReferenceOnRealVocabularies) {
  for (int64_t vocab : {32000, 128256}) {
    const int64_t logit_rows = 4;
    std::vector<float> logits(logit_rows * vocab);
    uint64_t state = 1;
    for (float& v : logits) {
      state = SplitMix64(state);
      v = static_cast<float>((state >> 40) % 2000) / 100.0f - 10.0f;  // ties
    }
    std::vector<int32_t> history = {5, 17, 17, 31999, 4, 100};
    const std::vector<SamplingParams> params = {
        {.temperature = 0.0f},
        {.temperature = 1.0f, .seed = 1},
        {.temperature = 0.7f, .top_p = 0.9f, .seed = 2},
        {.temperature = 1.3f, .top_k = 50, .seed = 3},
        {.temperature = 0.9f, .top_k = 40, .top_p = 0.95f, .seed = 4}};
    std::vector<SampleRow> rows;
    for (int i = 0; i < 40; ++i) {
      for (const SamplingParams& p : params) {
        SampleRow r = Row(i % logit_rows, p, 1000 + i);
        r.repetition_penalty = i % 2 == 0 ? 1.0f : 1.3f;
        r.history = history;
        r.logprob = true;
        rows.push_back(r);
      }
    }
    const std::vector<SampledToken> got = Sample(logits, vocab, rows);
    ASSERT_EQ(got.size(), rows.size());
    int differ = 0;
    double max_logprob_err = 0;
    for (size_t i = 0; i < rows.size(); ++i) {
      const SampledToken want =
          SampleOne({logits.data() + rows[i].logits_row * vocab,
                     static_cast<size_t>(vocab)},
                    rows[i]);
      if (got[i].id != want.id) {
        ++differ;
        continue;
      }
      max_logprob_err = std::max(
          max_logprob_err, double(std::fabs(got[i].logprob - want.logprob)));
    }
#ifdef OCTET_SAMPLING_ON_CUDA
    // Sums in another order move a boundary by rounding: rarely a draw.
    EXPECT_LE(differ, 2) << "vocab " << vocab;
#else
    EXPECT_EQ(differ, 0) << "vocab " << vocab;
#endif
    EXPECT_LT(max_logprob_err, 1e-4) << "vocab " << vocab;
    std::printf(
        "[ measured ] vocab %lld: %d of %zu tokens differ from the host "
        "reference; max |logprob error| %.3g\n",
        static_cast<long long>(vocab), differ, rows.size(), max_logprob_err);
  }
}

// Logits [rows][vocab] in [-10, 10) with many ties, from `seed`.
std::vector<float> TiedLogits(int64_t rows, int64_t vocab, uint64_t seed) {
  std::vector<float> logits(rows * vocab);
  for (float& v : logits) {
    seed = SplitMix64(seed);
    v = static_cast<float>((seed >> 40) % 2000) / 100.0f - 10.0f;
  }
  return logits;
}

// Every kind of row over `logit_rows` logit rows: greedy, drawn, top-k,
// top-p, penalized, with log-probabilities; positions from `position`.
std::vector<SampleRow> MixedRows(int n, int64_t logit_rows, int64_t position,
                                 absl::Span<const int32_t> history) {
  const std::vector<SamplingParams> params = {
      {.temperature = 0.0f},
      {.temperature = 1.0f, .seed = 1},
      {.temperature = 0.7f, .top_p = 0.9f, .seed = 2},
      {.temperature = 1.3f, .top_k = 50, .seed = 3}};
  std::vector<SampleRow> rows;
  for (int i = 0; i < n; ++i) {
    SampleRow r = Row(i % logit_rows, params[i % params.size()], position + i);
    r.repetition_penalty = i % 3 == 2 ? 1.3f : 1.0f;
    r.history = history;
    r.logprob = i % 2 == 1;
    rows.push_back(r);
  }
  return rows;
}

// A decode graph stages its rows padded to its bucket, every row sorted or
// none (SampleLayout): their tokens are those of the rows staged as given,
// bit for bit (the same kernels; sorting a greedy row changes nothing).
TEST_F(OCTET_SAMPLING_SUITE, AFixedLayoutSamplesWhatTheRowsAsGivenDo) {
  const int64_t vocab = 1000, logit_rows = 5;
  const std::vector<float> logits = TiedLogits(logit_rows, vocab, 7);
  const std::vector<int32_t> history = {3, 999, 3, 500, 12};
  DeviceBuffer d = Upload(logits);
  for (bool draws : {true, false}) {
    std::vector<SampleRow> rows = MixedRows(5, logit_rows, 40, history);
    if (!draws) {
      for (SampleRow& r : rows) r.params.temperature = 0.0f;
    }
    const std::vector<SampledToken> want = Sample(logits, vocab, rows);
    for (int64_t padded : {5, 8}) {
      absl::StatusOr<SampleStaging> staged = backend_->StageSample(
          vocab, rows, {.padded_rows = padded, .reserve_rows = 16});
      ASSERT_TRUE(staged.ok()) << staged.status();
      EXPECT_EQ(staged->rows, padded);
      EXPECT_EQ(staged->sorts, draws);
      OCTET_ASSERT_OK(backend_->SampleStaged(d.as<float>(), vocab));
      std::vector<SampledToken> got(rows.size());
      OCTET_ASSERT_OK(backend_->TakeSampled(absl::MakeSpan(got)));
      for (size_t i = 0; i < rows.size(); ++i) {
        EXPECT_EQ(got[i].id, want[i].id) << "row " << i << " of " << padded;
        EXPECT_EQ(got[i].logprob, want[i].logprob) << "row " << i;
      }
    }
  }
}

TEST_F(OCTET_SAMPLING_SUITE, AStagingThatCannotHoldIsRefused) {
  const std::vector<SampleRow> three = Draws({.temperature = 0.0f}, 3);
  auto code = [&](int64_t vocab, absl::Span<const SampleRow> rows,
                  SampleLayout layout) {
    return backend_->StageSample(vocab, rows, layout).status().code();
  };
  EXPECT_EQ(code(4, three, {.padded_rows = 2}),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(0, three, {}), absl::StatusCode::kInvalidArgument);
  std::vector<SampleRow> bad = three;
  bad[1].logits_row = -1;
  EXPECT_EQ(code(4, bad, {}), absl::StatusCode::kInvalidArgument);
  // More tokens than were staged.
  DeviceBuffer d = Upload({1.0f, 2.0f, 3.0f, 4.0f});
  ASSERT_TRUE(backend_->StageSample(4, three, {}).ok());
  OCTET_ASSERT_OK(backend_->SampleStaged(d.as<float>(), 4));
  std::vector<SampledToken> four(4);
  EXPECT_EQ(backend_->TakeSampled(absl::MakeSpan(four)).code(),
            absl::StatusCode::kInvalidArgument);
}

// What a decode graph relies on: SampleStaged captured once samples, at
// each replay, whatever was staged since in the same shape, as long as no
// staging moved the buffers; histories that grow a token a step do not.
TEST_F(OCTET_SAMPLING_SUITE, ACapturedSamplingServesLaterStagingsOfItsShape) {
#ifdef OCTET_SAMPLING_ON_CUDA
  Backend& b = *backend_;  // CUDA graphs
#else
  testing::CapturingBackend capturing(NewCpuBackend());
  Backend& b = capturing;
#endif
  ASSERT_TRUE(b.can_capture());
  const int64_t vocab = 32000, logit_rows = 6;
  const SampleLayout layout{.padded_rows = 8, .reserve_rows = 8};
  absl::StatusOr<DeviceBuffer> d = b.Allocate(logit_rows * vocab * 4);
  ASSERT_TRUE(d.ok()) << d.status();
  std::vector<int32_t> history = {5, 17, 17, 31999, 4, 100};
  ASSERT_TRUE(
      b.StageSample(vocab, MixedRows(6, logit_rows, 0, history), layout).ok());
  OCTET_ASSERT_OK(b.BeginCapture());
  OCTET_ASSERT_OK(b.SampleStaged(d->as<float>(), vocab));
  absl::StatusOr<std::unique_ptr<CapturedWork>> work = b.EndCapture();
  ASSERT_TRUE(work.ok()) << work.status();
  for (int step = 0; step < 4; ++step) {
    const std::vector<float> logits = TiedLogits(logit_rows, vocab, 11 + step);
    OCTET_ASSERT_OK(
        b.CopyToDevice(d->data(), logits.data(), logits.size() * 4));
    history.push_back(7 * step);
    const std::vector<SampleRow> rows =
        MixedRows(6, logit_rows, 100 * step, history);
    std::vector<SampledToken> want(rows.size());
    OCTET_ASSERT_OK(b.Sample(d->as<float>(), vocab, rows, want.data()));
    absl::StatusOr<SampleStaging> staged = b.StageSample(vocab, rows, layout);
    ASSERT_TRUE(staged.ok()) << staged.status();
    ASSERT_FALSE(staged->moved) << "step " << step;
    EXPECT_TRUE(staged->sorts);
    OCTET_ASSERT_OK((*work)->Replay());
    std::vector<SampledToken> got(rows.size());
    OCTET_ASSERT_OK(b.TakeSampled(absl::MakeSpan(got)));
    for (size_t i = 0; i < rows.size(); ++i) {
      EXPECT_EQ(got[i].id, want[i].id) << "step " << step << " row " << i;
      EXPECT_EQ(got[i].logprob, want[i].logprob) << "step " << step;
    }
  }
}

}  // namespace
}  // namespace octet
