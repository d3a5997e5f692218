// worker: one tensor-parallel rank of an octet model, serving the worker
// protocol (proto/octet/internal/v1/worker.proto) to the coordinator, which
// normally starts it:
//
//   worker --listen unix:/run/octet/rank0.sock
//   worker --listen 0.0.0.0:50061 --token_file /etc/octet/token   (remote)
//
// Remote workers also reach the coordinator's rendezvous store (with the
// same token) and, over Gloo, each other: --host is the address the other
// ranks reach this one at (by default this machine's host name, resolved
// as the peers would; 127.0.0.1 on a Unix socket).
//
// The model is loaded when the coordinator sends Load. A TCP address needs
// --token_file: the group's shared token, which every call must carry.
// With --tls_cert, --tls_key and --tls_ca it takes only mutual TLS: the
// coordinator must present a certificate --tls_ca signed, and this worker
// reaches the rendezvous store over TLS too, verified by --tls_ca, with its
// own certificate (which must allow serverAuth and clientAuth). Without
// them the token crosses the network in clear text. --health_port serves
// grpc.health.v1 alone, in plaintext, for probes that cannot do TLS. A
// coordinator that spawns it passes --parent_pid, and it ends with that
// process.
// Ends on SIGTERM or SIGINT (exit code 0), or when its group fails in a
// step or a new group asks it to load (exit code 1: a worker joins one
// group in its life; its supervisor starts a fresh one).
#include <grpcpp/grpcpp.h>
#include <limits.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/file_util.h"
#include "rpc/tls.h"
#include "worker/worker_service.h"

ABSL_FLAG(
    std::string, listen, "",
    "where to serve: unix:PATH (local) or HOST:PORT (needs --token_file)");
ABSL_FLAG(std::string, token_file, "",
          "file holding the group's shared token (required for HOST:PORT)");
ABSL_FLAG(int, parent_pid, 0,
          "the coordinator that spawned this worker: it ends when that "
          "process does (0: started some other way)");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate (chain) of this worker: with --tls_key and "
          "--tls_ca, a TCP --listen takes mutual TLS only");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM certificate(s) of the CA that signed the coordinator's "
          "certificate: it must present one, and the rendezvous store is "
          "verified by it");
ABSL_FLAG(int32_t, health_port, 0,
          "also serve grpc.health.v1 alone, in plaintext, on this port (for "
          "probes that cannot do TLS); 0: none");
ABSL_FLAG(std::string, host, "",
          "address the other ranks reach this one at, for Gloo collectives "
          "(default: the --listen host, or this machine's host name when "
          "that is a wildcard; 127.0.0.1 for unix:PATH)");

namespace {

// Set by the signal handlers and by a gRPC thread (on_group_failed), read
// by main: an atomic, not a volatile sig_atomic_t, which is for one thread
// and its handlers only (TSan found the race). Lock-free, so signal-safe.
std::atomic<int> stop_signal{0};
static_assert(std::atomic<int>::is_always_lock_free);
void OnSignal(int sig) { stop_signal = sig; }

// How long calls in flight get to finish once the worker stops.
constexpr std::chrono::seconds kShutdownGrace{2};

int Fail(const std::string& message) {
  std::fprintf(stderr, "worker: %s\n", message.c_str());
  return 2;
}

// Where this rank listens for its peers (see --host), from --listen.
std::string CollectiveHost(const std::string& listen) {
  if (absl::StartsWith(listen, "unix:")) return "127.0.0.1";
  std::string host = listen.substr(0, listen.rfind(':'));
  if (!octet::IsWildcardHost(host)) {
    if (host.size() > 2 && host.front() == '[' && host.back() == ']') {
      // Gloo takes an IPv6 address without its brackets.
      host = host.substr(1, host.size() - 2);
    }
    return host;
  }
  char name[HOST_NAME_MAX + 1] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "127.0.0.1";
  return name;
}

// --tls_cert, --tls_key and --tls_ca: all three (a TCP --listen only) or
// none.
absl::Status ReadTlsFlags(const std::string& listen, octet::TlsConfig& tls) {
  const std::string ca = absl::GetFlag(FLAGS_tls_ca);
  const std::string cert = absl::GetFlag(FLAGS_tls_cert);
  const std::string key = absl::GetFlag(FLAGS_tls_key);
  if (ca.empty() && cert.empty() && key.empty()) return absl::OkStatus();
  if (absl::StartsWith(listen, "unix:")) {
    return absl::InvalidArgumentError(
        "--tls_cert, --tls_key and --tls_ca apply to a TCP --listen (a Unix "
        "socket is private to this machine)");
  }
  if (absl::Status s =
          octet::ReadTlsIdentity("tls_cert", cert, "tls_key", key,
                                 octet::TlsRole::kServerAndClient, tls);
      !s.ok()) {
    return s;
  }
  if (cert.empty() || ca.empty()) {
    return absl::InvalidArgumentError(
        "--tls_cert and --tls_key need --tls_ca, and --tls_ca needs them (the "
        "worker link is mutual TLS)");
  }
  absl::StatusOr<std::string> roots = octet::ReadTlsCertificates("tls_ca", ca);
  if (!roots.ok()) return roots.status();
  tls.ca = *std::move(roots);
  return absl::OkStatus();
}

// Started by a coordinator on this machine (--parent_pid): end with it,
// rather than linger holding the model's memory if it dies. The signal is
// armed first, then the parent compared: one that died before could not
// send it. (Not getppid() == 1: in a container the coordinator is PID 1.)
absl::Status EndWithParent(int parent) {
  if (parent <= 0) return absl::OkStatus();
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (getppid() != parent) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the coordinator that started this (pid ", parent, ") is gone"));
  }
  return absl::OkStatus();
}

// The service's options from the flags: the group's token (required on
// TCP), TLS, and the host its peers reach its collectives at.
absl::StatusOr<octet::WorkerServiceOptions> ServiceOptions(
    const std::string& listen) {
  octet::WorkerServiceOptions options;
  const std::string token_file = absl::GetFlag(FLAGS_token_file);
  if (!token_file.empty()) {
    absl::StatusOr<std::string> token = octet::ReadTokenFile(token_file);
    if (!token.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--token_file ", token.status().message()));
    }
    options.token = *std::move(token);
  } else if (!absl::StartsWith(listen, "unix:")) {
    return absl::InvalidArgumentError(
        absl::StrCat("a TCP address (--listen ", listen,
                     ") needs --token_file: the group's shared token"));
  }
  if (absl::Status s = ReadTlsFlags(listen, options.tls); !s.ok()) return s;
  if (!absl::StartsWith(listen, "unix:") && options.tls.ca.empty()) {
    std::fprintf(stderr,
                 "worker: no TLS (--tls_cert, --tls_key, --tls_ca): the "
                 "group's token crosses the network in clear text\n");
  }
  options.collective_host = absl::GetFlag(FLAGS_host).empty()
                                ? CollectiveHost(listen)
                                : absl::GetFlag(FLAGS_host);
  return options;
}

// Waits for SIGTERM/SIGINT or the group's end; returns the exit code (1
// when the group failed or was replaced).
int WaitForStop() {
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  while (stop_signal == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (stop_signal == -1) {
    std::fprintf(stderr, "worker: its group failed or was replaced; exiting\n");
    return 1;
  }
  std::fprintf(stderr, "worker: signal %d, shutting down\n",
               static_cast<int>(stop_signal));
  return 0;
}

// gRPC's Shutdown cancels the calls still running after its deadline but
// then waits for their handlers, and one may be blocked for a collective
// timeout (a Load waiting for a peer that will never join, a Step whose
// peer died). This process is ending and its supervisor is waiting to
// start a fresh one, so past a grace period it ends without them.
void ShutDown(grpc::Server& server, int code) {
  std::thread([code] {
    std::this_thread::sleep_for(kShutdownGrace + std::chrono::seconds(2));
    std::fprintf(stderr,
                 "worker: a call was still running %lld s after shutdown "
                 "began; exiting without it\n",
                 static_cast<long long>(kShutdownGrace.count() + 2));
    std::fflush(stderr);
    std::_Exit(code);
  }).detach();
  server.Shutdown(std::chrono::system_clock::now() + kShutdownGrace);
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "one tensor-parallel rank of an octet model (started by the "
      "coordinator)");
  absl::ParseCommandLine(argc, argv);
  const std::string listen = absl::GetFlag(FLAGS_listen);
  if (listen.empty())
    return Fail("--listen is required (unix:PATH or HOST:PORT)");
  if (absl::Status s = EndWithParent(absl::GetFlag(FLAGS_parent_pid));
      !s.ok()) {
    return Fail(std::string(s.message()));
  }
  absl::StatusOr<octet::WorkerServiceOptions> options = ServiceOptions(listen);
  if (!options.ok()) return Fail(std::string(options.status().message()));
  const int health_port = absl::GetFlag(FLAGS_health_port);
  if (health_port < 0 || health_port > 65535) {
    return Fail(absl::StrCat("--health_port ", health_port, " is not a port"));
  }
  // A broken or replaced group ends this process (exit code 1) once the
  // answer saying so is on its way.
  options->on_group_failed = [] { stop_signal = -1; };
  octet::WorkerService service(*options);
  // grpc.health.v1 (no token needed): SERVING while this process listens,
  // for a supervisor's probes; whether a model is loaded is the
  // coordinator's Health call.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(listen, octet::TlsServerCredentials(options->tls));
  builder.RegisterService(&service);
  builder.SetMaxReceiveMessageSize(256 << 20);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr) return Fail("cannot listen on " + listen);
  std::fprintf(stderr, "worker: listening on %s%s\n", listen.c_str(),
               options->tls.ca.empty() ? "" : " (mutual TLS)");
  std::unique_ptr<octet::HealthOnlyServer> health;
  if (health_port != 0) {
    absl::StatusOr<std::unique_ptr<octet::HealthOnlyServer>> h =
        octet::HealthOnlyServer::Start(health_port);
    if (!h.ok()) return Fail(std::string(h.status().message()));
    health = *std::move(h);
  }
  const int code = WaitForStop();
  ShutDown(*server, code);
  health.reset();
  return code;
}
