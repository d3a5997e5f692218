// The safetensors reader and writer: round trips, and every way a header can
// lie, each rejected with an error that names the file (and the tensor).
#include "model/safetensors.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace octet {
namespace {

std::string TempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          absl::StrCat("octet_st_", ::getpid(), "_", name))
      .string();
}

// A file from a header text and a data section, as a writer would lay it out
// (or as a liar would).
std::string Raw(const std::string& header, const std::string& data,
                int64_t claimed_len = -1) {
  const uint64_t len = claimed_len < 0 ? header.size() : claimed_len;
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>(len >> (8 * i));
  return out + header + data;
}

absl::Status ParseOf(const std::string& file) {
  return ParseSafetensorsHeader(file, "x.safetensors").status();
}

void ExpectRejected(const std::string& file, const std::string& fragment) {
  absl::Status s = ParseOf(file);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(std::string(s.message()).find("x.safetensors"), std::string::npos)
      << s;
  EXPECT_NE(std::string(s.message()).find(fragment), std::string::npos)
      << "message '" << s.message() << "' lacks '" << fragment << "'";
}

TEST(Safetensors, WriteThenOpenRoundTrips) {
  const std::string path = TempPath("roundtrip.safetensors");
  std::vector<float> a = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, 8.0f};
  std::vector<uint16_t> b = {0x3F80, 0x4000, 0xC040};
  std::vector<uint8_t> c = {0x38, 0x7E, 0x80};
  std::vector<float> scalar = {0.125f};
  ASSERT_TRUE(
      WriteSafetensors(path,
                       {{"a",
                         DType::kF32,
                         {2, 3},
                         {reinterpret_cast<const uint8_t*>(a.data()), 24}},
                        {"b",
                         DType::kBf16,
                         {3},
                         {reinterpret_cast<const uint8_t*>(b.data()), 6}},
                        {"c.weight", DType::kE4m3, {3, 1}, c},
                        {"c.weight_scale",
                         DType::kF32,
                         {},
                         {reinterpret_cast<const uint8_t*>(scalar.data()), 4}}},
                       {{"format", "pt"}})
          .ok());
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> f =
      SafetensorsFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->header().metadata.at("format"), "pt");
  EXPECT_EQ((*f)->header().data_offset % 8, 0u);
  const SafetensorsEntry* ea = (*f)->Find("a");
  ASSERT_NE(ea, nullptr);
  EXPECT_EQ(ea->dtype, DType::kF32);
  EXPECT_EQ(ea->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(std::memcmp((*f)->Data(*ea).data(), a.data(), 24), 0);
  const SafetensorsEntry* es = (*f)->Find("c.weight_scale");
  ASSERT_NE(es, nullptr);
  EXPECT_TRUE(es->shape.empty());
  EXPECT_EQ(es->num_elements(), 1);
  EXPECT_EQ((*f)->Find("c.weight")->dtype, DType::kE4m3);
  EXPECT_EQ((*f)->Find("missing"), nullptr);

  // Same input, same bytes.
  const std::string again = TempPath("roundtrip2.safetensors");
  ASSERT_TRUE(
      WriteSafetensors(again,
                       {{"a",
                         DType::kF32,
                         {2, 3},
                         {reinterpret_cast<const uint8_t*>(a.data()), 24}}},
                       {})
          .ok());
  ASSERT_TRUE(
      WriteSafetensors(path,
                       {{"a",
                         DType::kF32,
                         {2, 3},
                         {reinterpret_cast<const uint8_t*>(a.data()), 24}}},
                       {})
          .ok());
  std::ifstream x(path, std::ios::binary), y(again, std::ios::binary);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(x), {}),
            std::string(std::istreambuf_iterator<char>(y), {}));
  std::remove(path.c_str());
  std::remove(again.c_str());
}

TEST(Safetensors, AcceptsEmptyTensorsAndPaddedHeaders) {
  EXPECT_TRUE(
      ParseOf(
          Raw(R"({"e":{"dtype":"F32","shape":[0,4],"data_offsets":[0,0]}}   )",
              ""))
          .ok());
  EXPECT_TRUE(ParseOf(Raw("{}", "")).ok());
}

TEST(Safetensors, RejectsTruncatedFiles) {
  ExpectRejected("", "truncated");
  ExpectRejected(std::string("\x10\0\0", 3), "truncated");
  ExpectRejected(Raw("{}", "", 1000), "truncated: header length 1000");
  const std::string good =
      Raw(R"({"t":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})",
          std::string(16, 'x'));
  ExpectRejected(good.substr(0, good.size() - 3),
                 "runs past the end of the file");
}

TEST(Safetensors, RejectsLyingHeaders) {
  ExpectRejected(Raw("{}", "", int64_t{1} << 40), "exceeds the 100 MB limit");
  ExpectRejected(
      Raw(R"({"t":{"dtype":"F32","shape":[4],"data_offsets":[0,12]}})",
          std::string(12, 'x')),
      "tensor 't': holds 12 bytes but F32 x 4 elements needs 16");
  ExpectRejected(
      Raw(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})",
          std::string(8, 'x')),
      "end before they begin");
  ExpectRejected(
      Raw(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
          R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
          std::string(12, 'x')),
      "tensor 'b' overlaps");
  ExpectRejected(
      Raw(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
          std::string(8, 'x')),
      "bytes [0, 4) of the data section belong to no tensor");
  ExpectRejected(
      Raw(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
          std::string(9, 'x')),
      "the last 5 bytes of the file belong to no tensor");
  ExpectRejected(Raw(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                     R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                     std::string(8, 'x')),
                 "tensor 'a' is listed twice");
  ExpectRejected(
      Raw(R"({"t":{"dtype":"F32","shape":[2199023255552],"data_offsets":[0,0]}})",
          ""),
      "tensor 't': shape holds something other than a dimension");
  ExpectRejected(
      Raw(R"({"t":{"dtype":"F32","shape":[1099511627776,1099511627776],"data_offsets":[0,0]}})",
          ""),
      "element count overflows");
}

TEST(Safetensors, RejectsMalformedEntries) {
  ExpectRejected(Raw("{\"t\": ", ""), "not well-formed JSON");
  ExpectRejected(Raw("[1,2]", ""), "not a JSON object");
  ExpectRejected(
      Raw(R"({"t":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})",
          std::string(8, 'x')),
      "tensor 't': dtype I64 is not supported");
  ExpectRejected(
      Raw(R"({"t":{"shape":[1],"data_offsets":[0,4]}})", std::string(4, 'x')),
      "tensor 't': no dtype");
  ExpectRejected(
      Raw(R"({"t":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})",
          std::string(4, 'x')),
      "shape holds");
  ExpectRejected(
      Raw(R"({"t":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})",
          std::string(4, 'x')),
      "shape holds");
  ExpectRejected(Raw(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0]}})",
                     std::string(4, 'x')),
                 "data_offsets is not a pair");
  ExpectRejected(Raw(R"({"t":[1,2,3]})", ""),
                 "tensor 't': entry is not an object");
  ExpectRejected(Raw(R"({"__metadata__":{"k":1}})", ""),
                 "__metadata__ value 'k'");
}

TEST(Safetensors, OpenReportsMissingAndEmptyFiles) {
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> missing =
      SafetensorsFile::Open("/nonexistent/model.safetensors");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(std::string(missing.status().message())
                .find("/nonexistent/model.safetensors"),
            std::string::npos);
  const std::string empty = TempPath("empty.safetensors");
  std::ofstream(empty).close();
  absl::StatusOr<std::unique_ptr<SafetensorsFile>> e =
      SafetensorsFile::Open(empty);
  EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument);
  std::remove(empty.c_str());
}

TEST(Safetensors, WriterRejectsInconsistentTensors) {
  std::vector<uint8_t> bytes(8);
  EXPECT_EQ(WriteSafetensors(TempPath("bad.safetensors"),
                             {{"t", DType::kF32, {3}, bytes}}, {})
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      WriteSafetensors(
          TempPath("bad.safetensors"),
          {{"t", DType::kF32, {2}, bytes}, {"t", DType::kF32, {2}, bytes}}, {})
          .code(),
      absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace octet
