// tokenizer.json (model/bpe_tokenizer.h) on a tokenizer small enough to
// work out by hand: byte-level characters, merges by rank, added tokens
// split out first, the template's BOS, decoding that holds back a token
// ending mid-character; lossy UTF-8; and a clear error for each part octet
// does not implement. The agreement with Hugging Face's own library on real
// configurations is tests/model/hf_tokenizers_oracle.py.
#include "model/bpe_tokenizer.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace octet {
namespace {

using Json = nlohmann::json;

// GPT-2's byte alphabet writes byte 0x20 as U+0120 'Ġ', and the bytes of
// U+1F600 (F0 9F 98 80) as 'ð' 'Ł' 'ĺ' 'Ģ'.
Json SmallTokenizer() {
  Json vocab = Json::object();
  const std::vector<std::string> tokens = {"t",  "h",  "e",  "Ġ",  "c",  "a",
                                           "ð",  "Ł",  "ĺ",  "Ģ",  "th", "the",
                                           "Ġc", "ðŁ", "ĺĢ", "<s>"};
  for (size_t i = 0; i < tokens.size(); ++i) vocab[tokens[i]] = i;
  return Json{
      {"model",
       {{"type", "BPE"},
        {"vocab", vocab},
        // (Json::array: a list of string pairs would read as an object.)
        {"merges",
         Json::array({Json::array({"t", "h"}), Json::array({"th", "e"}),
                      Json::array({"Ġ", "c"}), Json::array({"ð", "Ł"})})},
        {"ignore_merges", false}}},
      {"added_tokens",
       {{{"id", 100}, {"content", "<|eot|>"}, {"special", true}},
        {{"id", 15}, {"content", "<s>"}, {"special", true}}}},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "ByteLevel"},
        {"add_prefix_space", false},
        {"use_regex", true}}},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single",
         {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
          {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
        {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {15}}}}}}}},
      {"decoder", {{"type", "ByteLevel"}}}};
}

std::unique_ptr<Tokenizer> Load(const Json& j) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> t =
      LoadTokenizerJson(j.dump(), "t/tokenizer.json");
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *std::move(t) : nullptr;
}

TEST(BpeTokenizer, MergesByRankAfterAddedTokensAndTheRegexSplit) {
  const std::unique_ptr<Tokenizer> t = Load(SmallTokenizer());
  ASSERT_NE(t, nullptr);
  // "the" | " cat" | "😀": merged to the | Ġc a t | ðŁ ĺ Ģ ("ĺ Ģ" has no
  // merge, though its token exists: BPE only merges what merges list).
  EXPECT_EQ(t->Encode("the cat\xF0\x9F\x98\x80", false),
            (std::vector<int64_t>{11, 12, 5, 0, 13, 8, 9}));
  // The template's BOS, and an added token matched inside a word.
  EXPECT_EQ(t->Encode("the<|eot|>the", true),
            (std::vector<int64_t>{15, 11, 100, 11}));
  EXPECT_EQ(t->bos_id(), 15);
  EXPECT_EQ(t->vocab_size(), 101);
  // Special tokens decode to nothing; unknown ids to U+FFFD.
  EXPECT_EQ(t->Decode({15, 11, 100, 12, 5, 0, 50}), "the cat\xEF\xBF\xBD");
}

TEST(BpeTokenizer, ATokenEndingMidCharacterWaitsForTheRest) {
  const std::unique_ptr<Tokenizer> t = Load(SmallTokenizer());
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->Decode({13}), "\xEF\xBF\xBD");  // F0 9F alone
  EXPECT_EQ(t->Decode({13, 8, 9}), "\xF0\x9F\x98\x80");
  TextStream stream(*t);
  std::string text;
  for (int64_t id : {11, 13, 8, 9}) text += stream.Add(id);
  text += stream.Finish();
  EXPECT_EQ(text, "the\xF0\x9F\x98\x80");
}

TEST(BpeTokenizer, InvalidUtf8IsReplacedAsRustDoes) {
  EXPECT_EQ(Utf8Lossy("a\xC3\xA9z"), "a\xC3\xA9z");
  // A truncated sequence is one U+FFFD; bytes that start nothing are one each.
  EXPECT_EQ(Utf8Lossy("\xF0\x9F\x98"), "\xEF\xBF\xBD");
  EXPECT_EQ(Utf8Lossy("\xF0\x9F\x98x"), "\xEF\xBF\xBDx");
  EXPECT_EQ(Utf8Lossy("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(Utf8Lossy("\xE0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD");  // overlong
  EXPECT_EQ(Utf8Lossy("\xED\xA0\x80"),                           // a surrogate
            "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  // Text to encode is made valid first, so it always encodes.
  const std::unique_ptr<Tokenizer> t = Load(SmallTokenizer());
  ASSERT_NE(t, nullptr);
  EXPECT_FALSE(t->Encode("the\xFF", false).empty());
}

// A split pattern that matches the empty string at the end of the text
// (here `x*$`; Llama 3's `\s*(?!\S)` alternative can too) splits nothing
// off there. Found by the fuzzer: the step past such a match read one byte
// beyond the text.
TEST(BpeTokenizer, AnEmptyMatchAtTheEndSplitsNothing) {
  Json j = SmallTokenizer();
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers",
                         {{{"type", "Split"},
                           {"pattern", {{"Regex", "x*$"}}},
                           {"behavior", "Isolated"},
                           {"invert", false}},
                          {{"type", "ByteLevel"},
                           {"add_prefix_space", false},
                           {"use_regex", false}}}}};
  const std::unique_ptr<Tokenizer> t = Load(j);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->Encode("the", false), (std::vector<int64_t>{11}));
  EXPECT_EQ(t->Encode("", false), (std::vector<int64_t>{}));
}

TEST(BpeTokenizer, WhatOctetDoesNotImplementIsAnErrorNamingIt) {
  struct Case {
    std::string pointer;  // JSON pointer to replace
    Json value;
    std::string fragment;
  };
  const std::vector<Case> cases = {
      {"/model/type", "WordPiece", "model: type 'WordPiece'"},
      {"/model/merges/0", Json::array({"t", "x"}),
       "merges[0] 't x' names a token"},
      {"/model/merges/1", 7, "merges[1] is not a pair"},
      {"/model/byte_fallback", true, "byte_fallback"},
      {"/pre_tokenizer", {{"type", "Metaspace"}}, "type 'Metaspace'"},
      {"/pre_tokenizer",
       {{"type", "Split"},
        {"behavior", "Removed"},
        {"pattern", {{"Regex", "a"}}}},
       "behavior 'Removed'"},
      {"/pre_tokenizer",
       {{"type", "Split"},
        {"behavior", "Isolated"},
        {"pattern", {{"Regex", "(unclosed"}}}},
       "does not compile"},
      {"/normalizer", {{"type", "Lowercase"}}, "type 'Lowercase'"},
      {"/decoder", {{"type", "WordPiece"}}, "decoder: type 'WordPiece'"},
      {"/post_processor", {{"type", "BertProcessing"}}, "BertProcessing"},
      {"/added_tokens/0/content", "", "non-empty content"},
      {"/model/vocab", Json::object(), "non-empty object"},
      {"/model/vocab/t", "zero", "the id of 't'"},
      {"/model/vocab/t", 2147483000, "must be (nearly) dense"},
  };
  for (const Case& c : cases) {
    Json j = SmallTokenizer();
    j[Json::json_pointer(c.pointer)] = c.value;
    absl::StatusOr<std::unique_ptr<Tokenizer>> t =
        LoadTokenizerJson(j.dump(), "t/tokenizer.json");
    ASSERT_FALSE(t.ok()) << c.pointer;
    const std::string message(t.status().message());
    EXPECT_NE(message.find("t/tokenizer.json"), std::string::npos) << message;
    EXPECT_NE(message.find(c.fragment), std::string::npos)
        << c.pointer << ": '" << message << "' lacks '" << c.fragment << "'";
  }
  EXPECT_FALSE(LoadTokenizerJson("{", "x").ok());
  EXPECT_FALSE(LoadTokenizerJson("[1]", "x").ok());
}

}  // namespace
}  // namespace octet
