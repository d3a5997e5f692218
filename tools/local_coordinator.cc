#include "tools/local_coordinator.h"

#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <thread>

#include "absl/strings/str_cat.h"
#include "octet/v1/generation.grpc.pb.h"

extern char** environ;

namespace octet {
namespace {

// A loopback TCP port free a moment ago (the kernel's pick), or 0.
int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

// Whether the server at `stub` generates one token now.
bool Answers(v1::Generation::Stub& stub) {
  v1::GenerateRequest r;
  r.mutable_token_ids()->add_ids(1);
  r.mutable_stopping()->set_max_new_tokens(1);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::seconds(30));
  v1::GenerateResponse response;
  return stub.Generate(&context, r, &response).ok();
}

}  // namespace

absl::StatusOr<std::unique_ptr<LocalCoordinator>> LocalCoordinator::Start(
    const std::vector<std::string>& flags, absl::Duration timeout) {
  const int port = FreePort();
  if (port == 0) return absl::UnavailableError("no free loopback port");
  const std::string program =
      (std::filesystem::read_symlink("/proc/self/exe").parent_path() /
       "coordinator")
          .string();
  std::vector<std::string> args = {program, absl::StrCat("--port=", port)};
  args.insert(args.end(), flags.begin(), flags.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::unique_ptr<LocalCoordinator> c(new LocalCoordinator());
  c->address_ = absl::StrCat("127.0.0.1:", port);
  if (const int err = ::posix_spawn(&c->pid_, program.c_str(), nullptr,
                                    nullptr, argv.data(), environ);
      err != 0) {
    c->pid_ = -1;
    return absl::UnavailableError(
        absl::StrCat("cannot start ", program, ": ", std::strerror(err)));
  }
  auto stub = v1::Generation::NewStub(grpc::CreateChannel(
      c->address_, grpc::InsecureChannelCredentials()));
  const absl::Time deadline = absl::Now() + timeout;
  while (!Answers(*stub)) {
    int status = 0;
    if (::waitpid(c->pid_, &status, WNOHANG) == c->pid_) {
      c->pid_ = -1;
      return absl::UnavailableError(absl::StrCat(
          "the coordinator exited before serving (status ", status, ")"));
    }
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("the coordinator did not serve within ",
                       absl::FormatDuration(timeout)));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return c;
}

LocalCoordinator::~LocalCoordinator() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGTERM);
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
}

}  // namespace octet
