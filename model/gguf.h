// The GGUF file format (llama.cpp's; version 2 and 3): reading, memory-
// mapped and validated. What the tensors mean to a model is
// model/gguf_checkpoint.h's job; how their blocks decode, model/gguf_quants.h's.
//
// Layout (little-endian throughout):
//   "GGUF", u32 version, u64 tensor count, u64 metadata count,
//   metadata:  { string key, u32 value type, value } ...
//   tensors:   { string name, u32 n_dims, u64 dims[n_dims] (innermost first),
//                u32 ggml type, u64 offset } ...
//   padding to general.alignment (32 unless the metadata says), then the
//   data section; each tensor's offset is relative to its start.
// A string is a u64 byte count and the bytes; an array a u32 element type,
// a u64 count and the elements.
//
// Every count, length, type, dimension and offset is checked against the
// file before it is used: a truncated or lying file is an error naming the
// file and what is wrong, never a read outside the mapping. Tensors of a
// type octet cannot decode are refused at open, by name.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "base/file_util.h"
#include "model/gguf_quants.h"

namespace octet {

enum class GgufValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

// One metadata value. Scalars are kept as the widest type of their kind;
// arrays of scalars or strings are kept whole (arrays of arrays are
// refused: no model file octet reads has one).
struct GgufValue {
  GgufValueType type = GgufValueType::kUint8;
  GgufValueType element_type = GgufValueType::kUint8;  // arrays
  bool is_signed = false;  // integer scalars and elements
  uint64_t u = 0;          // unsigned integers and bool
  int64_t i = 0;           // signed integers
  double f = 0;            // floats
  std::string s;           // strings
  std::vector<int64_t> ints;         // integer and bool arrays
  std::vector<double> floats;        // float arrays
  std::vector<std::string> strings;  // string arrays
};

struct GgufTensorInfo {
  std::string name;
  GgmlType type = GgmlType::kF32;
  std::vector<int64_t> dims;  // as stored: innermost (contiguous) first
  uint64_t offset = 0;        // into the data section
  uint64_t bytes = 0;         // its size, from type and dims

  int64_t num_elements() const;
};

struct GgufContents {
  uint32_t version = 0;
  std::map<std::string, GgufValue, std::less<>> metadata;
  std::vector<GgufTensorInfo> tensors;  // in file order
  uint64_t data_offset = 0;             // where the data section starts
};

// Parses and validates a whole file's bytes (`path` names it in errors).
// Pure function: the fuzz target drives it directly.
absl::StatusOr<GgufContents> ParseGguf(absl::string_view file,
                                       absl::string_view path);

// A memory-mapped GGUF file. Immutable after Open; thread-safe.
class GgufFile {
 public:
  static absl::StatusOr<std::unique_ptr<GgufFile>> Open(
      const std::string& path);
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const { return path_; }
  const GgufContents& contents() const { return contents_; }

  // The tensor called `name`, or nullptr.
  const GgufTensorInfo* FindTensor(absl::string_view name) const;
  // Its stored bytes, valid while the file is.
  absl::Span<const uint8_t> Data(const GgufTensorInfo& tensor) const;
  // Done with its pages for now (see SafetensorsFile::ReleasePages).
  void ReleasePages(const GgufTensorInfo& tensor) const;

  // Metadata by key, with the type a reader needs: NotFound naming the key
  // when absent, InvalidArgument naming it and both types when it has
  // another type (or a negative integer for an unsigned read).
  const GgufValue* FindValue(absl::string_view key) const;  // or nullptr
  absl::StatusOr<std::string> GetString(absl::string_view key) const;
  absl::StatusOr<uint64_t> GetUint(absl::string_view key) const;
  absl::StatusOr<double> GetFloat(absl::string_view key) const;
  absl::StatusOr<bool> GetBool(absl::string_view key) const;
  absl::StatusOr<const std::vector<std::string>*> GetStrings(
      absl::string_view key) const;
  absl::StatusOr<const std::vector<int64_t>*> GetInts(
      absl::string_view key) const;
  absl::StatusOr<const std::vector<double>*> GetFloats(
      absl::string_view key) const;

 private:
  GgufFile() = default;
  absl::StatusOr<const GgufValue*> Typed(absl::string_view key,
                                         GgufValueType want) const;

  std::string path_;
  std::unique_ptr<MappedFile> file_;
  GgufContents contents_;
  std::map<std::string, size_t, std::less<>> index_;  // name -> tensors[i]
};

// "UINT32", "STRING" ... for messages.
absl::string_view GgufValueTypeName(GgufValueType type);

}  // namespace octet
