// Reading the small files octet takes from outside (a model directory's
// config.json, shard index and tokenizer files; the coordinator's and
// workers' token files) without the ways a plain ifstream goes wrong on
// outside input: a FIFO or device in place of the file blocks forever, a
// directory reads as empty, and a huge file is read whole into memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace octet {

// A read-only descriptor of the regular file at `path` (the caller closes
// it) and the file's size. NotFound when it does not exist; InvalidArgument
// when it cannot be opened or is not a regular file (a FIFO does not block
// the open); the error names the path and the reason.
struct RegularFile {
  int fd = -1;
  size_t size = 0;
};
absl::StatusOr<RegularFile> OpenRegularFile(const std::string& path);

// The bytes of `path`: OpenRegularFile's errors, and InvalidArgument when it
// is larger than `max_bytes`.
absl::StatusOr<std::string> ReadSmallFile(const std::string& path,
                                          size_t max_bytes);

// The shared token in `path` that remote workers require: ReadSmallFile's
// errors, surrounding whitespace removed, and InvalidArgument naming the
// path when nothing is left.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

// A whole regular file mapped read-only (OpenRegularFile's checks first),
// for the checkpoint formats that read tensors in place. Immutable;
// thread-safe.
class MappedFile {
 public:
  static absl::StatusOr<std::unique_ptr<MappedFile>> Open(
      const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return map_; }
  size_t size() const { return size_; }
  absl::string_view bytes() const {
    return absl::string_view(reinterpret_cast<const char*>(map_), size_);
  }
  // Tells the kernel this process is done with [begin, begin + n) for now,
  // so that loading a model does not keep the whole file resident: the
  // whole pages inside the range leave memory (its neighbours may still be
  // in use). The bytes stay readable: they are read back when touched.
  void ReleasePages(const uint8_t* begin, size_t n) const;

 private:
  MappedFile() = default;
  const uint8_t* map_ = nullptr;
  size_t size_ = 0;
};

// Whether `path` exists, without throwing: an error (EACCES, ELOOP, ...)
// other than "no such file" is returned as a status naming the path.
absl::StatusOr<bool> PathExists(const std::string& path);

}  // namespace octet
