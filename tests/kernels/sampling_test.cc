// Token sampling (kernels/sampling.h): greedy, temperature, top-k, top-p,
// and the same seed giving the same tokens.
#include "kernels/sampling.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <vector>

namespace octet {
namespace {

TEST(Sampler, GreedyTakesTheArgmaxAndTheLowestIdOnTies) {
  Sampler s({.temperature = 0.0f});
  EXPECT_EQ(s.Sample(std::vector<float>{0.1f, 3.0f, -2.0f, 3.0f}, 0), 1);
  EXPECT_EQ(s.Sample(std::vector<float>{-1.0f}, 1), 0);
}

TEST(ArgmaxIndex, FirstLargestNaNNeverAllNaNGivesZero) {
  const float nan = NAN, inf = INFINITY;
  EXPECT_EQ(ArgmaxIndex(std::vector<float>{1, 3, 3, 2}.data(), 4), 1);
  EXPECT_EQ(ArgmaxIndex(std::vector<float>{nan, 1, nan, 0}.data(), 4), 1);
  EXPECT_EQ(ArgmaxIndex(std::vector<float>{nan, nan}.data(), 2), 0);
  EXPECT_EQ(ArgmaxIndex(std::vector<float>{-inf, -inf, -inf}.data(), 3), 0);
  EXPECT_EQ(ArgmaxIndex(std::vector<float>{nan, -inf, -inf}.data(), 3), 1);
  EXPECT_EQ(ArgmaxIndex(std::vector<float>{-1, inf, inf}.data(), 3), 1);
}

TEST(Sampler, FollowsTheSoftmaxAtTheTemperature) {
  const std::vector<float> logits = {std::log(0.7f), std::log(0.2f),
                                     std::log(0.1f)};
  Sampler s({.temperature = 1.0f, .seed = 11});
  std::vector<int> counts(3);
  const int n = 40000;
  for (int i = 0; i < n; ++i) counts[s.Sample(logits, i)]++;
  // Binomial standard deviations are below 0.0025; 0.01 is four of them.
  EXPECT_NEAR(counts[0] / double(n), 0.7, 0.01);
  EXPECT_NEAR(counts[1] / double(n), 0.2, 0.01);
  EXPECT_NEAR(counts[2] / double(n), 0.1, 0.01);
  // A temperature of 0.5 squares the odds: 0.49 : 0.04 : 0.01.
  Sampler cold({.temperature = 0.5f, .seed = 12});
  std::vector<int> c2(3);
  for (int i = 0; i < n; ++i) c2[cold.Sample(logits, i)]++;
  EXPECT_NEAR(c2[0] / double(n), 0.49 / 0.54, 0.01);
}

TEST(Sampler, TopKAndTopPCutTheTail) {
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f),
                                     std::log(0.15f), std::log(0.05f)};
  Sampler k({.temperature = 1.0f, .top_k = 2, .seed = 1});
  Sampler p({.temperature = 1.0f, .top_p = 0.75f, .seed = 2});
  for (int i = 0; i < 5000; ++i) {
    EXPECT_LT(k.Sample(logits, i), 2);
    EXPECT_LT(p.Sample(logits, i), 2);  // 0.5 + 0.3 >= 0.75
  }
  Sampler one({.temperature = 1.0f, .top_k = 1, .seed = 3});
  Sampler tiny_p({.temperature = 1.0f, .top_p = 1e-6f, .seed = 4});
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(one.Sample(logits, i), 0);
    EXPECT_EQ(tiny_p.Sample(logits, i), 0);
  }
}

TEST(Sampler, SameSeedSameTokens) {
  std::vector<float> logits(1000);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = std::sin(i * 0.37f);
  Sampler a({.temperature = 0.8f, .top_p = 0.9f, .seed = 42});
  Sampler b({.temperature = 0.8f, .top_p = 0.9f, .seed = 42});
  Sampler c({.temperature = 0.8f, .top_p = 0.9f, .seed = 43});
  int differ = 0;
  for (int i = 0; i < 200; ++i) {
    const int64_t x = a.Sample(logits, i), y = b.Sample(logits, i),
                  z = c.Sample(logits, i);
    EXPECT_EQ(x, y);
    differ += x != z;
  }
  EXPECT_GT(differ, 100);
}

// The draw is a function of (seed, position) alone: a fresh sampler asked
// for position 17 after nothing else -- a sequence resumed on a new worker
// group -- chooses what one that sampled 0..16 first chose there.
TEST(Sampler, APositionSamplesTheSameWhateverCameBefore) {
  std::vector<float> logits(1000);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = std::sin(i * 0.37f);
  const SamplingParams params{.temperature = 1.0f, .seed = 99};
  Sampler first(params);
  std::vector<int64_t> run;
  for (int i = 0; i < 40; ++i) run.push_back(first.Sample(logits, i));
  for (int i : {17, 39, 0}) {
    EXPECT_EQ(Sampler(params).Sample(logits, i), run[i]) << i;
  }
  // ...and the positions' draws differ (not one token over and over).
  EXPECT_GT(std::set<int64_t>(run.begin(), run.end()).size(), 10u);
}

TEST(Sampler, NonFiniteLogitsFollowTheGreedyRule) {
  const float nan = std::nanf("");
  Sampler s({.temperature = 1.0f, .seed = 7});
  for (int i = 0; i < 50; ++i) {
    // NaN is never drawn; the rest share the mass.
    const int64_t t = s.Sample(std::vector<float>{nan, 0.0f, nan, 0.0f}, i);
    EXPECT_TRUE(t == 1 || t == 3) << t;
    // An infinite logit takes all the mass (the first one on ties).
    EXPECT_EQ(s.Sample(std::vector<float>{1.0f, INFINITY, nan, INFINITY}, i),
              1);
    // Only -inf is left: the first -inf; no number at all: index 0 (both
    // as ArgmaxIndex).
    EXPECT_EQ(s.Sample(std::vector<float>{nan, nan, -INFINITY}, i), 2);
    EXPECT_EQ(s.Sample(std::vector<float>{nan, nan, nan}, i), 0);
  }
}

TEST(Sampler, ValidatesParameters) {
  EXPECT_TRUE(ValidateSamplingParams({}).ok());
  EXPECT_FALSE(ValidateSamplingParams({.temperature = -1.0f}).ok());
  EXPECT_FALSE(ValidateSamplingParams({.temperature = NAN}).ok());
  EXPECT_FALSE(ValidateSamplingParams({.top_k = -1}).ok());
  EXPECT_FALSE(ValidateSamplingParams({.top_p = 0.0f}).ok());
  EXPECT_FALSE(ValidateSamplingParams({.top_p = 1.5f}).ok());
  EXPECT_NE(std::string(ValidateSamplingParams({.top_p = 2.0f}).message())
                .find("top_p"),
            std::string::npos);
}

}  // namespace
}  // namespace octet
