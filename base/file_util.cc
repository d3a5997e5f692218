#include "base/file_util.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace octet {

absl::StatusOr<std::unique_ptr<MappedFile>> MappedFile::Open(
    const std::string& path) {
  OCTET_ASSIGN_OR_RETURN(const RegularFile file, OpenRegularFile(path));
  std::unique_ptr<MappedFile> f(new MappedFile());
  f->size_ = file.size;
  if (f->size_ > 0) {
    void* map = ::mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, file.fd, 0);
    if (map == MAP_FAILED) {
      const int err = errno;
      ::close(file.fd);
      return absl::InternalError(
          absl::StrCat(path, ": cannot map: ", std::strerror(err)));
    }
    f->map_ = static_cast<const uint8_t*>(map);
  }
  ::close(file.fd);
  return f;
}

MappedFile::~MappedFile() {
  if (map_ != nullptr) ::munmap(const_cast<uint8_t*>(map_), size_);
}

void MappedFile::ReleasePages(const uint8_t* begin, size_t n) const {
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t first =
      (reinterpret_cast<uintptr_t>(begin) + page - 1) / page * page;
  const uintptr_t last = (reinterpret_cast<uintptr_t>(begin) + n) / page * page;
  if (first < last) {
    (void)::madvise(reinterpret_cast<void*>(first), last - first,
                    MADV_DONTNEED);
  }
}

absl::StatusOr<RegularFile> OpenRegularFile(const std::string& path) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int err = errno;
    const std::string message =
        absl::StrCat(path, ": cannot read: ", std::strerror(err));
    if (err == ENOENT) return absl::NotFoundError(message);
    return absl::InvalidArgumentError(message);
  }
  struct stat st;
  absl::Status status;
  if (::fstat(fd, &st) != 0) {
    status = absl::InternalError(
        absl::StrCat(path, ": cannot stat: ", std::strerror(errno)));
  } else if (!S_ISREG(st.st_mode)) {
    status =
        absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  if (!status.ok()) {
    ::close(fd);
    return status;
  }
  return RegularFile{fd, static_cast<size_t>(st.st_size)};
}

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  OCTET_ASSIGN_OR_RETURN(const std::string text, ReadSmallFile(path, 4096));
  std::string token(absl::StripAsciiWhitespace(text));
  if (token.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": holds no token"));
  }
  return token;
}

absl::StatusOr<std::string> ReadSmallFile(const std::string& path,
                                          size_t max_bytes) {
  OCTET_ASSIGN_OR_RETURN(const RegularFile file, OpenRegularFile(path));
  const int fd = file.fd;
  absl::Status status;
  std::string bytes;
  if (file.size > max_bytes) {
    status = absl::InvalidArgumentError(
        absl::StrCat(path, ": ", file.size, " bytes, more than the ", max_bytes,
                     " allowed for this file"));
  } else {
    bytes.resize(file.size);
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        status = absl::InvalidArgumentError(absl::StrCat(
            path, ": read failed after ", done, " of ", bytes.size(), " bytes",
            n < 0 ? absl::StrCat(": ", std::strerror(errno)) : ""));
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
