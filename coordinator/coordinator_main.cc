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
// reflection on --port (TLS only with --tls_cert, mutual with
// --tls_client_ca; --health_port serves health alone in plaintext for
// probes that cannot do TLS), OpenAI's HTTP API on --http_port (chat with
// the checkpoint's chat template; http_api.h), and Prometheus metrics on
// --metrics_port.
// With --worker_tls_ca the link to remote workers is mutual TLS
// (rpc/tls.h); a bad TLS file is a bad flag. A failed worker group
// is replaced by a new one. On SIGTERM or SIGINT it drains:
// NOT_SERVING (HTTP /health 503), new requests refused, running and queued
// ones finish, gRPC and HTTP streams alike (up to --drain_timeout), then it
// exits 0. Workers that fail to start the same way --max_start_failures
// times in a row end it with exit code 1.
//
// The composition root: it reads the model's config, tokenizer and chat
// template with model/'s readers; it never links worker/ code (the workers
// are programs).
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <prometheus/exposer.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "base/device_choice.h"
#include "base/file_util.h"
#include "base/status_macros.h"
#include "coordinator/engine.h"
#include "coordinator/generation_service.h"
#include "coordinator/http_api.h"
#include "coordinator/metrics.h"
#include "model/checkpoint.h"
#include "model/model_config.h"
#include "model/tokenizer.h"
#include "rpc/tls.h"

ABSL_FLAG(std::string, model, "",
          "the checkpoint: a Hugging Face directory (config.json, "
          "*.safetensors) or a GGUF file");
ABSL_FLAG(int32_t, tp, 1, "tensor-parallel degree: worker processes to start");
ABSL_FLAG(std::string, quantization, "auto",
          "auto (what the checkpoint's config.json says, else none), fp8 "
          "(an unquantized checkpoint is quantized at load) or none");
ABSL_FLAG(std::string, weight_scale, "global",
          "FP8 weight scales of the whole weight (global: results equal "
          "TP=1's) or per shard (local)");
ABSL_FLAG(bool, quantize_lm_head, false,
          "when serving FP8: the lm_head in FP8 too, one scale per "
          "vocabulary row (CPU workers only)");
ABSL_FLAG(std::string, activation_scales, "token",
          "when serving FP8: one dynamic activation scale per token (a "
          "request's results do not depend on its batch or on where its "
          "prompt is cut into chunks) or per sequence's rows in a step "
          "(sequence: prompts then run whole, never chunked)");
ABSL_FLAG(std::string, gemm_choices, "",
          "when serving FP8 on GPUs: the file that keeps which way each "
          "FP8 GEMM with per-sequence scales runs, measured at the first "
          "load (default: octet-gemm-choices.json beside the model)");
ABSL_FLAG(int32_t, port, 50051, "port of the public gRPC API");
ABSL_FLAG(std::string, device, "auto", "auto, cpu or cuda");
ABSL_FLAG(std::string, gpus, "",
          "CUDA device of each rank, comma separated (e.g. 0,0 puts two "
          "ranks on GPU 0; they then share it through host staging); empty: "
          "rank i on GPU i, remote workers on their GPU 0");
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
          "collectives between ranks: shm (one host), gloo (TCP), auto "
          "(shm for spawned workers, gloo with --workers; GPU ranks stage "
          "through host memory), or nccl (GPU ranks, one GPU each)");
ABSL_FLAG(int64_t, kv_cache_tokens, 32768,
          "KV-cache capacity in tokens, over all sequences");
ABSL_FLAG(int32_t, block_size, 16, "tokens per KV-cache block");
ABSL_FLAG(int64_t, max_tokens_per_step, 2048,
          "token budget of one step: decodes first, then prompts in chunks "
          "of what is left (a running stream waits at most one such step)");
ABSL_FLAG(bool, prefix_caching, true,
          "keep full KV-cache blocks after their request ends, for the next "
          "request that begins with the same tokens (a hit changes no "
          "result); --noprefix_caching: off. Always off with "
          "--activation_scales sequence");
ABSL_FLAG(int64_t, max_batch_tokens, 0,
          "the old name of --max_tokens_per_step (taken, with a warning); 0: "
          "unset");
ABSL_FLAG(int32_t, max_running, 64, "sequences in one step at most");
ABSL_FLAG(int32_t, max_queue, 1024,
          "checked requests waiting for a step; more are refused with "
          "RESOURCE_EXHAUSTED");
ABSL_FLAG(int32_t, max_checking, 1024,
          "requests waiting to be checked and tokenized; more are refused "
          "with RESOURCE_EXHAUSTED");
ABSL_FLAG(int32_t, threads, 0, "CPU threads per worker; 0: cores / tp");
ABSL_FLAG(absl::Duration, drain_timeout, absl::Seconds(30),
          "on SIGTERM, how long running and queued requests may take to "
          "finish before they are cancelled (new ones are refused at once)");
ABSL_FLAG(
    absl::Duration, step_timeout, absl::Minutes(5),
    "how long the workers may take for one step (at most "
    "--max_tokens_per_step tokens) before their group counts as stuck and "
    "is replaced; its requests resume on the new one");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate (chain) of the public API: with --tls_key, it "
          "takes TLS only");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert");
ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM CA certificate(s): clients of the API must present a "
          "certificate signed by one (mutual TLS; needs --tls_cert)");
ABSL_FLAG(std::string, worker_tls_ca, "",
          "with --workers: PEM CA certificate(s) that signed the workers' "
          "certificates; the link to them (and their rendezvous store) is "
          "then mutual TLS");
ABSL_FLAG(std::string, worker_tls_cert, "",
          "with --worker_tls_ca: this coordinator's PEM certificate toward "
          "the workers, also its rendezvous store's (default: --tls_cert)");
ABSL_FLAG(std::string, worker_tls_key, "",
          "PEM private key of --worker_tls_cert (default: --tls_key)");
ABSL_FLAG(int32_t, health_port, 0,
          "also serve grpc.health.v1 alone, in plaintext, on this port (for "
          "probes that cannot do TLS); 0: none");
ABSL_FLAG(int32_t, max_start_failures, 5,
          "when the workers fail to start this many times in a row with the "
          "same error, stop trying: end the waiting requests and exit 1 (for "
          "a supervisor to see); 0: retry for ever");
ABSL_FLAG(int32_t, http_port, 0,
          "port of the OpenAI-compatible HTTP API (/v1/completions, "
          "/v1/chat/completions, /v1/models, /health); 0: none");
ABSL_FLAG(int32_t, http_max_connections, 256,
          "HTTP connections served at once (each streaming client holds "
          "one); more wait for one to close");
ABSL_FLAG(std::string, served_model_name, "",
          "the model's name in both APIs (GetModelInfo, /v1/models, the "
          "\"model\" field requests must match); default: the --model "
          "path's last component");
ABSL_FLAG(int32_t, metrics_port, 0,
          "port of the Prometheus endpoint (http://HOST:PORT/metrics); 0: "
          "none");

namespace octet {
namespace {

volatile std::sig_atomic_t stop_signal = 0;
// Set when the engine gave up starting workers (--max_start_failures).
std::atomic<bool> gave_up{false};

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
  // A server's health service, once it runs (the API's, and the
  // --health_port server's when there is one: both say the same).
  void Attach(grpc::HealthCheckServiceInterface* service) {
    absl::MutexLock lock(&mu_);
    services_.push_back(service);
    service->SetServingStatus("liveness", true);
    Apply();
  }
  // Shutting down: everything NOT_SERVING, and no more updates.
  void Detach() {
    absl::MutexLock lock(&mu_);
    for (auto* service : services_) service->SetServingStatus(false);
    services_.clear();
  }

 private:
  void Apply() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (auto* service : services_) {
      service->SetServingStatus("", serving_);
      service->SetServingStatus("octet.v1.Generation", serving_);
    }
  }
  absl::Mutex mu_;
  std::vector<grpc::HealthCheckServiceInterface*> services_
      ABSL_GUARDED_BY(mu_);
  bool serving_ ABSL_GUARDED_BY(mu_) = false;
};

void OnSignal(int sig) { stop_signal = sig; }

namespace rpc = internal::v1;

// The flags, checked: what the rest of Main works from.
struct CoordinatorOptions {
  std::string model;  // as given
  int tp = 1;
  // The flag, then (ResolveMethod) "fp8" or "none", as ModelInfo names it.
  std::string quantization;
  std::string quantization_scheme;  // ModelInfo's, e.g. "fp8-tensor"
  bool global_weight_scale = false;
  bool quantize_lm_head = false;
  // --activation_scales sequence: FP8 scales per sequence, prompts whole.
  bool sequence_activation_scales = false;
  // Prompts cut into chunks (ResolveMethod: unless the FP8 scales are
  // dynamic and per sequence, which a chunk boundary would change).
  bool chunked_prefill = true;
  // --prefix_caching, and chunked prefill (ResolveMethod).
  bool prefix_caching = true;
  rpc::Device device = rpc::DEVICE_AUTO;
  rpc::Transport transport = rpc::TRANSPORT_SHM;
  int port = 0, metrics_port = 0;
  int http_port = 0;  // the OpenAI-compatible API; 0: none
  int http_max_connections = 0;
  std::string model_name;  // --served_model_name, or --model's last part
  std::vector<std::string> remote;  // --workers; empty: spawn them
  std::string token;                // --token_file's content
  TlsConfig api_tls;                // the public API's (empty: plaintext)
  TlsConfig worker_tls;  // the link to remote workers' (empty: plaintext)
  int health_port = 0;   // plaintext grpc.health.v1 alone; 0: none
  std::string rendezvous_host;
  int rendezvous_port = 0;
  std::vector<int> gpus;  // --gpus: each rank's CUDA device (empty: rank i)
  int block_size = 0;
  int64_t kv_tokens = 0;
  int threads = 0;  // per worker; 0 resolved for spawned workers
  absl::Duration drain_timeout;
  absl::Duration step_timeout;
  int max_start_failures = 0;
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
  if (o.quantization != "auto" && o.quantization != "fp8" &&
      o.quantization != "none") {
    return Invalid("--quantization must be auto, fp8 or none, not '" +
                   o.quantization + "'");
  }
  const std::string weight_scale = absl::GetFlag(FLAGS_weight_scale);
  if (weight_scale != "local" && weight_scale != "global") {
    return Invalid("--weight_scale must be local or global, not '" +
                   weight_scale + "'");
  }
  o.global_weight_scale = weight_scale == "global";
  o.quantize_lm_head = absl::GetFlag(FLAGS_quantize_lm_head);
  const std::string scales = absl::GetFlag(FLAGS_activation_scales);
  if (scales != "token" && scales != "sequence") {
    return Invalid("--activation_scales must be token or sequence, not '" +
                   scales + "'");
  }
  o.sequence_activation_scales = scales == "sequence";
  const absl::StatusOr<DeviceChoice> device =
      ParseDeviceChoice(absl::GetFlag(FLAGS_device));
  if (!device.ok()) {
    return Invalid(absl::StrCat("--device: ", device.status().message()));
  }
  o.device = *device == DeviceChoice::kCpu    ? rpc::DEVICE_CPU
             : *device == DeviceChoice::kCuda ? rpc::DEVICE_CUDA
                                              : rpc::DEVICE_AUTO;
  const std::string transport = absl::GetFlag(FLAGS_transport);
  if (transport != "auto" && transport != "shm" && transport != "gloo" &&
      transport != "nccl") {
    return Invalid("--transport must be auto, shm, gloo or nccl, not '" +
                   transport + "'");
  }
  if (transport == "nccl" && o.device != rpc::DEVICE_CUDA) {
    return Invalid("--transport nccl needs --device cuda");
  }
  // auto: shared memory between spawned workers, Gloo to remote ones.
  const bool gloo =
      transport == "gloo" ||
      (transport == "auto" && !absl::GetFlag(FLAGS_workers).empty());
  o.transport = transport == "nccl" ? rpc::TRANSPORT_NCCL
                : gloo              ? rpc::TRANSPORT_GLOO
                                    : rpc::TRANSPORT_SHM;
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
  if (!absl::GetFlag(FLAGS_gpus).empty()) {
    for (absl::string_view g : absl::StrSplit(absl::GetFlag(FLAGS_gpus), ',')) {
      int id = -1;
      if (!absl::SimpleAtoi(g, &id) || id < 0) {
        return Invalid(
            absl::StrCat("--gpus entry '", g, "' is not a CUDA device number"));
      }
      o.gpus.push_back(id);
    }
    if (static_cast<int>(o.gpus.size()) != o.tp) {
      return Invalid(absl::StrCat("--gpus lists ", o.gpus.size(),
                                  " devices for --tp ", o.tp));
    }
  }
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

// --tls_cert, --tls_key and --tls_client_ca: the public API's TLS.
absl::Status ParseApiTls(CoordinatorOptions& o) {
  OCTET_RETURN_IF_ERROR(ReadTlsIdentity(
      "tls_cert", absl::GetFlag(FLAGS_tls_cert), "tls_key",
      absl::GetFlag(FLAGS_tls_key), TlsRole::kServer, o.api_tls));
  const std::string client_ca = absl::GetFlag(FLAGS_tls_client_ca);
  if (client_ca.empty()) return absl::OkStatus();
  if (o.api_tls.cert_chain.empty()) {
    return Invalid("--tls_client_ca needs --tls_cert and --tls_key");
  }
  OCTET_ASSIGN_OR_RETURN(o.api_tls.ca,
                         ReadTlsCertificates("tls_client_ca", client_ca));
  return absl::OkStatus();
}

// --worker_tls_ca and this coordinator's certificate toward the workers
// (--worker_tls_cert/--worker_tls_key, or else --tls_cert/--tls_key): the
// link to remote workers. After ParseRemoteWorkers.
absl::Status ParseWorkerTls(CoordinatorOptions& o) {
  const std::string ca = absl::GetFlag(FLAGS_worker_tls_ca);
  const std::string cert = absl::GetFlag(FLAGS_worker_tls_cert);
  const std::string key = absl::GetFlag(FLAGS_worker_tls_key);
  if (ca.empty()) {
    if (!cert.empty() || !key.empty()) {
      return Invalid(
          "--worker_tls_cert and --worker_tls_key need "
          "--worker_tls_ca");
    }
    return absl::OkStatus();
  }
  if (o.remote.empty()) {
    return Invalid(
        "--worker_tls_ca applies to --workers (spawned workers "
        "are on private Unix sockets)");
  }
  const bool own = !cert.empty() || !key.empty();
  OCTET_RETURN_IF_ERROR(
      ReadTlsIdentity(own ? "worker_tls_cert" : "tls_cert",
                      own ? cert : absl::GetFlag(FLAGS_tls_cert),
                      own ? "worker_tls_key" : "tls_key",
                      own ? key : absl::GetFlag(FLAGS_tls_key),
                      TlsRole::kServerAndClient, o.worker_tls));
  if (o.worker_tls.cert_chain.empty()) {
    return Invalid(
        "--worker_tls_ca needs this coordinator's certificate for the "
        "workers: --worker_tls_cert and --worker_tls_key (or --tls_cert and "
        "--tls_key)");
  }
  OCTET_ASSIGN_OR_RETURN(o.worker_tls.ca,
                         ReadTlsCertificates("worker_tls_ca", ca));
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
  o.http_port = absl::GetFlag(FLAGS_http_port);
  OCTET_RETURN_IF_ERROR(CheckPort("http_port", o.http_port));
  o.http_max_connections = absl::GetFlag(FLAGS_http_max_connections);
  if (o.http_max_connections < 1 || o.http_max_connections > 4096) {
    return Invalid(absl::StrCat("--http_max_connections ",
                                o.http_max_connections,
                                " is not in [1, 4096]"));
  }
  o.model_name = absl::GetFlag(FLAGS_served_model_name);
  if (o.model_name.empty()) {
    o.model_name = std::filesystem::absolute(o.model).filename().string();
  }
  if (o.model_name.size() > 256 ||
      o.model_name.find_first_of("\r\n\t\"") != std::string::npos) {
    return Invalid("--served_model_name must be at most 256 characters, "
                   "without quotes or line breaks");
  }
  OCTET_RETURN_IF_ERROR(ParseRemoteWorkers(o));
  OCTET_RETURN_IF_ERROR(ParseApiTls(o));
  OCTET_RETURN_IF_ERROR(ParseWorkerTls(o));
  o.health_port = absl::GetFlag(FLAGS_health_port);
  OCTET_RETURN_IF_ERROR(CheckPort("health_port", o.health_port));
  if (o.http_port != 0 && (o.http_port == o.port ||
                           o.http_port == o.metrics_port ||
                           o.http_port == o.health_port)) {
    return Invalid(absl::StrCat("--http_port ", o.http_port,
                                " is another of the coordinator's ports"));
  }
  o.block_size = absl::GetFlag(FLAGS_block_size);
  o.kv_tokens = absl::GetFlag(FLAGS_kv_cache_tokens);
  if (o.block_size < 1 || o.kv_tokens < o.block_size) {
    return Invalid("--block_size must be >= 1 and --kv_cache_tokens >= it");
  }
  o.drain_timeout = absl::GetFlag(FLAGS_drain_timeout);
  if (o.drain_timeout < absl::ZeroDuration()) {
    return Invalid("--drain_timeout must be >= 0");
  }
  o.step_timeout = absl::GetFlag(FLAGS_step_timeout);
  if (o.step_timeout <= absl::ZeroDuration()) {
    return Invalid("--step_timeout must be > 0");
  }
  o.max_start_failures = absl::GetFlag(FLAGS_max_start_failures);
  if (o.max_start_failures < 0) {
    return Invalid("--max_start_failures must be >= 0");
  }
  o.threads = absl::GetFlag(FLAGS_threads);
  if (const int64_t old = absl::GetFlag(FLAGS_max_batch_tokens); old != 0) {
    std::fprintf(stderr,
                 "coordinator: --max_batch_tokens is now "
                 "--max_tokens_per_step; taking %lld\n",
                 static_cast<long long>(old));
    absl::SetFlag(&FLAGS_max_tokens_per_step, old);
  }
  if (absl::GetFlag(FLAGS_max_tokens_per_step) < 1 ||
      absl::GetFlag(FLAGS_max_running) < 1 ||
      absl::GetFlag(FLAGS_max_queue) < 1 ||
      absl::GetFlag(FLAGS_max_checking) < 1 || o.threads < 0) {
    return Invalid(
        "--max_tokens_per_step, --max_running, --max_queue and "
        "--max_checking must be >= 1, --threads >= 0");
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
  std::optional<ChatTemplate> chat_template;  // none: no chat over HTTP
  std::string no_chat_reason;                 // then why
};

// The checkpoint's chat template, compiled; a model without one, or with
// one octet cannot render, still serves prompts (said on stderr).
void ReadChatTemplate(const std::string& path, ModelFacts& m) {
  absl::StatusOr<std::optional<ChatTemplateSource>> source =
      ReadCheckpointChatTemplate(path);
  absl::Status why;
  if (!source.ok()) {
    why = source.status();
  } else if (!source->has_value()) {
    m.no_chat_reason = "this model has no chat template";
    return;
  } else {
    absl::StatusOr<ChatTemplate> compiled =
        ChatTemplate::Compile(**std::move(source));
    if (compiled.ok()) {
      std::fprintf(stderr, "coordinator: chat template from %s\n",
                   compiled->where().c_str());
      m.chat_template.emplace(*std::move(compiled));
      return;
    }
    why = compiled.status();
  }
  m.no_chat_reason = absl::StrCat(
      "this model's chat template cannot be used: ", why.message());
  std::fprintf(stderr, "coordinator: no chat: %s\n", m.no_chat_reason.c_str());
}

absl::StatusOr<ModelFacts> ReadModel(const std::string& dir, int tp) {
  ModelFacts m;
  OCTET_ASSIGN_OR_RETURN(m.config, ReadCheckpointConfig(dir));
  // A split that cannot work fails every load the same way: say so now,
  // before any worker starts, rather than restart groups forever.
  if (absl::Status s = CheckTensorParallelSplit(m.config, tp); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(dir, ": --tp ", tp, ": ", s.message()));
  }
  OCTET_ASSIGN_OR_RETURN(m.tokenizer, ReadCheckpointTokenizer(dir, m.config));
  ReadChatTemplate(dir, m);
  if (m.tokenizer == nullptr) {
    std::fprintf(
        stderr,
        "coordinator: %s has no tokenizer (tokenizer.model, tokenizer.json or "
        "a GGUF tokenizer.ggml): requests "
        "must send token ids\n",
        dir.c_str());
  }
  return m;
}

// --quantization against the checkpoint (ResolveQuantization): the method
// the workers load, and its scheme.
absl::Status ResolveMethod(CoordinatorOptions& o, const ModelConfig& config) {
  const std::string flag = o.quantization;
  OCTET_ASSIGN_OR_RETURN(o.quantization,
                         ResolveQuantization(flag, config, o.model));
  if (o.quantize_lm_head && o.quantization != "fp8") {
    return Invalid(
        "--quantize_lm_head needs FP8 serving (--quantization fp8, or auto "
        "on an FP8 checkpoint)");
  }
  o.quantization_scheme = QuantizationScheme(config, o.quantization);
  const bool at_load = o.quantization == "fp8" && !config.fp8;
  const bool dynamic = o.quantization == "fp8" &&
                       !(config.fp8 && config.fp8->static_activations);
  const bool per_token = !o.sequence_activation_scales ||
                         (config.fp8 && config.fp8->activation_per_token);
  o.chunked_prefill = !dynamic || per_token;
  const bool caching = absl::GetFlag(FLAGS_prefix_caching);
  o.prefix_caching = caching && o.chunked_prefill;
  std::fprintf(stderr, "coordinator: quantization %s (%s)%s%s%s; %s\n",
               o.quantization.c_str(), o.quantization_scheme.c_str(),
               flag == "auto" ? ", as the checkpoint's config.json says" : "",
               at_load ? ", quantized at load" : "",
               !dynamic    ? ""
               : per_token ? ", activation scales per token"
                           : ", activation scales per sequence (prompts "
                             "whole, not chunked)",
               o.prefix_caching ? "prefix caching on"
               : caching        ? "no prefix caching (it needs chunks)"
                                : "no prefix caching (--noprefix_caching)");
  return absl::OkStatus();
}

// Bytes this machine can still give processes: MemAvailable, or less
// under a cgroup v2 memory limit (a container's); nullopt if unknown.
std::optional<int64_t> AvailableMemory() {
  std::optional<int64_t> available;
  std::ifstream meminfo("/proc/meminfo");
  for (std::string line; std::getline(meminfo, line);) {
    int64_t kib = 0;
    if (line.rfind("MemAvailable:", 0) == 0 &&
        absl::SimpleAtoi(
            absl::StripSuffix(absl::StripAsciiWhitespace(line.substr(13)),
                              " kB"),
            &kib)) {
      available = kib * 1024;
    }
  }
  int64_t limit = 0, used = 0;
  std::string max_text, current_text;
  if (std::ifstream("/sys/fs/cgroup/memory.max") >> max_text &&
      std::ifstream("/sys/fs/cgroup/memory.current") >> current_text &&
      absl::SimpleAtoi(max_text, &limit) &&
      absl::SimpleAtoi(current_text, &used)) {  // "max": no limit
    const int64_t left = std::max<int64_t>(0, limit - used);
    available = available.has_value() ? std::min(*available, left) : left;
  }
  return available;
}

std::string GiB(int64_t bytes) {
  return absl::StrFormat("%.2f GiB", static_cast<double>(bytes) / (1 << 30));
}

// Spawned CPU workers live in this machine's memory: a model and KV cache
// that cannot fit fail every load alike (or wake the OOM killer), so a
// need beyond what is available is a bad flag, said before any worker
// starts. (GPU and remote workers' memory is not known here.)
absl::Status CheckMemory(const CoordinatorOptions& o,
                         const ModelConfig& config) {
  const bool cpu = o.device == rpc::DEVICE_CPU ||
                   (o.device == rpc::DEVICE_AUTO &&
                    !std::filesystem::exists("/dev/nvidiactl"));
  if (!o.remote.empty() || !cpu) return absl::OkStatus();
  const std::optional<int64_t> available = AvailableMemory();
  const MemoryNeed need = LeastMemoryNeed(
      config, o.tp, o.quantization == "fp8" ? 1 : 2, o.kv_tokens);
  if (!available.has_value() || need.total() <= *available) {
    return absl::OkStatus();
  }
  return Invalid(absl::StrCat(
      o.model, ": the workers need at least ", GiB(need.total()),
      " of memory (weights ", GiB(need.weights), ", KV cache of ", o.kv_tokens,
      " tokens ", GiB(need.kv_cache), ") but ", GiB(*available),
      " is available: lower --kv_cache_tokens or --tp, or "
      "give it more memory"));
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
  g.gpus = o.gpus;
  g.token = o.token;
  g.tls = o.worker_tls;
  // Remote workers dial the address they were called from (wildcard host).
  g.rendezvous_listen = absl::StrCat(o.remote.empty() ? "127.0.0.1" : "0.0.0.0",
                                     ":", o.rendezvous_port);
  g.rendezvous_host = o.rendezvous_host;
  g.step_timeout = o.step_timeout;
  g.load.set_model_dir(std::filesystem::absolute(o.model).string());
  g.load.set_quantization(o.quantization == "fp8" ? rpc::QUANTIZATION_FP8
                                                  : rpc::QUANTIZATION_NONE);
  g.load.set_global_weight_scale(o.global_weight_scale);
  g.load.set_quantize_lm_head(o.quantize_lm_head);
  g.load.set_sequence_activation_scales(o.sequence_activation_scales);
  g.load.set_transport(o.transport);
  g.load.set_max_tokens_per_step(absl::GetFlag(FLAGS_max_tokens_per_step));
  g.load.set_gemm_choices_file(absl::GetFlag(FLAGS_gemm_choices));
  g.load.set_device(o.device);
  g.load.set_kv_blocks(o.kv_tokens / o.block_size);
  g.load.set_kv_block_size(o.block_size);
  g.load.set_threads(o.threads);
  return g;
}

// Starts a worker group, with rank 0's load progress on stderr (one
// rewritten line on a terminal).
absl::StatusOr<std::unique_ptr<WorkerGroup>> StartGroup(
    const WorkerGroupOptions& g, bool terminal, StartCancel& cancel) {
  std::fprintf(stderr, "coordinator: starting %d worker(s)\n", g.tp);
  const auto show = [&](int rank, const rpc::LoadProgress& p) {
    if (rank != 0) return;  // the ranks load in step
    std::fprintf(stderr,
                 terminal ? "\rcoordinator: loading %lld/%lld %s   "
                          : "coordinator: loading %lld/%lld %s\n",
                 static_cast<long long>(p.done()),
                 static_cast<long long>(p.total()), p.stage().c_str());
  };
  auto group = WorkerGroup::Start(g, show, &cancel);
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
  e.scheduler = {
      .num_blocks = o.kv_tokens / o.block_size,
      .block_size = o.block_size,
      .max_tokens_per_step = absl::GetFlag(FLAGS_max_tokens_per_step),
      .chunked_prefill = o.chunked_prefill,
      .prefix_caching = o.prefix_caching,
      .max_running = absl::GetFlag(FLAGS_max_running),
      .max_waiting = absl::GetFlag(FLAGS_max_queue)};
  e.metrics = &metrics;
  e.on_serving = [health](bool serving, const absl::Status& why) {
    health->Set(serving);
    std::fprintf(stderr, "coordinator: health %s%s%s\n",
                 serving ? "SERVING" : "NOT_SERVING", why.ok() ? "" : ": ",
                 std::string(why.message()).c_str());
  };
  e.start_group = [g = GroupOptions(o),
                   terminal = isatty(STDERR_FILENO)](StartCancel& cancel) {
    return StartGroup(g, terminal, cancel);
  };
  // Failures in a row back off (1 s, doubling, up to a minute).
  e.on_start_failed = [](const absl::Status&, absl::Duration retry_in) {
    std::fprintf(stderr, "coordinator: next try in %s\n",
                 absl::FormatDuration(retry_in).c_str());
  };
  e.max_start_failures = o.max_start_failures;
  e.on_gave_up = [](const absl::Status& why) {
    std::fprintf(stderr, "coordinator: giving up: %s\n",
                 std::string(why.message()).c_str());
    gave_up = true;
  };
  e.tokenizer = model.tokenizer.get();
  return e;
}

// What the public service checks requests against and says of the model.
ModelLimits LimitsOf(const CoordinatorOptions& o, const ModelConfig& config,
                     const Tokenizer* tokenizer) {
  ModelLimits limits;
  limits.vocab_size = config.vocab_size;
  // Whole KV blocks: a request that fits the context fits the cache.
  limits.max_context = std::min(config.max_position_embeddings,
                                o.kv_tokens / o.block_size * o.block_size);
  if (tokenizer != nullptr)
    limits.max_token_bytes = tokenizer->max_token_bytes();
  for (int64_t id : config.eos_token_ids) {
    limits.eos_ids.push_back(static_cast<int32_t>(id));
  }
  return limits;
}

v1::ModelInfo InfoOf(const CoordinatorOptions& o, const ModelConfig& config,
                     const ModelLimits& limits) {
  v1::ModelInfo info;
  info.set_model_name(o.model_name);
  info.set_architecture(config.architecture);
  info.set_quantization(o.quantization);
  info.set_quantization_scheme(o.quantization_scheme);
  info.set_tensor_parallel_size(o.tp);
  info.set_max_context_tokens(static_cast<uint32_t>(limits.max_context));
  info.set_vocab_size(static_cast<uint32_t>(config.vocab_size));
  return info;
}

// SIGTERM (or SIGINT): NOT_SERVING at once, new requests refused, the
// running and queued ones finish for up to `drain_timeout` (a second signal
// cuts it short), then what is left is cancelled and the server stops.
void Drain(grpc::Server& server, HttpApi* http, Engine& engine,
           absl::Duration drain_timeout, Health& health) {
  const absl::Time start = absl::Now();
  health.Detach();  // every service NOT_SERVING, liveness too
  if (http != nullptr) http->Drain();  // its /health too
  engine.Drain();
  const std::sig_atomic_t first = stop_signal;
  stop_signal = 0;
  const std::string why =
      first != 0 ? absl::StrCat("signal ", first) : std::string("gave up");
  std::fprintf(stderr,
               "coordinator: %s: draining %lld request(s) for up to %s\n",
               why.c_str(), static_cast<long long>(engine.unfinished()),
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
  // Calls and streams still open after this are cancelled; their requests
  // end at the engine's next step boundary.
  if (http != nullptr) http->Stop();
  server.Shutdown(std::chrono::system_clock::now() +
                  std::chrono::milliseconds(500));
  std::fprintf(stderr, "coordinator: stopped after draining %.2f s\n",
               absl::ToDoubleSeconds(absl::Now() - start));
}

// Serves `service` (with health and reflection) on --port until SIGINT or
// SIGTERM (or the engine gives up), then drains; an error when a port
// cannot be had. Over TLS with --tls_cert; health alone, in plaintext, also
// on --health_port.
absl::Status Serve(GenerationService& service, HttpApi* http, Engine& engine,
                   const CoordinatorOptions& o, Health& health) {
  const int port = o.port;
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  int bound = 0;
  builder.AddListeningPort(absl::StrCat("0.0.0.0:", port),
                           TlsServerCredentials(o.api_tls), &bound);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || bound == 0) {
    return Invalid(absl::StrCat("cannot listen on port ", port));
  }
  std::fprintf(stderr,
               "coordinator: serving octet.v1.Generation on port %d%s\n", bound,
               o.api_tls.cert_chain.empty() ? ""
               : o.api_tls.ca.empty()       ? " (TLS)"
                                            : " (mutual TLS)");
  std::unique_ptr<HealthOnlyServer> health_server;
  if (o.health_port != 0) {
    OCTET_ASSIGN_OR_RETURN(health_server,
                           HealthOnlyServer::Start(o.health_port));
    health.Attach(health_server->health());
  }
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  health.Attach(server->GetHealthCheckService());
  while (stop_signal == 0 && !gave_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  Drain(*server, http, engine, o.drain_timeout, health);
  health_server.reset();
  return absl::OkStatus();
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
  CoordinatorOptions& o = *options;
  if (!o.remote.empty() && o.worker_tls.ca.empty()) {
    std::fprintf(stderr,
                 "coordinator: --workers without --worker_tls_ca: the "
                 "workers' token crosses the network in clear text\n");
  }
  absl::StatusOr<ModelFacts> model = ReadModel(o.model, o.tp);
  if (!model.ok()) return Usage(std::string(model.status().message()));
  if (absl::Status s = ResolveMethod(o, model->config); !s.ok()) {
    return Usage(std::string(s.message()));
  }
  if (absl::Status s = CheckMemory(o, model->config); !s.ok()) {
    return Usage(std::string(s.message()));
  }
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
  const ModelLimits limits = LimitsOf(o, model->config, model->tokenizer.get());
  EncodeFn encode;
  if (const Tokenizer* t = model->tokenizer.get(); t != nullptr) {
    encode = [t](const std::string& text) { return t->Encode(text, true); };
  }
  // Two threads check and tokenize requests, --max_checking waiting.
  GenerationService service(
      **engine, limits, encode, InfoOf(o, model->config, limits), &metrics,
      /*check_threads=*/2, absl::GetFlag(FLAGS_max_checking));
  // The OpenAI-compatible API, on --http_port.
  std::unique_ptr<HttpApi> http;
  if (o.http_port != 0) {
    absl::StatusOr<std::unique_ptr<HttpApi>> started = HttpApi::Start(
        **engine,
        {.port = o.http_port,
         .max_connections = o.http_max_connections,
         .model = o.model_name,
         .limits = limits,
         .tokenizer = model->tokenizer.get(),
         .chat_template = model->chat_template ? &*model->chat_template
                                               : nullptr,
         .no_chat_reason = model->no_chat_reason,
         .metrics = &metrics});
    if (!started.ok()) return Usage(std::string(started.status().message()));
    http = *std::move(started);
    std::fprintf(stderr,
                 "coordinator: serving the OpenAI API over HTTP on port %d\n",
                 http->port());
  }
  if (absl::Status s = Serve(service, http.get(), **engine, o, *health);
      !s.ok()) {
    return Usage(std::string(s.message()));
  }
  http.reset();
  engine->reset();
  return gave_up ? 1 : 0;
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
