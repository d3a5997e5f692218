// Test helper: run programs as real processes side by side (the ranks of a
// group) and collect how each ended.
#pragma once

#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"

extern char** environ;

namespace octet::testing {

// A program built next to the running test binary.
inline std::string SiblingProgram(const std::string& name) {
  return (std::filesystem::read_symlink("/proc/self/exe").parent_path() / name)
      .string();
}

// A loopback TCP port that was free a moment ago (for a server started
// with it; another process may take it in between, rarely).
inline int FreeTcpPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int port = 0;
  if (fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&addr), len) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  if (fd >= 0) close(fd);
  return port;
}

// Starts `command` (argv[0] is the program path): its pid, or 0 if it could
// not start.
inline pid_t Spawn(std::vector<std::string> command) {
  std::vector<char*> argv;
  for (std::string& a : command) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  if (posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ) != 0) {
    return 0;
  }
  return pid;
}

// A program running in the background while a test talks to it; killed
// (SIGKILL) and reaped when destroyed.
class Child {
 public:
  explicit Child(const std::vector<std::string>& command)
      : pid_(Spawn(command)) {}
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child() { Kill(); }

  bool started() const { return pid_ != 0; }
  pid_t pid() const { return pid_; }
  // Waits up to `limit` for the program to end on its own: its exit code,
  // 128 for a death by signal, -1 if it still runs.
  int Wait(absl::Duration limit) {
    const absl::Time deadline = absl::Now() + limit;
    while (pid_ != 0) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = 0;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
      }
      if (absl::Now() >= deadline) return -1;
      absl::SleepFor(absl::Milliseconds(20));
    }
    return -1;
  }
  // Sends `sig` and waits for the end (nothing if it already ended).
  void Kill(int sig = SIGKILL) {
    if (pid_ == 0) return;
    kill(pid_, sig);
    waitpid(pid_, nullptr, 0);
    pid_ = 0;
  }

 private:
  pid_t pid_;
};

// Processes whose parent is `parent` (e.g. a coordinator's workers).
inline std::vector<pid_t> ChildrenOf(pid_t parent) {
  std::vector<pid_t> out;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream status(e.path() / "status");
    std::string line;
    while (std::getline(status, line)) {
      if (line.rfind("PPid:", 0) == 0) {
        if (std::stoi(line.substr(5)) == parent) out.push_back(std::stoi(name));
        break;
      }
    }
  }
  return out;
}

// Starts every command (argv[0] is the program path) at once and waits for
// all: the exit codes in order, 128 for a death by signal, -1 for one still
// running after `limit` (then killed), -2 for one that could not start.
inline std::vector<int> RunTogether(
    const std::vector<std::vector<std::string>>& commands,
    absl::Duration limit) {
  std::vector<pid_t> pids(commands.size(), 0);
  std::vector<int> codes(commands.size(), -1);
  for (size_t i = 0; i < commands.size(); ++i) {
    pids[i] = Spawn(commands[i]);
    if (pids[i] == 0) codes[i] = -2;
  }
  const absl::Time deadline = absl::Now() + limit;
  bool running = true;
  while (running && absl::Now() < deadline) {
    running = false;
    for (size_t i = 0; i < pids.size(); ++i) {
      if (pids[i] == 0) continue;
      int status = 0;
      if (waitpid(pids[i], &status, WNOHANG) == pids[i]) {
        codes[i] = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
        pids[i] = 0;
      } else {
        running = true;
      }
    }
    if (running) absl::SleepFor(absl::Milliseconds(20));
  }
  for (pid_t pid : pids) {
    if (pid == 0) continue;
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }
  return codes;
}

}  // namespace octet::testing
