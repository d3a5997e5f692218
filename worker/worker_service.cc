#include "worker/worker_service.h"

#include <atomic>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/time.h"
#include "base/status_macros.h"
#include "rpc/bearer_token.h"
#include "rpc/grpc_status.h"
#include "rpc/store.h"
#include "worker/backends.h"
#include "worker/tp_group.h"

namespace octet {
namespace {

namespace rpc = internal::v1;

grpc::Status Invalid(const std::string& message) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, message);
}

DeviceChoice ToDeviceChoice(rpc::Device d) {
  switch (d) {
    case rpc::DEVICE_CPU:
      return DeviceChoice::kCpu;
    case rpc::DEVICE_CUDA:
      return DeviceChoice::kCuda;
    default:
      return DeviceChoice::kAuto;
  }
}

CpuTransport ToCpuTransport(rpc::Transport t) {
  return t == rpc::TRANSPORT_GLOO ? CpuTransport::kGloo : CpuTransport::kShm;
}

grpc::Status CheckLoadRequest(const rpc::LoadRequest& r) {
  if (r.model_dir().empty()) return Invalid("load: model_dir is empty");
  if (r.quantization() != rpc::QUANTIZATION_NONE &&
      r.quantization() != rpc::QUANTIZATION_FP8) {
    return Invalid(absl::StrCat(
        "load: quantization must be QUANTIZATION_NONE or QUANTIZATION_FP8 "
        "(got ",
        r.quantization(), ")"));
  }
  if (!rpc::Device_IsValid(r.device())) {
    return Invalid(absl::StrCat("load: device ", r.device(), " is unknown"));
  }
  if (!rpc::Transport_IsValid(r.transport())) {
    return Invalid(
        absl::StrCat("load: transport ", r.transport(), " is unknown"));
  }
  if (r.world_size() < 1 || r.rank() < 0 || r.rank() >= r.world_size()) {
    return Invalid(absl::StrCat("load: rank ", r.rank(), " is not in [0, ",
                                r.world_size(), ")"));
  }
  if (r.world_size() > 1 && r.rendezvous_address().empty()) {
    return Invalid("load: rendezvous_address is needed for world_size > 1");
  }
  if (r.kv_blocks() < 1 || r.kv_block_size() < 1) {
    return Invalid(absl::StrCat("load: kv_blocks ", r.kv_blocks(),
                                " and kv_block_size ", r.kv_block_size(),
                                " must be at least 1"));
  }
  if (r.threads() < 0) return Invalid("load: threads must be >= 0");
  if (r.cuda_device() < 0) return Invalid("load: cuda_device must be >= 0");
  if (r.collective_timeout_ms() < 0) {
    return Invalid("load: collective_timeout_ms must be >= 0");
  }
  if (r.max_tokens_per_step() < 0) {
    return Invalid("load: max_tokens_per_step must be >= 0");
  }
  return grpc::Status::OK;
}

}  // namespace

bool IsWildcardHost(const std::string& host) {
  return host.empty() || host == "0.0.0.0" || host == "::" || host == "[::]";
}

absl::StatusOr<std::string> RendezvousTarget(const std::string& address,
                                             const std::string& peer) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "load: rendezvous_address '", address, "' is not HOST:PORT"));
  }
  if (!IsWildcardHost(address.substr(0, colon))) return address;
  // The caller's host: "ipv4:1.2.3.4:567" or "ipv6:[::1]:567", which newer
  // gRPC writes URI-escaped ("ipv6:%5B::1%5D:567").
  const std::string caller = absl::StrReplaceAll(
      peer, {{"%5B", "["}, {"%5D", "]"}, {"%5b", "["}, {"%5d", "]"}});
  const size_t peer_colon = caller.rfind(':');
  if ((absl::StartsWith(caller, "ipv4:") ||
       absl::StartsWith(caller, "ipv6:")) &&
      peer_colon > 5) {
    return absl::StrCat(caller.substr(5, peer_colon - 5),
                        address.substr(colon));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("load: rendezvous_address '", address,
                   "' names no host and the call came from '", peer, "'"));
}

WorkerService::~WorkerService() = default;

grpc::Status WorkerService::Authorize(
    const grpc::ServerContext& context) const {
  return CheckBearerToken(options_.token, context);
}

namespace {

// A Load its caller gave up on (the coordinator cancels every rank's when
// one fails) leaves this worker joining a group that will never serve: it
// ends at once (`on_abandoned`, the worker's exit), so that its supervisor
// starts a fresh one for the next attempt, instead of waiting out the
// group's timeout while the next attempt finds it taken. Watches from
// construction to destruction.
class AbandonedLoadWatch {
 public:
  AbandonedLoadWatch(grpc::ServerContext* context,
                     std::function<void()> on_abandoned)
      : thread_([this, context, on_abandoned = std::move(on_abandoned)] {
          while (!ended_.load()) {
            if (context->IsCancelled()) {
              if (on_abandoned) on_abandoned();
              return;
            }
            absl::SleepFor(absl::Milliseconds(50));
          }
        }) {}
  ~AbandonedLoadWatch() {
    ended_.store(true);
    thread_.join();
  }

 private:
  std::atomic<bool> ended_{false};
  std::thread thread_;
};

}  // namespace

grpc::Status WorkerService::ClaimLoad(const rpc::LoadRequest& request) {
  absl::MutexLock lock(&mu_);
  if (loaded_ != nullptr || loading_) {
    if (request.group() == group_) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          "load: this worker has loaded (or is loading) "
                          "this group's model already");
    }
    // A new group (a restarted coordinator, or a replacement after
    // another rank failed): this process cannot leave its old group's
    // collectives cleanly, so it ends and its supervisor starts a fresh
    // one, which the coordinator's next attempt loads.
    if (options_.on_group_failed) options_.on_group_failed();
    return grpc::Status(
        grpc::StatusCode::UNAVAILABLE,
        absl::StrCat("load: this worker belongs to group '", group_,
                     "'; it exits so that a fresh one can join '",
                     request.group(), "'"));
  }
  loading_ = true;
  group_ = request.group();
  return grpc::Status::OK;
}

grpc::Status WorkerService::Load(
    grpc::ServerContext* context, const rpc::LoadRequest* request,
    grpc::ServerWriter<rpc::LoadProgress>* writer) {
  if (grpc::Status s = Authorize(*context); !s.ok()) return s;
  if (grpc::Status s = CheckLoadRequest(*request); !s.ok()) return s;
  if (grpc::Status s = ClaimLoad(*request); !s.ok()) return s;
  AbandonedLoadWatch watch(context, options_.on_group_failed);
  // Loading takes long and runs outside the lock, so that Health answers.
  auto result = std::make_unique<Loaded>();
  const Progress report = [writer](int64_t done, int64_t total,
                                   const std::string& stage) {
    rpc::LoadProgress p;
    p.set_done(done);
    p.set_total(total);
    p.set_stage(stage);
    writer->Write(p);
  };
  const absl::Status s =
      LoadRank(*request, context->peer(), report, result.get());
  if (s.ok()) {
    // The last message says what the rank computes in (ModelInfo.dtype).
    const int64_t layers = result->model->config().num_layers;
    rpc::LoadProgress loaded;
    loaded.set_done(layers);
    loaded.set_total(layers);
    loaded.set_stage("loaded");
    loaded.set_activation_dtype(
        std::string(DTypeLongName(result->backend->activation_dtype())));
    writer->Write(loaded);
  }
  absl::MutexLock lock(&mu_);
  loading_ = false;
  if (!s.ok()) {
    return ToGrpc(absl::Status(
        s.code(), absl::StrCat("rank ", request->rank(), ": ", s.message())));
  }
  description_ =
      absl::StrCat(result->backend->Describe(), "; ", result->comm->Describe());
  rank_.store(result->rank);
  loaded_ = std::move(result);
  ready_.store(true, std::memory_order_release);
  return grpc::Status::OK;
}

absl::Status WorkerService::LoadRank(const rpc::LoadRequest& r,
                                     const std::string& peer,
                                     const Progress& report, Loaded* result) {
  result->rank = r.rank();
  OCTET_ASSIGN_OR_RETURN(result->checkpoint, Checkpoint::Open(r.model_dir()));
  const CpuKernelOptions cpu{.num_threads = r.threads()};
  OCTET_ASSIGN_OR_RETURN(result->backend, NewBackend(ToDeviceChoice(r.device()),
                                                     cpu, r.cuda_device()));
  OCTET_RETURN_IF_ERROR(
      CheckTpTransport(*result->backend, r.transport() == rpc::TRANSPORT_NCCL));
  if (r.world_size() == 1) {
    result->comm = NewSingleRankCommunicator();
  } else {
    report(0, result->checkpoint->config().num_layers,
           absl::StrCat("joining the group of ", r.world_size()));
    OCTET_ASSIGN_OR_RETURN(result->comm, JoinGroup(r, peer, *result->backend));
  }
  ModelOptions o;
  o.method = r.quantization() == rpc::QUANTIZATION_FP8 ? LinearMethod::kFp8
                                                       : LinearMethod::kNone;
  o.cpu = cpu;
  o.comm = result->comm.get();
  o.global_weight_scale = r.global_weight_scale();
  o.quantize_lm_head = r.quantize_lm_head();
  o.activation_scales = r.sequence_activation_scales()
                            ? ActivationScales::kSequence
                            : ActivationScales::kToken;
  o.gemm_choices = {
      .file = r.gemm_choices_file().empty()
                  ? DefaultGemmChoicePath(r.model_dir())
                  : r.gemm_choices_file(),
      .max_rows = r.max_tokens_per_step() > 0 ? r.max_tokens_per_step() : 2048,
      .log = [&](const std::string& line) {
        std::fprintf(stderr, "worker: rank %d: %s\n", r.rank(), line.c_str());
      }};
  o.on_layer_loaded = [&](int64_t done, int64_t total) {
    report(done, total, "loading layers");
  };
  OCTET_ASSIGN_OR_RETURN(result->model, LlamaModel::Load(*result->checkpoint,
                                                         *result->backend, o));
  OCTET_ASSIGN_OR_RETURN(
      result->cache, result->model->NewKvCache({.block_size = r.kv_block_size(),
                                                .num_blocks = r.kv_blocks()}));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Communicator>> WorkerService::JoinGroup(
    const rpc::LoadRequest& r, const std::string& peer, Backend& backend) {
  OCTET_ASSIGN_OR_RETURN(const std::string target,
                         RendezvousTarget(r.rendezvous_address(), peer));
  GrpcStore store(
      target,
      r.rendezvous_token().empty() ? options_.token : r.rendezvous_token(),
      options_.tls);
  const absl::Duration timeout =
      r.collective_timeout_ms() > 0
          ? absl::Milliseconds(r.collective_timeout_ms())
          : absl::Seconds(60);
  return JoinTpGroup(store, backend,
                     {.rank = r.rank(),
                      .size = r.world_size(),
                      .name = r.group(),
                      .nccl = r.transport() == rpc::TRANSPORT_NCCL,
                      .transport = ToCpuTransport(r.transport()),
                      .cuda_device = r.cuda_device(),
                      .timeout = timeout,
                      .collective_host = options_.collective_host});
}

grpc::Status WorkerService::Step(grpc::ServerContext* context,
                                 const rpc::StepRequest* request,
                                 rpc::StepResponse* response) {
  if (grpc::Status s = Authorize(*context); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  if (loaded_ == nullptr) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        loading_ ? "step: the model is still loading"
                                 : "step: no model loaded");
  }
  // The batch as the model takes it. Forward checks tokens, positions and
  // block tables against the model and this cache before it computes (and
  // so before any collective: every rank refuses a bad batch alike); one
  // sequence twice would mix up the samplers here.
  std::vector<std::vector<int32_t>> tables(request->seqs_size());
  std::vector<SequenceStep> steps(request->seqs_size());
  // Each step's first logit row (a scored step has one per token).
  std::vector<int64_t> first_row(request->seqs_size() + 1, 0);
  absl::flat_hash_set<uint64_t> ids;
  for (int i = 0; i < request->seqs_size(); ++i) {
    const rpc::SequenceStep& q = request->seqs(i);
    if (!ids.insert(q.seq_id()).second) {
      return Invalid(
          absl::StrCat("step: sequence ", q.seq_id(), " appears twice"));
    }
    tables[i].assign(q.block_table().begin(), q.block_table().end());
    steps[i].tokens.assign(q.tokens().begin(), q.tokens().end());
    steps[i].start_position = q.start();
    steps[i].block_table = &tables[i];
    steps[i].all_logits = q.prompt_logprobs();
    first_row[i + 1] =
        first_row[i] + (q.prompt_logprobs() ? q.tokens_size() : 1);
  }
  if (steps.empty()) return grpc::Status::OK;
  // Rank 0 samples: the rows of the sequences that want a token. Their
  // histories live in seqs_, which may move a SeqState as it grows, but a
  // moved vector keeps its buffer, so the rows' spans stay valid. A bad
  // row still runs the forward without sampling, as every other rank runs
  // it: returning early would leave them waiting in its collectives.
  std::vector<SampleRow> rows;
  std::vector<uint64_t> row_seq;
  absl::Status bad_row = absl::OkStatus();
  for (int i = 0; loaded_->rank == 0 && i < request->seqs_size(); ++i) {
    const rpc::SequenceStep& q = request->seqs(i);
    absl::StatusOr<std::optional<SampleRow>> row =
        SampleRowFor(q, first_row[i + 1] - 1);
    if (!row.ok()) {
      bad_row = row.status();
      rows.clear();
      break;
    }
    if (!row->has_value()) continue;
    rows.push_back(**row);
    row_seq.push_back(q.seq_id());
  }
  std::vector<SampledToken> tokens;
  absl::Status s =
      loaded_->model->ForwardSample(steps, *loaded_->cache, rows, &tokens);
  if (!s.ok()) {
    // A refused batch (InvalidArgument) leaves the group as it was. A
    // collective that timed out, lost a peer or follows such a failure
    // means the group is broken and this rank is done for.
    const absl::StatusCode c = s.code();
    if ((c == absl::StatusCode::kUnavailable ||
         c == absl::StatusCode::kDeadlineExceeded ||
         c == absl::StatusCode::kFailedPrecondition) &&
        options_.on_group_failed) {
      options_.on_group_failed();
    }
    return ToGrpc(s);
  }
  if (!bad_row.ok()) return ToGrpc(bad_row);
  for (size_t j = 0; j < rows.size(); ++j) {
    rpc::SampledToken* t = response->add_tokens();
    t->set_seq_id(row_seq[j]);
    t->set_token(tokens[j].id);
    if (rows[j].logprob) t->set_logprob(tokens[j].logprob);
  }
  if (loaded_->rank != 0) return grpc::Status::OK;
  return ToGrpc(ScorePrompts(*request, first_row, response));
}

absl::Status WorkerService::ScorePrompts(const rpc::StepRequest& request,
                                         const std::vector<int64_t>& first_row,
                                         rpc::StepResponse* response) {
  for (int i = 0; i < request.seqs_size(); ++i) {
    const rpc::SequenceStep& q = request.seqs(i);
    if (!q.prompt_logprobs()) continue;
    // Each token's row predicts the token after it: the step's next fed
    // token, and after the last, next_token when the prompt goes on.
    std::vector<int32_t> targets(q.tokens().begin() + 1, q.tokens().end());
    if (q.has_next_token()) targets.push_back(q.next_token());
    std::vector<float> logprobs;
    OCTET_RETURN_IF_ERROR(
        loaded_->model->ScoreRows(first_row[i], targets, &logprobs));
    rpc::PromptLogprobs* p = response->add_prompt_logprobs();
    p->set_seq_id(q.seq_id());
    p->set_first_position(q.start() + 1);
    p->mutable_logprobs()->Add(logprobs.begin(), logprobs.end());
  }
  return absl::OkStatus();
}

absl::StatusOr<std::optional<SampleRow>> WorkerService::SampleRowFor(
    const rpc::SequenceStep& q, int64_t logits_row) {
  SeqState& state = seqs_[q.seq_id()];
  // Every token fed, in order, or found in the prefix cache; a sequence
  // fed again from an earlier position (recomputed after a preemption)
  // rewrites its history there.
  if (q.cached_prefix_size() > 0) {
    if (q.cached_prefix_size() != q.start()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "step: sequence ", q.seq_id(), " starts at position ", q.start(),
          " after ", q.cached_prefix_size(), " cached tokens"));
    }
    state.history.assign(q.cached_prefix().begin(), q.cached_prefix().end());
  }
  if (static_cast<int64_t>(state.history.size()) < q.start()) {
    return absl::InvalidArgumentError(
        absl::StrCat("step: sequence ", q.seq_id(), " starts at position ",
                     q.start(), " but only ", state.history.size(),
                     " of its tokens came before (a prefix-cache hit must "
                     "send them as cached_prefix)"));
  }
  state.history.resize(q.start());
  state.history.insert(state.history.end(), q.tokens().begin(),
                       q.tokens().end());
  if (!q.sample()) return std::nullopt;
  const rpc::Sampling& p = q.sampling();
  if (!(std::isfinite(p.repetition_penalty()) && p.repetition_penalty() > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("step: sequence ", q.seq_id(), ": repetition_penalty ",
                     p.repetition_penalty(), " is not a number > 0"));
  }
  if (!state.params.has_value()) {
    const SamplingParams params{.temperature = p.temperature(),
                                .top_k = p.top_k(),
                                .top_p = p.top_p(),
                                .seed = p.seed()};
    absl::Status s = ValidateSamplingParams(params);
    if (!s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("step: sequence ", q.seq_id(), ": ", s.message()));
    }
    state.params = params;
  }
  // Its position: after every token fed, so a sequence recomputed or
  // resumed on a new group draws as it would have.
  return SampleRow{.logits_row = logits_row,
                   .params = *state.params,
                   .position = q.start() + q.tokens_size(),
                   .repetition_penalty = p.repetition_penalty(),
                   .history = state.history,
                   .logprob = q.logprobs()};
}

grpc::Status WorkerService::Free(grpc::ServerContext* context,
                                 const rpc::FreeRequest* request,
                                 rpc::FreeResponse*) {
  if (grpc::Status s = Authorize(*context); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  for (uint64_t id : request->seq_ids()) seqs_.erase(id);
  return grpc::Status::OK;
}

grpc::Status WorkerService::Health(grpc::ServerContext* context,
                                   const rpc::HealthRequest*,
                                   rpc::HealthResponse* response) {
  if (grpc::Status s = Authorize(*context); !s.ok()) return s;
  if (ready_.load(std::memory_order_acquire)) {
    response->set_loaded(true);
    response->set_rank(rank_.load());
    response->set_description(description_);
  }
  return grpc::Status::OK;
}

}  // namespace octet
