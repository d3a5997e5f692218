#include "coordinator/worker_group.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "rpc/bearer_token.h"
#include "rpc/grpc_status.h"

extern char** environ;

namespace octet {
namespace {

namespace rpc = internal::v1;

std::chrono::system_clock::time_point After(absl::Duration d) {
  return std::chrono::system_clock::now() + absl::ToChronoMilliseconds(d);
}

// How a reaped child ended, for messages.
std::string ExitText(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exit code ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return absl::StrCat("signal ", WTERMSIG(status));
  return "an unknown end";
}

}  // namespace

void StartCancel::Cancel() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
  if (group_ != nullptr) {
    group_->Abort(
        absl::CancelledError("the worker group's start was cancelled"));
  }
}

bool StartCancel::Attach(WorkerGroup* group) {
  absl::MutexLock lock(&mu_);
  group_ = group;
  return !cancelled_;
}

void StartCancel::Detach() {
  absl::MutexLock lock(&mu_);
  group_ = nullptr;
}

absl::StatusOr<std::unique_ptr<WorkerGroup>> WorkerGroup::Start(
    const WorkerGroupOptions& options, const Progress& progress,
    StartCancel* cancel) {
  if (options.tp < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker group: tp must be at least 1, got ", options.tp));
  }
  if (options.remote.empty()
          ? options.worker_program.empty()
          : static_cast<int>(options.remote.size()) != options.tp) {
    return absl::InvalidArgumentError(absl::StrCat(
        "worker group: give the worker program to spawn, or one address per "
        "rank (",
        options.remote.size(), " addresses for tp ", options.tp, ")"));
  }
  // Spawned workers meet on loopback and have no token: the options that
  // concern remote ones do not apply to them.
  // Their store is on loopback, where any local process could reach it:
  // it gets a fresh token, which the workers learn in their Load call.
  WorkerGroupOptions effective = options;
  std::string store_token = options.token;
  if (effective.remote.empty()) {
    effective.token.clear();
    effective.tls = {};
    effective.rendezvous_listen = "127.0.0.1:0";
    effective.rendezvous_host.clear();
    store_token = NewBearerToken();
    effective.load.set_rendezvous_token(store_token);
  }
  std::unique_ptr<WorkerGroup> g(new WorkerGroup(effective));
  OCTET_ASSIGN_OR_RETURN(
      std::unique_ptr<RendezvousServer> server,
      RendezvousServer::Start(effective.rendezvous_listen, &g->store_,
                              store_token, effective.tls));
  g->rendezvous_ = std::move(server);
  if (cancel != nullptr && !cancel->Attach(g.get())) {
    return absl::CancelledError("the worker group's start was cancelled");
  }
  absl::Status s =
      options.remote.empty() ? g->Spawn() : g->Connect(options.remote);
  if (s.ok()) s = g->LoadAll(progress);
  if (cancel != nullptr) cancel->Detach();
  if (s.ok()) s = g->failed();  // (cancelled at the last moment)
  if (!s.ok()) return s;        // the destructor stops what was spawned
  for (int r = 0; r < g->size(); ++r) {
    g->watchdogs_.emplace_back(&WorkerGroup::Watch, g.get(), r);
  }
  return g;
}

WorkerGroup::~WorkerGroup() {
  {
    absl::MutexLock lock(&mu_);  // a health check in flight ends at once
    stop_ = true;
    for (grpc::ClientContext* c : health_checks_) c->TryCancel();
  }
  for (std::thread& t : watchdogs_) t.join();
  // Ask spawned workers to stop; those still there after 2 s are killed.
  // (waitpid first: a worker the watchdog reaped must not be signalled, its
  // pid may be another process's by now.)
  std::vector<pid_t> alive;
  for (pid_t pid : pids_) {
    if (waitpid(pid, nullptr, WNOHANG) == 0) {
      kill(pid, SIGTERM);
      alive.push_back(pid);
    }
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(2);
  for (pid_t pid : alive) {
    int ended = 0;
    while ((ended = waitpid(pid, nullptr, WNOHANG)) == 0 &&
           absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    if (ended == 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  }
  if (!socket_dir_.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(socket_dir_, ignored);
  }
}

absl::Status WorkerGroup::Spawn() {
  std::string dir = (std::filesystem::temp_directory_path() / "octet-XXXXXX");
  if (mkdtemp(dir.data()) == nullptr) {  // 0700: only this user's processes
    return absl::UnavailableError("worker group: cannot make a socket folder");
  }
  socket_dir_ = dir;
  std::vector<std::string> targets;
  for (int r = 0; r < options_.tp; ++r) {
    const std::string socket = absl::StrCat(dir, "/rank", r, ".sock");
    std::vector<std::string> args = {options_.worker_program,
                                     "--listen=unix:" + socket,
                                     absl::StrCat("--parent_pid=", getpid())};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = 0;
    if (posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ) !=
        0) {
      return absl::UnavailableError(
          absl::StrCat("worker group: cannot start ", options_.worker_program));
    }
    pids_.push_back(pid);
    targets.push_back("unix:" + socket);
  }
  return Connect(targets);
}

absl::Status WorkerGroup::Connect(const std::vector<std::string>& targets) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(256 << 20);
  args.SetMaxSendMessageSize(256 << 20);
  for (size_t r = 0; r < targets.size(); ++r) {
    auto channel = grpc::CreateCustomChannel(
        targets[r], TlsChannelCredentials(options_.tls), args);
    const absl::Time deadline = absl::Now() + options_.start_timeout;
    // In slices, so that a spawned worker that exits is seen at once.
    while (!channel->WaitForConnected(After(absl::Milliseconds(200)))) {
      if (absl::Status f = failed(); !f.ok()) return f;  // cancelled
      int status = 0;
      if (r < pids_.size() && waitpid(pids_[r], &status, WNOHANG) == pids_[r]) {
        // (Not naming its socket: a private path that differs each time
        // would make every failure look new; see EngineOptions.)
        return absl::UnavailableError(absl::StrCat("worker rank ", r,
                                                   " ended (", ExitText(status),
                                                   ") before it listened"));
      }
      if (absl::Now() >= deadline) {
        return absl::DeadlineExceededError(absl::StrCat(
            "worker rank ", r, " at ", targets[r], " did not answer within ",
            absl::FormatDuration(options_.start_timeout), ConnectHint()));
      }
    }
    stubs_.push_back(rpc::Worker::NewStub(channel));
  }
  return absl::OkStatus();
}

std::string WorkerGroup::ConnectHint() const {
  if (options_.remote.empty()) return "";
  // A TLS handshake that fails looks like a worker that does not answer.
  return options_.tls.ca.empty()
             ? " (plaintext: a worker that takes only TLS never answers it)"
             : " over TLS (is its certificate signed by the CA given, naming "
               "the host dialled, and does it take this coordinator's?)";
}

std::string WorkerGroup::RendezvousAddress() const {
  const std::string& bound = rendezvous_->address();
  if (options_.rendezvous_host.empty()) return bound;
  return absl::StrCat(options_.rendezvous_host,
                      bound.substr(bound.rfind(':')));  // ":PORT"
}

std::unique_ptr<grpc::ClientContext> WorkerGroup::Context(
    absl::Duration timeout) const {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(After(timeout));
  AddBearerToken(options_.token, *context);
  return context;
}

absl::Status WorkerGroup::LoadAll(const Progress& progress) {
  std::random_device random;
  const std::string group = absl::StrCat("octet-", random(), random());
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  {
    absl::MutexLock lock(&mu_);  // cancelled by Abort, as a step's are
    if (!failed_.ok()) return failed_;
    for (int r = 0; r < size(); ++r) {
      contexts.push_back(Context(options_.load_timeout));
      in_flight_.push_back(contexts.back().get());
    }
  }
  std::vector<absl::Status> statuses(size());
  std::vector<std::thread> threads;
  for (int r = 0; r < size(); ++r) {
    threads.emplace_back([&, r] {
      rpc::LoadRequest request = options_.load;
      request.set_rank(r);
      request.set_world_size(size());
      request.set_rendezvous_address(RendezvousAddress());
      request.set_group(group);
      request.set_cuda_device(!options_.gpus.empty()    ? options_.gpus[r]
                              : options_.remote.empty() ? r
                                                        : 0);
      auto reader = stubs_[r]->Load(contexts[r].get(), request);
      rpc::LoadProgress p;
      while (reader->Read(&p)) {
        if (progress) progress(r, p);
        if (r == 0 && !p.activation_dtype().empty()) {
          activation_dtype_ = p.activation_dtype();
        }
      }
      statuses[r] = FromGrpc(reader->Finish());
      // One rank's failure leaves the others waiting for it: stop them.
      if (!statuses[r].ok()) {
        for (auto& c : contexts) c->TryCancel();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  {
    absl::MutexLock lock(&mu_);
    in_flight_.clear();
    if (!failed_.ok()) return failed_;  // aborted: the reason, not CANCELLED
  }
  // The first failure that is not the cancellation it caused.
  for (int r = 0; r < size(); ++r) {
    if (!statuses[r].ok() &&
        statuses[r].code() != absl::StatusCode::kCancelled) {
      return absl::Status(statuses[r].code(),
                          absl::StrCat("worker rank ", r, " did not load: ",
                                       statuses[r].message()));
    }
  }
  for (const absl::Status& s : statuses) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<rpc::StepResponse> WorkerGroup::Step(
    const rpc::StepRequest& request,
    const std::function<void()>& while_waiting) {
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  {
    absl::MutexLock lock(&mu_);
    if (!failed_.ok()) return failed_;
    for (int r = 0; r < size(); ++r) {
      contexts.push_back(Context(options_.step_timeout));
      in_flight_.push_back(contexts.back().get());
    }
  }
  // Sent to every rank at once (gRPC's callback API: no thread per rank).
  std::vector<rpc::StepResponse> responses(size());
  std::vector<grpc::Status> statuses(size());
  absl::Mutex answers_mu;
  int pending = size();
  for (int r = 0; r < size(); ++r) {
    stubs_[r]->async()->Step(contexts[r].get(), &request, &responses[r],
                             [&, r](grpc::Status s) {
                               absl::MutexLock lock(&answers_mu);
                               statuses[r] = std::move(s);
                               --pending;
                             });
  }
  const auto all_in = [&pending]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(answers_mu) {
    return pending == 0;
  };
  for (;;) {
    {
      absl::MutexLock lock(&answers_mu);
      if (answers_mu.AwaitWithTimeout(absl::Condition(&all_in),
                                      absl::Milliseconds(50))) {
        break;
      }
    }
    if (while_waiting) while_waiting();
  }
  {
    absl::MutexLock lock(&mu_);
    in_flight_.clear();
  }
  for (int r = 0; r < size(); ++r) {
    if (statuses[r].ok()) continue;
    // A request every rank refuses the same way, before any collective,
    // leaves the group as it was; anything else breaks it.
    if (statuses[r].error_code() == grpc::StatusCode::INVALID_ARGUMENT) {
      return FromGrpc(statuses[r]);
    }
    Abort(absl::UnavailableError(
        statuses[r].error_code() == grpc::StatusCode::DEADLINE_EXCEEDED
            ? absl::StrCat("worker rank ", r, " did not finish step ",
                           request.step(), " within the step timeout (",
                           absl::FormatDuration(options_.step_timeout), ")")
            : absl::StrCat("worker rank ", r,
                           " failed a step: ", statuses[r].error_message())));
  }
  absl::Status s = failed();
  if (!s.ok()) return s;
  return std::move(responses[0]);
}

absl::Status WorkerGroup::Free(const std::vector<uint64_t>& seq_ids) {
  absl::Status s = failed();
  if (!s.ok() || seq_ids.empty()) return s;
  rpc::FreeRequest request;
  request.mutable_seq_ids()->Add(seq_ids.begin(), seq_ids.end());
  rpc::FreeResponse response;
  auto context = Context(options_.health_timeout);
  return FromGrpc(stubs_[0]->Free(context.get(), request, &response));
}

absl::Status WorkerGroup::failed() const {
  absl::MutexLock lock(&mu_);
  return failed_;
}

void WorkerGroup::Abort(const absl::Status& why) {
  absl::MutexLock lock(&mu_);
  if (failed_.ok()) failed_ = absl::UnavailableError(why.message());
  for (grpc::ClientContext* c : in_flight_) c->TryCancel();
}

void WorkerGroup::Watch(int rank) {
  while (!stop_ && failed().ok()) {
    for (int i = 0; i < 25 && !stop_; ++i) {  // 250 ms between checks
      absl::SleepFor(absl::Milliseconds(10));
      int status = 0;
      if (static_cast<size_t>(rank) < pids_.size() &&
          waitpid(pids_[rank], &status, WNOHANG) == pids_[rank]) {
        Abort(absl::UnavailableError(
            absl::StrCat("worker rank ", rank, " (pid ", pids_[rank],
                         ") ended: ", ExitText(status))));
        return;
      }
    }
    if (stop_) return;
    auto context = Context(options_.health_timeout);
    {
      absl::MutexLock lock(&mu_);
      if (stop_) return;
      health_checks_.push_back(context.get());
    }
    rpc::HealthResponse health;
    const grpc::Status s = stubs_[rank]->Health(context.get(), {}, &health);
    {
      absl::MutexLock lock(&mu_);
      std::erase(health_checks_, context.get());
    }
    if (stop_) return;
    if (!s.ok() || !health.loaded()) {
      Abort(absl::UnavailableError(absl::StrCat(
          "worker rank ", rank, " did not answer its health check within ",
          absl::FormatDuration(options_.health_timeout), ": ",
          s.ok() ? "not loaded" : s.error_message())));
      return;
    }
  }
}

}  // namespace octet
