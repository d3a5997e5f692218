#include "worker/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace octet {

absl::StatusOr<std::string> ReadSmallFile(const std::string& path,
                                          size_t max_bytes) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const std::string why = std::strerror(errno);
    if (errno == ENOENT) {
      return absl::NotFoundError(absl::StrCat(path, ": cannot read: ", why));
    }
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": cannot read: ", why));
  }
  struct stat st;
  absl::Status status;
  std::string bytes;
  if (::fstat(fd, &st) != 0) {
    status = absl::InvalidArgumentError(
        absl::StrCat(path, ": cannot stat: ", std::strerror(errno)));
  } else if (!S_ISREG(st.st_mode)) {
    status = absl::InvalidArgumentError(
        absl::StrCat(path, ": not a regular file"));
  } else if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    status = absl::InvalidArgumentError(absl::StrCat(
        path, ": ", st.st_size, " bytes, more than the ", max_bytes,
        " allowed for this file"));
  } else {
    bytes.resize(static_cast<size_t>(st.st_size));
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        status = absl::InvalidArgumentError(absl::StrCat(
            path, ": read failed after ", done, " of ", bytes.size(),
            " bytes", n < 0 ? absl::StrCat(": ", std::strerror(errno)) : ""));
        break;
      }
      done += static_cast<size_t>(n);
    }
  }
  ::close(fd);
  if (!status.ok()) return status;
  return bytes;
}

absl::StatusOr<bool> PathExists(const std::string& path) {
  std::error_code ec;
  const std::filesystem::file_status st = std::filesystem::status(path, ec);
  if (ec && ec != std::errc::no_such_file_or_directory) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": cannot check: ", ec.message()));
  }
  return std::filesystem::exists(st);
}

}  // namespace octet
