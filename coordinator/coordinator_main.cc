// coordinator: serves a model over octet's public gRPC API, with one worker
// process per tensor-parallel rank.
//
//   coordinator --model DIR --tp 2 --quantization fp8
//
// Checks its flags and the model's config.json before anything starts (a
// bad one: a one-line error and exit code 2), spawns `worker` processes
// (found beside this program) on private Unix sockets, or connects to
// running ones (--workers, with --token_file), shows their load progress,
// and serves octet.v1.Generation, grpc.health.v1.Health (SERVING once every
// rank is loaded; "liveness" while the process answers) and server
// reflection on --port, and Prometheus metrics on --metrics_port. A failed
// worker group is replaced by a new one. On SIGTERM or SIGINT it drains:
// NOT_SERVING, new requests refused, running and queued ones finish (up to
// --drain_timeout), then it exits 0.
//
// The composition root: it reads the model's config and tokenizer with
// model/'s readers; it never links worker/ code (the workers are programs).
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <prometheus/exposer.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/engine.h"
#include "coordinator/generation_service.h"
#include "coordinator/metrics.h"
#include "kernels/status_macros.h"
#include "model/file_util.h"
#include "model/model_config.h"
#include "model/tokenizer.h"

ABSL_FLAG(std::string, model, "",
          "model directory (config.json, *.safetensors)");
ABSL_FLAG(int32_t, tp, 1, "tensor-parallel degree: worker processes to start");
ABSL_FLAG(std::string, quantization, "fp8", "fp8 or none");
ABSL_FLAG(std::string, weight_scale, "local",
          "FP8 weight scales per shard (local) or of the whole weight "
          "(global: results equal TP=1's)");
ABSL_FLAG(int32_t, port, 50051, "port of the public gRPC API");
ABSL_FLAG(std::string, device, "auto", "auto, cpu or cuda");
ABSL_FLAG(std::string, workers, "",
          "HOST:PORT of already running workers, one per rank, comma "
          "separated (instead of starting them)");
ABSL_FLAG(std::string, token_file, "",
          "file with the shared token remote workers require");
ABSL_FLAG(int32_t, rendezvous_port, 0,
          "with --workers: the port the workers reach this coordinator's "
          "rendezvous store on (0: any free one; the workers are told)");
ABSL_FLAG(std::string, rendezvous_host, "",
          "with --workers: the host the workers dial for the rendezvous "
          "store (default: the address they were called from; set it, e.g. "
          "to the pod IP, behind a proxy or NAT)");
ABSL_FLAG(std::string, transport, "auto",
          "CPU collectives between ranks: shm (one host), gloo (TCP) or "
          "auto (shm for spawned workers, gloo with --workers)");
ABSL_FLAG(int64_t, kv_cache_tokens, 32768,
          "KV-cache capacity in tokens, over all sequences");
ABSL_FLAG(int32_t, block_size, 16, "tokens per KV-cache block");
ABSL_FLAG(int64_t, max_batch_tokens, 2048, "token budget of one step");
ABSL_FLAG(int32_t, max_running, 64, "sequences in one step at most");
ABSL_FLAG(int32_t, max_queue, 1024,
          "waiting requests; more are refused with RESOURCE_EXHAUSTED");
ABSL_FLAG(int32_t, threads, 0, "CPU threads per worker; 0: cores / tp");
ABSL_FLAG(absl::Duration, drain_timeout, absl::Seconds(30),
          "on SIGTERM, how long running and queued requests may take to "
          "finish before they are cancelled (new ones are refused at once)");
ABSL_FLAG(int32_t, metrics_port, 0,
          "port of the Prometheus endpoint (http://HOST:PORT/metrics); 0: "
          "none");

namespace octet {
namespace {

volatile std::sig_atomic_t stop_signal = 0;

// grpc.health.v1 as the engine reports it: "" (the server) and
// octet.v1.Generation are SERVING while a loaded worker group serves
// (readiness); "liveness" is SERVING while this process answers at all,
// also while a failed group is replaced (a Kubernetes liveness probe must
// not restart it for that). Thread-safe.
class Health {
 public:
  void Set(bool serving) {
    absl::MutexLock lock(&mu_);
    serving_ = serving;
    Apply();
  }
  // The server's health service, once it runs.
  void Attach(grpc::HealthCheckServiceInterface* service) {
    absl::MutexLock lock(&mu_);
    service_ = service;
    service_->SetServingStatus("liveness", true);
    Apply();
  }
  // Shutting down: everything NOT_SERVING, and no more updates.
  void Detach() {
    absl::MutexLock lock(&mu_);
    if (service_ != nullptr) service_->SetServingStatus(false);
    service_ = nullptr;
  }

 private:
  void Apply() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (service_ == nullptr) return;
    service_->SetServingStatus("", serving_);
    service_->SetServingStatus("octet.v1.Generation", serving_);
  }
  absl::Mutex mu_;
  grpc::HealthCheckServiceInterface* service_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool serving_ ABSL_GUARDED_BY(mu_) = false;
};

void OnSignal(int sig) { stop_signal = sig; }

namespace rpc = internal::v1;

// The flags, checked: what the rest of Main works from.
struct CoordinatorOptions {
  std::string model;  // as given
  int tp = 1;
  std::string quantization;  // "fp8" or "none", as ModelInfo names it
  bool global_weight_scale = false;
  rpc::Device device = rpc::DEVICE_AUTO;
  rpc::Transport transport = rpc::TRANSPORT_SHM;
  int port = 0, metrics_port = 0;
  std::vector<std::string> remote;  // --workers; empty: spawn them
  std::string token;                // --token_file's content
  std::string rendezvous_host;
  int rendezvous_port = 0;
  int block_size = 0;
  int64_t kv_tokens = 0;
  int threads = 0;  // per worker; 0 resolved for spawned workers
  absl::Duration drain_timeout;
};

absl::Status Invalid(const std::string& message) {
  return absl::InvalidArgumentError(message);
}

absl::Status CheckPort(const char* flag, int port) {
  if (port >= 0 && port <= 65535) return absl::OkStatus();
  return Invalid(absl::StrCat("--", flag, " ", port, " is not a port"));
}

// The name-valued flags, into the worker protocol's enums.
absl::Status ParseChoices(CoordinatorOptions& o) {
  o.quantization = absl::GetFlag(FLAGS_quantization);
  if (o.quantization != "fp8" && o.quantization != "none") {
    return Invalid("--quantization must be fp8 or none, not '" +
                   o.quantization + "'");
  }
  const std::string weight_scale = absl::GetFlag(FLAGS_weight_scale);
  if (weight_scale != "local" && weight_scale != "global") {
    return Invalid("--weight_scale must be local or global, not '" +
                   weight_scale + "'");
  }
  o.global_weight_scale = weight_scale == "global";
  const std::string device = absl::GetFlag(FLAGS_device);
  if (device == "auto") {
    o.device = rpc::DEVICE_AUTO;
  } else if (device == "cpu") {
    o.device = rpc::DEVICE_CPU;
  } else if (device == "cuda") {
    o.device = rpc::DEVICE_CUDA;
  } else {
    return Invalid("--device must be auto, cpu or cuda, not '" + device + "'");
  }
  const std::string transport = absl::GetFlag(FLAGS_transport);
  if (transport != "auto" && transport != "shm" && transport != "gloo") {
    return Invalid("--transport must be auto, shm or gloo, not '" + transport +
                   "'");
  }
  // auto: shared memory between spawned workers, Gloo to remote ones.
  const bool gloo =
      transport == "gloo" ||
      (transport == "auto" && !absl::GetFlag(FLAGS_workers).empty());
  o.transport = gloo ? rpc::TRANSPORT_GLOO : rpc::TRANSPORT_SHM;
  return absl::OkStatus();
}

// --workers, --token_file and the rendezvous flags.
absl::Status ParseRemoteWorkers(CoordinatorOptions& o) {
  o.rendezvous_host = absl::GetFlag(FLAGS_rendezvous_host);
  const std::string& h = o.rendezvous_host;
  if (h.find_first_of(" \t/") != std::string::npos ||
      (h.find(':') != std::string::npos && h.front() != '[')) {
    return Invalid("--rendezvous_host '" + h +
                   "' is not a host name or address ([...] for IPv6)");
  }
  o.rendezvous_port = absl::GetFlag(FLAGS_rendezvous_port);
  OCTET_RETURN_IF_ERROR(CheckPort("rendezvous_port", o.rendezvous_port));
  if (!absl::GetFlag(FLAGS_workers).empty()) {
    o.remote = absl::StrSplit(absl::GetFlag(FLAGS_workers), ',');
    if (static_cast<int>(o.remote.size()) != o.tp) {
      return Invalid(absl::StrCat("--workers lists ", o.remote.size(),
                                  " addresses for --tp ", o.tp));
    }
    for (const std::string& w : o.remote) {
      const size_t colon = w.rfind(':');
      int p = 0;
      if (colon == std::string::npos || colon == 0 ||
          !absl::SimpleAtoi(w.substr(colon + 1), &p) || p < 1 || p > 65535) {
        return Invalid("--workers entry '" + w + "' is not HOST:PORT");
      }
    }
  }
  if (!absl::GetFlag(FLAGS_token_file).empty()) {
    absl::StatusOr<std::string> t =
        ReadTokenFile(absl::GetFlag(FLAGS_token_file));
    if (!t.ok()) {
      return Invalid("--token_file " + std::string(t.status().message()));
    }
    o.token = *std::move(t);
  } else if (!o.remote.empty()) {
    return Invalid("--workers needs --token_file (the workers' shared token)");
  }
  return absl::OkStatus();
}

// Every flag, checked before anything starts.
absl::StatusOr<CoordinatorOptions> ParseFlags() {
  CoordinatorOptions o;
  o.model = absl::GetFlag(FLAGS_model);
  o.tp = absl::GetFlag(FLAGS_tp);
  if (o.model.empty()) return Invalid("--model is required");
  if (o.tp < 1 || o.tp > 64) {
    return Invalid(absl::StrCat("--tp ", o.tp, " is not in [1, 64]"));
  }
  OCTET_RETURN_IF_ERROR(ParseChoices(o));
  o.port = absl::GetFlag(FLAGS_port);
  OCTET_RETURN_IF_ERROR(CheckPort("port", o.port));
  o.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  OCTET_RETURN_IF_ERROR(CheckPort("metrics_port", o.metrics_port));
  OCTET_RETURN_IF_ERROR(ParseRemoteWorkers(o));
  o.block_size = absl::GetFlag(FLAGS_block_size);
  o.kv_tokens = absl::GetFlag(FLAGS_kv_cache_tokens);
  if (o.block_size < 1 || o.kv_tokens < o.block_size) {
    return Invalid("--block_size must be >= 1 and --kv_cache_tokens >= it");
  }
  o.drain_timeout = absl::GetFlag(FLAGS_drain_timeout);
  if (o.drain_timeout < absl::ZeroDuration()) {
    return Invalid("--drain_timeout must be >= 0");
  }
  o.threads = absl::GetFlag(FLAGS_threads);
  if (absl::GetFlag(FLAGS_max_batch_tokens) < 1 ||
      absl::GetFlag(FLAGS_max_running) < 1 ||
      absl::GetFlag(FLAGS_max_queue) < 1 || o.threads < 0) {
    return Invalid(
        "--max_batch_tokens, --max_running and --max_queue must be >= 1, "
        "--threads >= 0");
  }
  if (o.threads == 0 && o.remote.empty()) {
    o.threads = std::max(
        1, static_cast<int>(std::thread::hardware_concurrency()) / o.tp);
  }
  return o;
}

// What the coordinator itself reads of the model: config.json (checked
// against the TP degree) and, when there is one, the tokenizer.
struct ModelFacts {
  ModelConfig config;
  std::unique_ptr<Tokenizer> tokenizer;  // null: token ids only
};

absl::StatusOr<ModelFacts> ReadModel(const std::string& dir, int tp) {
  ModelFacts m;
  OCTET_ASSIGN_OR_RETURN(m.config, LoadModelConfig(dir));
  // A split that cannot work fails every load the same way: say so now,
  // before any worker starts, rather than restart groups forever.
  if (absl::Status s = CheckTensorParallelSplit(m.config, tp); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(dir, ": --tp ", tp, ": ", s.message()));
  }
  OCTET_ASSIGN_OR_RETURN(m.tokenizer, LoadTokenizerFor(dir, m.config));
  if (m.tokenizer == nullptr) {
    std::fprintf(stderr,
                 "coordinator: %s has no tokenizer.model: requests "
                 "must send token ids\n",
                 dir.c_str());
  }
  return m;
}

// The Prometheus endpoint on --metrics_port (none for 0).
absl::StatusOr<std::unique_ptr<prometheus::Exposer>> ServeMetrics(
    int port, Metrics& metrics) {
  if (port == 0) return nullptr;
  std::unique_ptr<prometheus::Exposer> exposer;
  try {
    exposer =
        std::make_unique<prometheus::Exposer>(absl::StrCat("0.0.0.0:", port));
  } catch (const std::exception& e) {
    return Invalid(
        absl::StrCat("cannot serve metrics on port ", port, ": ", e.what()));
  }
  exposer->RegisterCollectable(metrics.registry());
  std::fprintf(
      stderr, "coordinator: Prometheus metrics on port %d at /metrics\n", port);
  return exposer;
}

// How each worker group is started and what its ranks load.
WorkerGroupOptions GroupOptions(const CoordinatorOptions& o) {
  WorkerGroupOptions g;
  g.tp = o.tp;
  g.worker_program =
      (std::filesystem::read_symlink("/proc/self/exe").parent_path() / "worker")
          .string();
  g.remote = o.remote;
  g.token = o.token;
  // Remote workers dial the address they were called from (wildcard host).
  g.rendezvous_listen = absl::StrCat(o.remote.empty() ? "127.0.0.1" : "0.0.0.0",
                                     ":", o.rendezvous_port);
  g.rendezvous_host = o.rendezvous_host;
  g.load.set_model_dir(std::filesystem::absolute(o.model).string());
  g.load.set_quantization(o.quantization == "fp8" ? rpc::QUANTIZATION_FP8
                                                  : rpc::QUANTIZATION_NONE);
  g.load.set_global_weight_scale(o.global_weight_scale);
  g.load.set_transport(o.transport);
  g.load.set_device(o.device);
  g.load.set_kv_blocks(o.kv_tokens / o.block_size);
  g.load.set_kv_block_size(o.block_size);
  g.load.set_threads(o.threads);
  return g;
}

// Starts a worker group, with rank 0's load progress on stderr (one
// rewritten line on a terminal).
absl::StatusOr<std::unique_ptr<WorkerGroup>> StartGroup(
    const WorkerGroupOptions& g, bool terminal) {
  std::fprintf(stderr, "coordinator: starting %d worker(s)\n", g.tp);
  auto group = WorkerGroup::Start(g, [&](int rank, const rpc::LoadProgress& p) {
    if (rank != 0) return;  // the ranks load in step
    std::fprintf(stderr,
                 terminal ? "\rcoordinator: loading %lld/%lld %s   "
                          : "coordinator: loading %lld/%lld %s\n",
                 static_cast<long long>(p.done()),
                 static_cast<long long>(p.total()), p.stage().c_str());
  });
  if (terminal) std::fprintf(stderr, "\n");
  if (!group.ok()) {
    std::fprintf(stderr, "coordinator: the workers did not start: %s\n",
                 std::string(group.status().message()).c_str());
  } else {
    std::fprintf(stderr, "coordinator: every rank is loaded\n");
  }
  return group;
}

// The engine's options: the scheduler's limits, how groups start, and
// health that follows the engine (NOT_SERVING before a failed group's
// requests end).
EngineOptions EngineOptionsFor(const CoordinatorOptions& o,
                               const ModelFacts& model, Metrics& metrics,
                               std::shared_ptr<Health> health) {
  EngineOptions e;
  e.scheduler = {.num_blocks = o.kv_tokens / o.block_size,
                 .block_size = o.block_size,
                 .max_tokens_per_step = absl::GetFlag(FLAGS_max_batch_tokens),
                 .max_running = absl::GetFlag(FLAGS_max_running),
                 .max_waiting = absl::GetFlag(FLAGS_max_queue)};
  e.metrics = &metrics;
  e.on_serving = [health](bool serving, const absl::Status& why) {
    health->Set(serving);
    std::fprintf(stderr, "coordinator: health %s%s%s\n",
                 serving ? "SERVING" : "NOT_SERVING", why.ok() ? "" : ": ",
                 std::string(why.message()).c_str());
  };
  e.start_group = [g = GroupOptions(o), terminal = isatty(STDERR_FILENO)] {
    return StartGroup(g, terminal);
  };
  // Failures in a row back off (1 s, doubling, up to a minute).
  e.on_start_failed = [](const absl::Status&, absl::Duration retry_in) {
    std::fprintf(stderr, "coordinator: next try in %s\n",
                 absl::FormatDuration(retry_in).c_str());
  };
  e.tokenizer = model.tokenizer.get();
  return e;
}

// What the public service checks requests against and says of the model.
ModelLimits LimitsOf(const CoordinatorOptions& o, const ModelConfig& config) {
  ModelLimits limits;
  limits.vocab_size = config.vocab_size;
  limits.max_context = std::min(config.max_position_embeddings, o.kv_tokens);
  for (int64_t id : config.eos_token_ids) {
    limits.eos_ids.push_back(static_cast<int32_t>(id));
  }
  return limits;
}

v1::ModelInfo InfoOf(const CoordinatorOptions& o, const ModelConfig& config,
                     const ModelLimits& limits) {
  v1::ModelInfo info;
  info.set_model_name(std::filesystem::absolute(o.model).filename().string());
  info.set_architecture(config.architecture);
  info.set_quantization(o.quantization);
  info.set_tensor_parallel_size(o.tp);
  info.set_max_context_tokens(static_cast<uint32_t>(limits.max_context));
  info.set_vocab_size(static_cast<uint32_t>(config.vocab_size));
  return info;
}

// SIGTERM (or SIGINT): NOT_SERVING at once, new requests refused, the
// running and queued ones finish for up to `drain_timeout` (a second signal
// cuts it short), then what is left is cancelled and the server stops.
void Drain(grpc::Server& server, Engine& engine, absl::Duration drain_timeout,
           Health& health) {
  const absl::Time start = absl::Now();
  health.Detach();  // every service NOT_SERVING, liveness too
  engine.Drain();
  const std::sig_atomic_t first = stop_signal;
  stop_signal = 0;
  std::fprintf(stderr,
               "coordinator: signal %d: draining %lld request(s) for up to "
               "%s\n",
               static_cast<int>(first),
               static_cast<long long>(engine.unfinished()),
               absl::FormatDuration(drain_timeout).c_str());
  const absl::Time deadline = start + drain_timeout;
  bool idle = false;
  while (!idle && stop_signal == 0 && absl::Now() < deadline) {
    idle = engine.WaitUntilIdle(
        std::min(deadline, absl::Now() + absl::Milliseconds(100)));
  }
  if (!idle) {
    std::fprintf(stderr, "coordinator: %s: cancelling %lld request(s)\n",
                 stop_signal != 0 ? "second signal" : "drain timeout",
                 static_cast<long long>(engine.unfinished()));
  }
  // Calls still open after this are cancelled; their requests end at the
  // engine's next step boundary.
  server.Shutdown(std::chrono::system_clock::now() +
                  std::chrono::milliseconds(500));
  std::fprintf(stderr, "coordinator: stopped after draining %.2f s\n",
               absl::ToDoubleSeconds(absl::Now() - start));
}

// Serves `service` (with health and reflection) on --port until SIGINT or
// SIGTERM, then drains; false when the port cannot be had.
bool Serve(GenerationService& service, Engine& engine,
           const CoordinatorOptions& o, Health& health) {
  const int port = o.port;
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int bound = 0;
  builder.AddListeningPort(absl::StrCat("0.0.0.0:", port),
                           grpc::InsecureServerCredentials(), &bound);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || bound == 0) return false;
  std::fprintf(stderr, "coordinator: serving octet.v1.Generation on port %d\n",
               bound);
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  health.Attach(server->GetHealthCheckService());
  while (stop_signal == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  Drain(*server, engine, o.drain_timeout, health);
  return true;
}

// A one-line error; the exit code of bad input.
int Usage(const std::string& message) {
  std::fprintf(stderr, "coordinator: %s\n", message.c_str());
  return 2;
}

// Flags → model → metrics → engine → serve. Exit code 2 for anything
// wrong before serving starts.
int Main() {
  absl::StatusOr<CoordinatorOptions> options = ParseFlags();
  if (!options.ok()) return Usage(std::string(options.status().message()));
  const CoordinatorOptions& o = *options;
  absl::StatusOr<ModelFacts> model = ReadModel(o.model, o.tp);
  if (!model.ok()) return Usage(std::string(model.status().message()));
  // Metrics first: the engine counts into them from its start.
  Metrics metrics;
  absl::StatusOr<std::unique_ptr<prometheus::Exposer>> exposer =
      ServeMetrics(o.metrics_port, metrics);
  if (!exposer.ok()) return Usage(std::string(exposer.status().message()));
  // The health service exists once the server is built, which may be after
  // the first group loaded.
  auto health = std::make_shared<Health>();
  absl::StatusOr<std::unique_ptr<Engine>> engine =
      Engine::Start(EngineOptionsFor(o, *model, metrics, health));
  if (!engine.ok()) return Usage(std::string(engine.status().message()));
  const ModelLimits limits = LimitsOf(o, model->config);
  EncodeFn encode;
  if (const Tokenizer* t = model->tokenizer.get(); t != nullptr) {
    encode = [t](const std::string& text) { return t->Encode(text, true); };
  }
  GenerationService service(**engine, limits, encode,
                            InfoOf(o, model->config, limits), &metrics);
  if (!Serve(service, **engine, o, *health)) {
    return Usage(absl::StrCat("cannot listen on port ", o.port));
  }
  engine->reset();
  return 0;
}

}  // namespace
}  // namespace octet

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "serves a model over octet's gRPC API: coordinator --model DIR --tp 2 "
      "--quantization fp8");
  absl::ParseCommandLine(argc, argv);
  return octet::Main();
}
