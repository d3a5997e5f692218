// The safetensors file format: reading (memory-mapped, validated) and
// writing.
//
// Layout: an 8-byte little-endian header length N, N bytes of JSON
//   {"NAME": {"dtype": "BF16", "shape": [d0, d1], "data_offsets": [b, e]},
//    ..., "__metadata__": {"key": "value"}}
// then the data section; offsets are relative to its start.
//
// Every header is validated before any tensor is handed out: well-formed
// JSON object, known dtypes, non-negative shapes, size = dtype size x element
// count, offsets inside the file, no two tensors overlapping, no bytes of the
// data section left unaccounted for. A file that fails gets an error naming
// the file (and the tensor), never a crash.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "base/dtype.h"
#include "base/file_util.h"

namespace octet {

// What one header entry describes.
struct SafetensorsEntry {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // offsets into the data section
  uint64_t end = 0;

  int64_t num_elements() const;
};

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> tensors;  // sorted by begin offset
  std::map<std::string, std::string> metadata;
  uint64_t data_offset = 0;  // where the data section starts in the file
};

// Parses and validates a header. `file` is the whole file (or at least its
// first bytes: a short prefix is reported as truncated); `path` only names
// the file in errors. Pure function: the fuzz target drives it directly.
absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(
    absl::string_view file, absl::string_view path);

// A memory-mapped safetensors file. Immutable after Open; thread-safe.
class SafetensorsFile {
 public:
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(
      const std::string& path);
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const SafetensorsHeader& header() const { return header_; }

  // The entry called `name`, or nullptr.
  const SafetensorsEntry* Find(absl::string_view name) const;

  // The bytes of `entry` (an entry of this file), valid while the file is.
  absl::Span<const uint8_t> Data(const SafetensorsEntry& entry) const;

  // Tells the kernel this process is done with `entry`'s pages for now, so
  // that loading a model does not keep the whole file resident. The bytes
  // stay readable (they are read back from the file if touched again).
  void ReleasePages(const SafetensorsEntry& entry) const;

 private:
  SafetensorsFile() = default;

  std::string path_;
  std::unique_ptr<MappedFile> file_;
  SafetensorsHeader header_;
  std::map<std::string, size_t, std::less<>> index_;  // name -> tensors[i]
};

// Writes a safetensors file one tensor at a time, so that a checkpoint larger
// than memory can be produced: the header (every name, dtype and shape) is
// fixed at Create, then the tensors' bytes follow in that order. The file
// appears at `path` only when Finish succeeds (written to a temporary name,
// then renamed). Not thread-safe.
class SafetensorsWriter {
 public:
  struct Spec {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
  };
  static absl::StatusOr<std::unique_ptr<SafetensorsWriter>> Create(
      const std::string& path, const std::vector<Spec>& tensors,
      const std::map<std::string, std::string>& metadata);
  ~SafetensorsWriter();  // removes the temporary file if not finished

  // Appends the next tensor's bytes (tensors in Create's order; a tensor may
  // be written in several pieces).
  absl::Status Write(absl::Span<const uint8_t> bytes);
  absl::Status Finish();

 private:
  SafetensorsWriter() = default;
  std::string path_, tmp_;
  std::FILE* out_ = nullptr;
  uint64_t expected_ = 0, written_ = 0;
};

// A tensor to write: its bytes are copied from `data`.
struct SafetensorsTensor {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  absl::Span<const uint8_t> data;
};

// Writes a safetensors file, tensors in the given order, atomically (a
// temporary file renamed into place). Deterministic: the same input gives the
// same bytes.
absl::Status WriteSafetensors(
    const std::string& path, const std::vector<SafetensorsTensor>& tensors,
    const std::map<std::string, std::string>& metadata);

// "F32", "F16", "BF16", "F8_E4M3" <-> DType.
absl::string_view SafetensorsDTypeName(DType dtype);

}  // namespace octet
