// Reading the small files octet takes from outside (a model directory's
// config.json, shard index and tokenizer files; the coordinator's and
// workers' token files) without the ways a plain ifstream goes wrong on
// outside input: a FIFO or device in place of the file blocks forever, a
// directory reads as empty, and a huge file is read whole into memory.
#pragma once

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"

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

// Whether `path` exists, without throwing: an error (EACCES, ELOOP, ...)
// other than "no such file" is returned as a status naming the path.
absl::StatusOr<bool> PathExists(const std::string& path);

}  // namespace octet
