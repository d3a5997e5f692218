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
// worker group is replaced by a new one. Ends on SIGINT or SIGTERM.
//
// The composition root: it reads the model's config and tokenizer with
// worker/'s readers, the one place the coordinator links worker/ code.
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <prometheus/exposer.h>
#include <unistd.h>

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
#include "coordinator/engine.h"
#include "coordinator/generation_service.h"
#include "coordinator/metrics.h"
#include "worker/file_util.h"
#include "worker/model_config.h"
#include "worker/tokenizer.h"

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

int Usage(const std::string& message) {
  std::fprintf(stderr, "coordinator: %s\n", message.c_str());
  return 2;
}

int Main() {
  const std::string model = absl::GetFlag(FLAGS_model);
  const int tp = absl::GetFlag(FLAGS_tp);
  const std::string quantization = absl::GetFlag(FLAGS_quantization);
  const std::string weight_scale = absl::GetFlag(FLAGS_weight_scale);
  const std::string device = absl::GetFlag(FLAGS_device);
  const std::string transport = absl::GetFlag(FLAGS_transport);
  const int port = absl::GetFlag(FLAGS_port);
  if (model.empty()) return Usage("--model is required");
  if (tp < 1 || tp > 64)
    return Usage(absl::StrCat("--tp ", tp, " is not in [1, 64]"));
  if (quantization != "fp8" && quantization != "none") {
    return Usage("--quantization must be fp8 or none, not '" + quantization +
                 "'");
  }
  if (weight_scale != "local" && weight_scale != "global") {
    return Usage("--weight_scale must be local or global, not '" +
                 weight_scale + "'");
  }
  if (device != "auto" && device != "cpu" && device != "cuda") {
    return Usage("--device must be auto, cpu or cuda, not '" + device + "'");
  }
  if (transport != "auto" && transport != "shm" && transport != "gloo") {
    return Usage("--transport must be auto, shm or gloo, not '" + transport +
                 "'");
  }
  if (port < 0 || port > 65535)
    return Usage(absl::StrCat("--port ", port, " is not a port"));
  const int metrics_port = absl::GetFlag(FLAGS_metrics_port);
  if (metrics_port < 0 || metrics_port > 65535) {
    return Usage(
        absl::StrCat("--metrics_port ", metrics_port, " is not a port"));
  }
  if (const std::string h = absl::GetFlag(FLAGS_rendezvous_host);
      h.find_first_of(" \t/") != std::string::npos ||
      (h.find(':') != std::string::npos && h.front() != '[')) {
    return Usage("--rendezvous_host '" + h +
                 "' is not a host name or address ([...] for IPv6)");
  }
  const int rendezvous_port = absl::GetFlag(FLAGS_rendezvous_port);
  if (rendezvous_port < 0 || rendezvous_port > 65535) {
    return Usage(
        absl::StrCat("--rendezvous_port ", rendezvous_port, " is not a port"));
  }
  const int block_size = absl::GetFlag(FLAGS_block_size);
  const int64_t kv_tokens = absl::GetFlag(FLAGS_kv_cache_tokens);
  if (block_size < 1 || kv_tokens < block_size) {
    return Usage("--block_size must be >= 1 and --kv_cache_tokens >= it");
  }
  if (absl::GetFlag(FLAGS_max_batch_tokens) < 1 ||
      absl::GetFlag(FLAGS_max_running) < 1 ||
      absl::GetFlag(FLAGS_max_queue) < 1 || absl::GetFlag(FLAGS_threads) < 0) {
    return Usage(
        "--max_batch_tokens, --max_running and --max_queue must be >= 1, "
        "--threads >= 0");
  }
  std::vector<std::string> remote;
  if (!absl::GetFlag(FLAGS_workers).empty()) {
    remote = absl::StrSplit(absl::GetFlag(FLAGS_workers), ',');
    if (static_cast<int>(remote.size()) != tp) {
      return Usage(absl::StrCat("--workers lists ", remote.size(),
                                " addresses for --tp ", tp));
    }
    for (const std::string& w : remote) {
      const size_t colon = w.rfind(':');
      int p = 0;
      if (colon == std::string::npos || colon == 0 ||
          !absl::SimpleAtoi(w.substr(colon + 1), &p) || p < 1 || p > 65535) {
        return Usage("--workers entry '" + w + "' is not HOST:PORT");
      }
    }
  }
  std::string token;
  if (!absl::GetFlag(FLAGS_token_file).empty()) {
    absl::StatusOr<std::string> t =
        ReadTokenFile(absl::GetFlag(FLAGS_token_file));
    if (!t.ok())
      return Usage("--token_file " + std::string(t.status().message()));
    token = *std::move(t);
  } else if (!remote.empty()) {
    return Usage("--workers needs --token_file (the workers' shared token)");
  }
  absl::StatusOr<ModelConfig> config = LoadModelConfig(model);
  if (!config.ok()) return Usage(std::string(config.status().message()));
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::Load(model);
  if (!tokenizer.ok() && !absl::IsNotFound(tokenizer.status())) {
    return Usage(std::string(tokenizer.status().message()));
  }
  const std::unique_ptr<Tokenizer> tok =
      tokenizer.ok() ? *std::move(tokenizer) : nullptr;
  if (tok == nullptr) {
    std::fprintf(stderr,
                 "coordinator: %s has no tokenizer.model: requests "
                 "must send token ids\n",
                 model.c_str());
  }

  // Metrics first: the engine counts into them from its start.
  Metrics metrics;
  std::unique_ptr<prometheus::Exposer> exposer;
  if (metrics_port != 0) {
    try {
      exposer = std::make_unique<prometheus::Exposer>(
          absl::StrCat("0.0.0.0:", metrics_port));
    } catch (const std::exception& e) {
      return Usage(absl::StrCat("cannot serve metrics on port ", metrics_port,
                                ": ", e.what()));
    }
    exposer->RegisterCollectable(metrics.registry());
    std::fprintf(stderr,
                 "coordinator: Prometheus metrics on port %d at /metrics\n",
                 metrics_port);
  }

  // The engine and its worker groups.
  const int64_t blocks = kv_tokens / block_size;
  WorkerGroupOptions g;
  g.tp = tp;
  g.worker_program =
      (std::filesystem::read_symlink("/proc/self/exe").parent_path() / "worker")
          .string();
  g.remote = remote;
  g.token = token;
  // Remote workers dial the address they were called from (wildcard host).
  g.rendezvous_listen = absl::StrCat(remote.empty() ? "127.0.0.1" : "0.0.0.0",
                                     ":", rendezvous_port);
  g.rendezvous_host = absl::GetFlag(FLAGS_rendezvous_host);
  g.load.set_model_dir(std::filesystem::absolute(model).string());
  g.load.set_quantization(quantization);
  g.load.set_global_weight_scale(weight_scale == "global");
  g.load.set_transport(transport != "auto" ? transport
                       : remote.empty()    ? "shm"
                                           : "gloo");
  g.load.set_device(device);
  g.load.set_kv_blocks(blocks);
  g.load.set_kv_block_size(block_size);
  int threads = absl::GetFlag(FLAGS_threads);
  if (threads == 0 && remote.empty()) {
    threads =
        std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / tp);
  }
  g.load.set_threads(threads);
  const bool terminal = isatty(STDERR_FILENO);
  EngineOptions e;
  e.scheduler = {.num_blocks = blocks,
                 .block_size = block_size,
                 .max_tokens_per_step = absl::GetFlag(FLAGS_max_batch_tokens),
                 .max_running = absl::GetFlag(FLAGS_max_running),
                 .max_waiting = absl::GetFlag(FLAGS_max_queue)};
  e.metrics = &metrics;
  // Health follows the engine as it changes (NOT_SERVING before a failed
  // group's requests end); the health service exists once the server is
  // built, which may be after the first group loaded.
  auto health = std::make_shared<Health>();
  e.on_serving = [health](bool serving, const absl::Status& why) {
    health->Set(serving);
    std::fprintf(stderr, "coordinator: health %s%s%s\n",
                 serving ? "SERVING" : "NOT_SERVING", why.ok() ? "" : ": ",
                 std::string(why.message()).c_str());
  };
  e.start_group = [g, terminal]() {
    std::fprintf(stderr, "coordinator: starting %d worker(s)\n", g.tp);
    auto group = WorkerGroup::Start(
        g, [&](int rank, const internal::v1::LoadProgress& p) {
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
  };
  if (tok != nullptr) {
    const Tokenizer* t = tok.get();
    e.new_decoder = [t] {
      return std::make_unique<StreamTextDecoder<TextStream>>(TextStream(*t));
    };
  }
  absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::Start(std::move(e));
  if (!engine.ok()) return Usage(std::string(engine.status().message()));

  ModelLimits limits;
  limits.vocab_size = config->vocab_size;
  limits.max_context = std::min(config->max_position_embeddings, kv_tokens);
  for (int64_t id : config->eos_token_ids)
    limits.eos_ids.push_back(static_cast<int32_t>(id));
  EncodeFn encode;
  if (tok != nullptr) {
    const Tokenizer* t = tok.get();
    encode = [t](const std::string& text) { return t->Encode(text, true); };
  }
  v1::ModelInfo info;
  info.set_model_name(std::filesystem::absolute(model).filename().string());
  info.set_architecture(config->architecture);
  info.set_quantization(quantization);
  info.set_tensor_parallel_size(tp);
  info.set_max_context_tokens(static_cast<uint32_t>(limits.max_context));
  info.set_vocab_size(static_cast<uint32_t>(config->vocab_size));
  GenerationService service(**engine, limits, encode, info, &metrics);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int bound = 0;
  builder.AddListeningPort(absl::StrCat("0.0.0.0:", port),
                           grpc::InsecureServerCredentials(), &bound);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || bound == 0) {
    return Usage(absl::StrCat("cannot listen on port ", port));
  }
  std::fprintf(stderr, "coordinator: serving octet.v1.Generation on port %d\n",
               bound);
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  health->Attach(server->GetHealthCheckService());
  while (stop_signal == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::fprintf(stderr, "coordinator: signal %d, shutting down\n",
               static_cast<int>(stop_signal));
  health->Detach();  // every service NOT_SERVING, liveness too
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
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
