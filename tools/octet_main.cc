// octet: the user CLI.
//
//   octet make-model --preset tiny|tiny-mistral|tiny-qwen2|tiny-qwen3|
//                             llama-1b|mistral-7b --out DIR
//                    [--dtype bf16|fp16|fp32] [--seed N]
//                    [--tokenizer sentencepiece|json|none]
//   octet quantize --in DIR --out DIR [--scheme fp8-tensor|fp8-channel-token]
//   octet tokenize --model DIR (--text T | --ids 1,2,3 | --jsonl FILE |
//                  --decode_jsonl FILE) [--add_special=false]
//   octet generate --model DIR [--quantization auto|none|fp8]
//                  (--prompt TEXT | --prompt_ids 1,2,3) [--max_tokens N]
//                  [--temperature T] [--top_k K] [--top_p P] [--seed N]
//                  [--ignore_eos] [--device auto|cpu|cuda] [--threads N]
//                  [--print_ids]
//   octet generate --server HOST:PORT (--prompt TEXT | --prompt_ids ...)
//                  [--stream] [--print_ids] [--print_logprobs]
//                  [the sampling flags above]
//                  [--tls_ca PEM [--tls_cert PEM --tls_key PEM]
//                   [--tls_server_name NAME]]
//   octet logits --model DIR --prompts_json '[[1,2,3],[4,5]]'
//                [--quantization auto|none|fp8] [--device auto|cpu|cuda]
//                [--threads N] [--activation_codes]
//                [--activation_scales token|sequence]
//   octet perplexity --model DIR --text FILE [--window N]
//                    [--quantization auto|none|fp8] [--device auto|cpu|cuda]
//                    [--threads N] [--print_logprobs] [--quantize_lm_head]
//                    [--activation_scales token|sequence]
//   octet perplexity --server HOST:PORT --model DIR --text FILE --window N
//   octet perplexity --tp N --model DIR --text FILE [...]   (a coordinator
//                    of N ranks started for the run)
//   octet gguf --model FILE.gguf [--tensor NAME --out FILE]
//   octet chat-template --model DIR --messages FILE
//                       [--add_generation_prompt=false]
//
// Wherever --model takes a checkpoint, it is a Hugging Face directory or a
// GGUF file.
//
// A bad flag value or a missing argument prints one line and exits with
// status 2; a failure while working prints the error and exits with 1.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/file_util.h"
#include "base/status_macros.h"
#include "model/chat_template.h"
#include "model/checkpoint.h"
#include "model/synthetic.h"
#include "model/tokenizer.h"
#include "nlohmann/json.hpp"
#include "octet/v1/generation.grpc.pb.h"
#include "rpc/tls.h"
#include "tools/fp8_export.h"
#include "tools/gguf_command.h"
#include "tools/local_coordinator.h"
#include "tools/logits_command.h"
#include "tools/perplexity_command.h"
#include "tools/tokenize_command.h"
#include "worker/backends.h"
#include "worker/generator.h"
#include "worker/llama_model.h"

ABSL_FLAG(std::string, preset, "", "make-model: the model shape (see --help)");
ABSL_FLAG(std::string, out, "",
          "make-model, quantize: the checkpoint directory to write; gguf: "
          "the file to write --tensor's values to");
ABSL_FLAG(std::string, tensor, "",
          "gguf: the tensor to decode to binary32 (GGUF's name)");
ABSL_FLAG(std::string, dtype, "bf16",
          "make-model: weight dtype: bf16, fp16 or fp32");
ABSL_FLAG(std::string, tokenizer, "sentencepiece",
          "make-model: sentencepiece (tokenizer.model), json (a byte-level "
          "BPE tokenizer.json, as Llama 3's) or none");
ABSL_FLAG(
    uint64_t, seed, 0,
    "make-model: random seed (same seed, same bytes); generate: sampling seed");
ABSL_FLAG(std::string, in, "", "quantize: the checkpoint to quantize");
ABSL_FLAG(std::string, scheme, "",
          "quantize: empty for vLLM's fp8 layout (per-tensor scales), or a "
          "compressed-tensors scheme: fp8-tensor (per-tensor) or "
          "fp8-channel-token (per-channel weights, per-token activations)");
ABSL_FLAG(std::string, model, "",
          "generate, logits, tokenize, gguf: the checkpoint (a directory, or "
          "a GGUF file)");
ABSL_FLAG(std::string, quantization, "auto",
          "generate: linear layers: auto (what the checkpoint's config.json "
          "says), none (the checkpoint's dtype) or fp8 (e4m3, per-tensor "
          "scales; an unquantized checkpoint is quantized at load)");
ABSL_FLAG(bool, quantize_lm_head, false,
          "generate, perplexity: with FP8, the lm_head in FP8 too (one "
          "scale per vocabulary row; CPU only)");
ABSL_FLAG(std::string, activation_scales, "token",
          "generate, logits, perplexity: with FP8, one dynamic activation "
          "scale per token (results independent of batching and chunking) "
          "or per sequence's rows in a forward call (sequence)");
ABSL_FLAG(std::string, text, "",
          "tokenize: the text to encode; perplexity: the file to score");
ABSL_FLAG(int64_t, window, 0,
          "perplexity: tokens per scored window; 0 = the model's context");
ABSL_FLAG(int32_t, tp, 1,
          "perplexity: score through a coordinator of this many ranks, "
          "started here for the run (1: in this process)");
ABSL_FLAG(bool, print_logprobs, false,
          "perplexity: also print each scored token's log-probability; "
          "generate --server: the generated tokens' on a line of their own: "
          "'logprobs: -0.1,-2.5'");
ABSL_FLAG(std::string, ids, "", "tokenize: the ids to decode (1,2,3)");
ABSL_FLAG(std::string, messages, "",
          "chat-template: a JSON file with the conversation, a list of "
          "{\"role\": ..., \"content\": ...}");
ABSL_FLAG(bool, add_generation_prompt, true,
          "chat-template: end with the opening of the assistant's turn");
ABSL_FLAG(std::string, jsonl, "",
          "tokenize: encode each line of this file (a JSON string)");
ABSL_FLAG(std::string, decode_jsonl, "",
          "tokenize: decode each line of this file (a JSON array of ids)");
ABSL_FLAG(bool, add_special, true,
          "tokenize: add the tokenizer's special tokens (BOS)");
ABSL_FLAG(std::string, prompt, "",
          "generate: the prompt text (needs a tokenizer)");
ABSL_FLAG(
    std::string, prompt_ids, "",
    "generate: the prompt as comma-separated token ids (no tokenizer needed)");
ABSL_FLAG(std::string, prompts_json, "",
          "logits: the prompts as a JSON array of arrays of token ids (also "
          "reads --model, --quantization, --device, --threads)");
ABSL_FLAG(bool, activation_codes, false,
          "logits: also print each FP8 projection input's codes and scales");
ABSL_FLAG(int64_t, max_tokens, 32, "generate: tokens to generate at most");
ABSL_FLAG(double, temperature, 0.0,
          "generate: sampling temperature; 0 = greedy");
ABSL_FLAG(int64_t, top_k, 0,
          "generate: keep the k most likely tokens; 0 = all");
ABSL_FLAG(double, top_p, 1.0, "generate: nucleus sampling mass in (0, 1]");
ABSL_FLAG(bool, ignore_eos, false,
          "generate: do not stop at the end-of-sequence token");
ABSL_FLAG(std::string, device, "auto",
          "generate: auto (a supported GPU if there is one, else the CPU), cpu "
          "or cuda");
ABSL_FLAG(int32_t, threads, 0,
          "generate, quantize: CPU threads; 0 = one per core");
ABSL_FLAG(std::string, server, "",
          "generate, perplexity: HOST:PORT of a coordinator to ask instead of "
          "loading the model here");
ABSL_FLAG(bool, print_ids, false,
          "generate: after the text, print the generated token ids on a line "
          "of their own: 'ids: 1,2,3'");
ABSL_FLAG(bool, stream, false,
          "generate --server: print the text as the tokens arrive");
ABSL_FLAG(std::string, tls_ca, "",
          "generate --server: talk TLS, verifying the server with these PEM "
          "CA certificate(s) (/etc/ssl/certs/ca-certificates.crt for a "
          "public CA)");
ABSL_FLAG(std::string, tls_cert, "",
          "generate --server --tls_ca: this client's PEM certificate, for a "
          "server that requires one (mutual TLS)");
ABSL_FLAG(std::string, tls_key, "", "the PEM private key of --tls_cert");
ABSL_FLAG(std::string, tls_server_name, "",
          "generate --server --tls_ca: the name the server's certificate "
          "must carry, when it is not the --server host (a port-forward)");

namespace octet {
namespace {

constexpr int kUsageError = 2;
using Clock = std::chrono::steady_clock;

int UsageError(const std::string& message) {
  std::fprintf(stderr, "octet: %s\n", message.c_str());
  return kUsageError;
}

int Failed(const absl::Status& status) {
  std::fprintf(stderr, "octet: %s\n", std::string(status.message()).c_str());
  return 1;
}

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

absl::StatusOr<CpuKernelOptions> CpuOptions() {
  const int32_t threads = absl::GetFlag(FLAGS_threads);
  if (threads < 0 || threads > 1024) {
    return absl::InvalidArgumentError("--threads: must be in [0, 1024]");
  }
  return CpuKernelOptions{.isa = CpuIsa::kAuto, .num_threads = threads};
}

int MakeModel() {
  const std::string preset = absl::GetFlag(FLAGS_preset);
  const std::string out = absl::GetFlag(FLAGS_out);
  if (preset.empty()) return UsageError("make-model needs --preset");
  if (out.empty()) return UsageError("make-model needs --out DIR");
  absl::StatusOr<ModelConfig> config = SyntheticPreset(preset);
  if (!config.ok())
    return UsageError(absl::StrCat("--preset: ", config.status().message()));
  SyntheticOptions options;
  const std::string dtype = absl::GetFlag(FLAGS_dtype);
  if (dtype == "bf16") {
    options.dtype = DType::kBf16;
  } else if (dtype == "fp16") {
    options.dtype = DType::kF16;
  } else if (dtype == "fp32") {
    options.dtype = DType::kF32;
  } else {
    return UsageError(
        absl::StrCat("--dtype: '", dtype, "' is not bf16, fp16 or fp32"));
  }
  const std::string tokenizer = absl::GetFlag(FLAGS_tokenizer);
  if (tokenizer == "sentencepiece") {
    options.tokenizer = SyntheticOptions::Tokenizer::kSentencePiece;
  } else if (tokenizer == "json") {
    options.tokenizer = SyntheticOptions::Tokenizer::kJson;
  } else if (tokenizer == "none") {
    options.tokenizer = SyntheticOptions::Tokenizer::kNone;
  } else {
    return UsageError(absl::StrCat("--tokenizer: '", tokenizer,
                                   "' is not sentencepiece, json or none"));
  }
  options.seed = absl::GetFlag(FLAGS_seed);
  const auto start = Clock::now();
  absl::Status s = WriteSyntheticCheckpoint(*config, options, out);
  if (!s.ok()) return Failed(s);
  std::printf("wrote %s (%s, %s, seed %llu) in %.1f s\n", out.c_str(),
              preset.c_str(), dtype.c_str(),
              static_cast<unsigned long long>(options.seed), Since(start));
  return 0;
}

int Tokenize() {
  const TokenizeCommand command{
      .model_dir = absl::GetFlag(FLAGS_model),
      .text = absl::GetFlag(FLAGS_text),
      .ids = absl::GetFlag(FLAGS_ids),
      .jsonl = absl::GetFlag(FLAGS_jsonl),
      .decode_jsonl = absl::GetFlag(FLAGS_decode_jsonl),
      .add_special = absl::GetFlag(FLAGS_add_special)};
  if (absl::Status s = CheckTokenizeCommand(command); !s.ok()) {
    return UsageError(std::string(s.message()));
  }
  absl::Status s = RunTokenize(command);
  return s.ok() ? 0 : Failed(s);
}

int Logits() {
  LogitsCommand command{
      .model_dir = absl::GetFlag(FLAGS_model),
      .prompts_json = absl::GetFlag(FLAGS_prompts_json),
      .quantization = absl::GetFlag(FLAGS_quantization),
      .device = absl::GetFlag(FLAGS_device),
      .threads = absl::GetFlag(FLAGS_threads),
      .activation_codes = absl::GetFlag(FLAGS_activation_codes)};
  if (absl::Status s = CheckLogitsCommand(command); !s.ok()) {
    return UsageError(std::string(s.message()));
  }
  const absl::StatusOr<ActivationScales> scales =
      ParseActivationScales(absl::GetFlag(FLAGS_activation_scales));
  if (!scales.ok()) return UsageError(std::string(scales.status().message()));
  command.activation_scales = *scales;
  absl::Status s = RunLogits(command);
  return s.ok() ? 0 : Failed(s);
}

int Gguf() {
  const GgufCommand command{.path = absl::GetFlag(FLAGS_model),
                            .tensor = absl::GetFlag(FLAGS_tensor),
                            .out = absl::GetFlag(FLAGS_out)};
  if (absl::Status s = CheckGgufCommand(command); !s.ok()) {
    return UsageError(std::string(s.message()));
  }
  absl::Status s = RunGguf(command);
  return s.ok() ? 0 : Failed(s);
}

// chat-template: the prompt text the model's chat template makes of a
// conversation, exactly (no newline added), as the HTTP API's chat
// endpoint renders it.
int ChatTemplateCommand() {
  const std::string model = absl::GetFlag(FLAGS_model),
                    messages_file = absl::GetFlag(FLAGS_messages);
  if (model.empty() || messages_file.empty()) {
    return UsageError("chat-template needs --model and --messages FILE");
  }
  absl::StatusOr<std::string> text = ReadSmallFile(messages_file, 16 << 20);
  if (!text.ok()) return UsageError(std::string(text.status().message()));
  const nlohmann::json messages =
      nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!messages.is_array()) {
    return UsageError(absl::StrCat("--messages ", messages_file,
                                   " is not a JSON list of messages"));
  }
  absl::StatusOr<std::optional<ChatTemplateSource>> source =
      ReadCheckpointChatTemplate(model);
  if (!source.ok()) return Failed(source.status());
  if (!source->has_value()) {
    return Failed(absl::NotFoundError(model + " has no chat template"));
  }
  absl::StatusOr<ChatTemplate> compiled =
      ChatTemplate::Compile(**std::move(source));
  if (!compiled.ok()) return Failed(compiled.status());
  absl::StatusOr<std::string> prompt = compiled->Render(
      messages, absl::GetFlag(FLAGS_add_generation_prompt));
  if (!prompt.ok()) return Failed(prompt.status());
  std::fwrite(prompt->data(), 1, prompt->size(), stdout);
  return 0;
}

int Quantize() {
  const std::string in = absl::GetFlag(FLAGS_in),
                    out = absl::GetFlag(FLAGS_out);
  if (in.empty() || out.empty())
    return UsageError("quantize needs --in DIR and --out DIR");
  const std::string scheme = absl::GetFlag(FLAGS_scheme);
  if (!scheme.empty() && scheme != "fp8-tensor" &&
      scheme != "fp8-channel-token") {
    return UsageError(absl::StrCat("--scheme: '", scheme,
                                   "' is not fp8-tensor or fp8-channel-token"));
  }
  absl::StatusOr<CpuKernelOptions> cpu = CpuOptions();
  if (!cpu.ok()) return UsageError(std::string(cpu.status().message()));
  const auto start = Clock::now();
  absl::Status s =
      ExportFp8Checkpoint(in, out, {.cpu = *cpu, .scheme = scheme});
  if (!s.ok()) return Failed(s);
  std::printf("wrote FP8 checkpoint %s in %.1f s\n", out.c_str(), Since(start));
  return 0;
}

const char* FinishName(v1::FinishReason r) {
  switch (r) {
    case v1::FINISH_REASON_EOS:
      return "eos";
    case v1::FINISH_REASON_STOP:
      return "stop";
    case v1::FINISH_REASON_LENGTH:
      return "length";
    default:
      return "unspecified";
  }
}

// generate --server: the request the flags describe; a bad flag is a usage
// error.
absl::StatusOr<v1::GenerateRequest> RemoteRequestFromFlags() {
  v1::GenerateRequest request;
  const std::string prompt = absl::GetFlag(FLAGS_prompt);
  const std::string prompt_ids = absl::GetFlag(FLAGS_prompt_ids);
  if (prompt.empty() == prompt_ids.empty()) {
    return absl::InvalidArgumentError(
        "generate needs exactly one of --prompt and --prompt_ids");
  }
  if (!prompt.empty()) request.set_text(prompt);
  for (absl::string_view id :
       absl::StrSplit(prompt_ids, ',', absl::SkipEmpty())) {
    int32_t v;
    if (!absl::SimpleAtoi(id, &v)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--prompt_ids: '", id, "' is not a token id"));
    }
    request.mutable_token_ids()->add_ids(v);
  }
  // The server checks every field (and names the bad one).
  request.mutable_sampling()->set_temperature(
      static_cast<float>(absl::GetFlag(FLAGS_temperature)));
  request.mutable_sampling()->set_top_k(
      static_cast<int32_t>(absl::GetFlag(FLAGS_top_k)));
  request.mutable_sampling()->set_top_p(
      static_cast<float>(absl::GetFlag(FLAGS_top_p)));
  request.mutable_sampling()->set_seed(absl::GetFlag(FLAGS_seed));
  request.set_logprobs(absl::GetFlag(FLAGS_print_logprobs));
  const int64_t max_tokens = absl::GetFlag(FLAGS_max_tokens);
  if (max_tokens <= 0 || max_tokens > UINT32_MAX) {
    return absl::InvalidArgumentError("--max_tokens: must be > 0");
  }
  request.mutable_stopping()->set_max_new_tokens(
      static_cast<uint32_t>(max_tokens));
  request.mutable_stopping()->set_ignore_eos(absl::GetFlag(FLAGS_ignore_eos));
  return request;
}

// How a remote generation ended, besides its text.
struct RemoteOutcome {
  grpc::Status status;
  v1::FinishReason finish = v1::FINISH_REASON_UNSPECIFIED;
  v1::Usage usage;
  v1::Timings timings;
  std::vector<int32_t> ids;  // the generated tokens
  std::vector<float> logprobs;  // theirs, with --print_logprobs
};

// --print_ids: the generated ids on their own line (after the text's);
// --print_logprobs (--server): their log-probabilities on the next, with
// 9 significant digits (enough to read back the same binary32 value).
void PrintIds(const std::vector<int32_t>& ids,
              const std::vector<float>& logprobs = {}) {
  if (absl::GetFlag(FLAGS_print_ids)) {
    std::printf("ids: %s\n", absl::StrJoin(ids, ",").c_str());
  }
  if (absl::GetFlag(FLAGS_print_logprobs)) {
    std::printf("logprobs: %s\n",
                absl::StrJoin(logprobs, ",",
                              [](std::string* out, float v) {
                                absl::StrAppend(out,
                                                absl::StrFormat("%.9g", v));
                              })
                    .c_str());
  }
}

// Sends the request as a stream, printing the text as the tokens arrive.
RemoteOutcome GenerateStreaming(v1::Generation::Stub& stub,
                                const v1::GenerateRequest& request) {
  RemoteOutcome out;
  grpc::ClientContext context;
  auto reader = stub.GenerateStream(&context, request);
  v1::GenerateStreamResponse m;
  while (reader->Read(&m)) {
    std::fwrite(m.text().data(), 1, m.text().size(), stdout);
    std::fflush(stdout);
    out.ids.insert(out.ids.end(), m.token_ids().begin(), m.token_ids().end());
    out.logprobs.insert(out.logprobs.end(), m.logprobs().begin(),
                        m.logprobs().end());
    if (m.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
      out.finish = m.finish_reason();
      out.usage = m.usage();
      out.timings = m.timings();
    }
  }
  out.status = reader->Finish();
  return out;
}

// Sends the request in one call and prints the whole text.
RemoteOutcome GenerateUnary(v1::Generation::Stub& stub,
                            const v1::GenerateRequest& request) {
  RemoteOutcome out;
  grpc::ClientContext context;
  v1::GenerateResponse r;
  out.status = stub.Generate(&context, request, &r);
  std::fwrite(r.text().data(), 1, r.text().size(), stdout);
  out.ids.assign(r.token_ids().begin(), r.token_ids().end());
  out.logprobs.assign(r.logprobs().begin(), r.logprobs().end());
  out.finish = r.finish_reason();
  out.usage = r.usage();
  out.timings = r.timings();
  return out;
}

// Whether any TLS flag is set (they apply to --server only).
bool AnyTlsFlag() {
  return !absl::GetFlag(FLAGS_tls_ca).empty() ||
         !absl::GetFlag(FLAGS_tls_cert).empty() ||
         !absl::GetFlag(FLAGS_tls_key).empty() ||
         !absl::GetFlag(FLAGS_tls_server_name).empty();
}

// The channel to --server: TLS with --tls_ca (presenting --tls_cert when
// given), plaintext without. A bad TLS flag is a usage error.
absl::StatusOr<std::shared_ptr<grpc::Channel>> ServerChannel(
    const std::string& server) {
  TlsConfig tls;
  OCTET_RETURN_IF_ERROR(
      ReadTlsIdentity("tls_cert", absl::GetFlag(FLAGS_tls_cert), "tls_key",
                      absl::GetFlag(FLAGS_tls_key), TlsRole::kClient, tls));
  const std::string ca = absl::GetFlag(FLAGS_tls_ca);
  const std::string name = absl::GetFlag(FLAGS_tls_server_name);
  if (ca.empty()) {
    if (AnyTlsFlag()) {
      return absl::InvalidArgumentError(
          "--tls_cert, --tls_key and --tls_server_name need --tls_ca");
    }
    return grpc::CreateChannel(server, grpc::InsecureChannelCredentials());
  }
  OCTET_ASSIGN_OR_RETURN(tls.ca, ReadTlsCertificates("tls_ca", ca));
  grpc::ChannelArguments args;
  if (!name.empty()) args.SetSslTargetNameOverride(name);
  return grpc::CreateCustomChannel(server, TlsChannelCredentials(tls), args);
}

// generate --server: the same request through a coordinator's public API.
int GenerateRemote(const std::string& server) {
  const absl::StatusOr<v1::GenerateRequest> request = RemoteRequestFromFlags();
  if (!request.ok()) return UsageError(std::string(request.status().message()));
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      ServerChannel(server);
  if (!channel.ok()) return UsageError(std::string(channel.status().message()));
  auto stub = v1::Generation::NewStub(*channel);
  const RemoteOutcome out = absl::GetFlag(FLAGS_stream)
                                ? GenerateStreaming(*stub, *request)
                                : GenerateUnary(*stub, *request);
  std::printf("\n");
  std::fflush(stdout);
  if (!out.status.ok()) {
    std::fprintf(stderr, "octet: %s: %s\n", server.c_str(),
                 out.status.error_message().c_str());
    return 1;
  }
  PrintIds(out.ids, out.logprobs);
  std::fprintf(stderr,
               "octet: %u prompt + %u generated tokens, first token after "
               "%.1f ms, %.1f ms in all, finish: %s\n",
               out.usage.prompt_tokens(), out.usage.completion_tokens(),
               out.timings.time_to_first_token_seconds() * 1e3,
               out.timings.total_seconds() * 1e3, FinishName(out.finish));
  return 0;
}

// A window's prompt log-probabilities from the coordinator at `stub`: one
// greedy token generated, prompt_logprobs asked for.
absl::StatusOr<std::vector<float>> ScoreOnServer(
    v1::Generation::Stub& stub, const std::vector<int32_t>& window) {
  v1::GenerateRequest request;
  request.mutable_token_ids()->mutable_ids()->Add(window.begin(), window.end());
  request.mutable_sampling()->set_temperature(0);
  request.mutable_stopping()->set_max_new_tokens(1);
  request.set_prompt_logprobs(true);
  grpc::ClientContext context;
  v1::GenerateResponse response;
  const grpc::Status s = stub.Generate(&context, request, &response);
  if (!s.ok()) {
    return absl::UnavailableError(
        absl::StrCat("the server: ", s.error_message()));
  }
  return std::vector<float>(response.prompt_logprobs().begin(),
                            response.prompt_logprobs().end());
}

int Perplexity() {
  PerplexityCommand command{
      .model = {.path = absl::GetFlag(FLAGS_model),
                .quantization = absl::GetFlag(FLAGS_quantization),
                .device = absl::GetFlag(FLAGS_device),
                .threads = absl::GetFlag(FLAGS_threads),
                .quantize_lm_head = absl::GetFlag(FLAGS_quantize_lm_head)},
      .text_file = absl::GetFlag(FLAGS_text),
      .window = absl::GetFlag(FLAGS_window),
      .print_logprobs = absl::GetFlag(FLAGS_print_logprobs),
      .server = absl::GetFlag(FLAGS_server),
      .remote = nullptr};
  if (absl::Status s = CheckPerplexityCommand(command); !s.ok()) {
    return UsageError(std::string(s.message()));
  }
  const absl::StatusOr<ActivationScales> scales =
      ParseActivationScales(absl::GetFlag(FLAGS_activation_scales));
  if (!scales.ok()) return UsageError(std::string(scales.status().message()));
  command.model.activation_scales = *scales;
  const int32_t tp = absl::GetFlag(FLAGS_tp);
  if (tp < 1 || tp > 64 || (tp > 1 && !command.server.empty())) {
    return UsageError("--tp: 1 to 64, and not with --server");
  }
  if (command.model.quantize_lm_head && !command.server.empty()) {
    return UsageError(
        "--quantize_lm_head: a server's lm_head is its own flag's, not with "
        "--server");
  }
  std::unique_ptr<LocalCoordinator> local;
  if (tp > 1) {
    absl::StatusOr<ModelConfig> config =
        ReadCheckpointConfig(command.model.path);
    if (!config.ok()) return Failed(config.status());
    if (command.window == 0) command.window = config->max_position_embeddings;
    absl::StatusOr<std::unique_ptr<LocalCoordinator>> started =
        LocalCoordinator::Start(
            {"--model=" + command.model.path, absl::StrCat("--tp=", tp),
             "--quantization=" + command.model.quantization,
             "--device=" + command.model.device,
             absl::StrCat("--threads=", command.model.threads),
             command.model.quantize_lm_head ? "--quantize_lm_head=true"
                                            : "--quantize_lm_head=false",
             absl::StrCat("--activation_scales=",
                          ActivationScalesName(*scales))},
            absl::Minutes(10));
    if (!started.ok()) return Failed(started.status());
    local = *std::move(started);
    command.server = local->address();
  }
  std::unique_ptr<v1::Generation::Stub> stub;
  if (!command.server.empty()) {
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
        ServerChannel(command.server);
    if (!channel.ok()) {
      return UsageError(std::string(channel.status().message()));
    }
    stub = v1::Generation::NewStub(*channel);
    command.remote = [&stub](const std::vector<int32_t>& window) {
      return ScoreOnServer(*stub, window);
    };
  }
  absl::Status s = RunPerplexity(command);
  return s.ok() ? 0 : Failed(s);
}

// The flags of a local `octet generate`, checked.
struct GenerateFlags {
  std::string dir;           // --model
  std::string quantization;  // the flag; "none" or "fp8" once loaded
  std::string device;        // "auto", "cpu" or "cuda"
  std::string prompt;        // --prompt text; empty with --prompt_ids
  ModelOptions options;
  GenerationRequest request;  // holds the --prompt_ids ids, if given
};

// Reads --prompt_ids into `request`; exactly one of --prompt and
// --prompt_ids must be given.
absl::Status ReadPromptIds(const std::string& prompt,
                           const std::string& prompt_ids,
                           GenerationRequest* request) {
  if (prompt.empty() == prompt_ids.empty()) {
    return absl::InvalidArgumentError(
        "generate needs exactly one of --prompt and --prompt_ids");
  }
  for (absl::string_view id :
       absl::StrSplit(prompt_ids, ',', absl::SkipEmpty())) {
    int32_t v;
    if (!absl::SimpleAtoi(id, &v) || v < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--prompt_ids: '", id, "' is not a token id"));
    }
    request->prompt.push_back(v);
  }
  if (!prompt_ids.empty() && request->prompt.empty()) {
    return absl::InvalidArgumentError("--prompt_ids: lists no token ids");
  }
  return absl::OkStatus();
}

// Reads and checks the flags of a local generate; an error is a usage error.
absl::StatusOr<GenerateFlags> ReadGenerateFlags() {
  GenerateFlags f;
  f.dir = absl::GetFlag(FLAGS_model);
  if (f.dir.empty()) {
    return absl::InvalidArgumentError("generate needs --model DIR");
  }
  f.quantization = absl::GetFlag(FLAGS_quantization);
  if (f.quantization != "auto" && f.quantization != "fp8" &&
      f.quantization != "none") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--quantization: '", f.quantization, "' is not auto, none or fp8"));
  }
  f.options.quantize_lm_head = absl::GetFlag(FLAGS_quantize_lm_head);
  OCTET_ASSIGN_OR_RETURN(
      f.options.activation_scales,
      ParseActivationScales(absl::GetFlag(FLAGS_activation_scales)));
  f.device = absl::GetFlag(FLAGS_device);
  if (absl::Status s = ParseDeviceChoice(f.device).status(); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--device: ", s.message()));
  }
  OCTET_ASSIGN_OR_RETURN(f.options.cpu, CpuOptions());
  GenerationRequest& request = f.request;
  request.max_new_tokens = absl::GetFlag(FLAGS_max_tokens);
  if (request.max_new_tokens <= 0) {
    return absl::InvalidArgumentError("--max_tokens: must be > 0");
  }
  request.sampling = {static_cast<float>(absl::GetFlag(FLAGS_temperature)),
                      absl::GetFlag(FLAGS_top_k),
                      static_cast<float>(absl::GetFlag(FLAGS_top_p)),
                      absl::GetFlag(FLAGS_seed)};
  OCTET_RETURN_IF_ERROR(ValidateSamplingParams(request.sampling));
  f.prompt = absl::GetFlag(FLAGS_prompt);
  OCTET_RETURN_IF_ERROR(
      ReadPromptIds(f.prompt, absl::GetFlag(FLAGS_prompt_ids), &request));
  return f;
}

// Completes the request from the checkpoint: encodes the --prompt text, sets
// the stop ids, and checks the length against the model's context.
absl::Status CompleteRequest(const std::string& dir, const std::string& prompt,
                             const ModelConfig& c, const Tokenizer* tokenizer,
                             GenerationRequest* request) {
  if (!prompt.empty()) {
    if (tokenizer == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat(dir,
                       " has no tokenizer.model or tokenizer.json: give the "
                       "prompt as --prompt_ids"));
    }
    for (int64_t id : tokenizer->Encode(prompt, /*add_bos=*/true)) {
      request->prompt.push_back(static_cast<int32_t>(id));
    }
  }
  // Checked before the (long) load; Generate checks it again.
  const int64_t context = c.max_position_embeddings;
  if (request->max_new_tokens >
      context - static_cast<int64_t>(request->prompt.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "prompt (", request->prompt.size(), " tokens) + --max_tokens (",
        request->max_new_tokens, ") exceed the model's context of ", context));
  }
  if (!absl::GetFlag(FLAGS_ignore_eos)) request->stop_ids = c.eos_token_ids;
  return absl::OkStatus();
}

// A model loaded for one generation. Members are destroyed in reverse order:
// the cache before the model, the model before its backend.
struct LoadedModel {
  std::unique_ptr<Tokenizer> tokenizer;  // nullptr without tokenizer.model
  std::unique_ptr<Backend> backend;
  std::unique_ptr<LlamaModel> model;
  std::unique_ptr<KvCache> cache;
  double load_seconds = 0;
};

// Opens the checkpoint and tokenizer, completes `flags->request`, loads the
// model onto its backend and allocates a KV cache the request fits in.
absl::StatusOr<LoadedModel> LoadForGenerate(GenerateFlags* flags) {
  const auto load_start = Clock::now();
  OCTET_ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> ckpt,
                         Checkpoint::Open(flags->dir));
  OCTET_ASSIGN_OR_RETURN(
      flags->quantization,
      ResolveQuantization(flags->quantization, ckpt->config(), flags->dir));
  flags->options.method =
      flags->quantization == "fp8" ? LinearMethod::kFp8 : LinearMethod::kNone;
  if (flags->options.quantize_lm_head &&
      flags->options.method != LinearMethod::kFp8) {
    return absl::InvalidArgumentError(
        "--quantize_lm_head needs FP8 serving (--quantization fp8, or auto "
        "on an FP8 checkpoint)");
  }
  LoadedModel m;
  OCTET_ASSIGN_OR_RETURN(m.tokenizer,
                         ReadCheckpointTokenizer(flags->dir, ckpt->config()));
  GenerationRequest& request = flags->request;
  OCTET_RETURN_IF_ERROR(CompleteRequest(
      flags->dir, flags->prompt, ckpt->config(), m.tokenizer.get(), &request));
  OCTET_ASSIGN_OR_RETURN(m.backend,
                         NewBackend(flags->device, flags->options.cpu));
  OCTET_ASSIGN_OR_RETURN(m.model,
                         LlamaModel::Load(*ckpt, *m.backend, flags->options));
  m.load_seconds = Since(load_start);
  ckpt.reset();  // the model holds its own copy: unmap the files
  const int64_t tokens =
      static_cast<int64_t>(request.prompt.size()) + request.max_new_tokens;
  OCTET_ASSIGN_OR_RETURN(
      m.cache, m.model->NewKvCache(
                   {.block_size = 16, .num_blocks = (tokens + 15) / 16}));
  return m;
}

// Prints (to stderr) what was loaded, onto what, and how long it took.
void PrintLoaded(const GenerateFlags& flags, const LoadedModel& m) {
  const ModelConfig& c = m.model->config();
  std::fprintf(stderr,
               "octet: %s (%s, %lld layers, hidden %lld) on %s, linear layers "
               "%s: weights "
               "%.2f GiB, loaded in %.2f s\n",
               flags.dir.c_str(), c.architecture.c_str(),
               static_cast<long long>(c.num_layers),
               static_cast<long long>(c.hidden_size),
               m.backend->Describe().c_str(),
               QuantizationScheme(c, flags.quantization).c_str(),
               m.model->WeightBytes() / double(1 << 30), m.load_seconds);
}

// Prints (to stderr) the prefill and decode timings and why it stopped.
void PrintGenerationStats(const GenerationStats& stats,
                          const GenerationResult& result) {
  std::fprintf(
      stderr,
      "octet: prompt %lld tokens, prefill %.1f ms; decode %lld tokens in %.2f "
      "s = "
      "%.2f tokens/s (%.1f ms/token); finished by %s\n",
      static_cast<long long>(stats.prompt_tokens), stats.prefill_seconds * 1e3,
      static_cast<long long>(stats.decoded_tokens), stats.decode_seconds,
      stats.decode_seconds > 0 ? stats.decoded_tokens / stats.decode_seconds
                               : 0.0,
      stats.decoded_tokens > 0
          ? stats.decode_seconds * 1e3 / stats.decoded_tokens
          : 0.0,
      result.finish == FinishReason::kStop ? "eos" : "length");
}

// Generates, printing the text (or the ids, without a tokenizer) as it
// arrives, then the timings; returns the exit status.
int RunAndPrint(const GenerationRequest& request, LoadedModel& m) {
  // Print text as it arrives, whole characters at a time.
  std::optional<TextStream> text;
  if (m.tokenizer != nullptr) text.emplace(*m.tokenizer);
  int64_t generated = 0;
  GenerationOptions gen;
  gen.on_token = [&](size_t, int32_t token) {
    if (text) {
      std::fputs(text->Add(token).c_str(), stdout);
    } else {
      std::printf("%s%d", generated > 0 ? " " : "", token);
    }
    ++generated;
    std::fflush(stdout);
  };
  GenerationStats stats;
  absl::StatusOr<std::vector<GenerationResult>> result =
      octet::Generate(*m.model, *m.cache, {request}, gen, &stats);
  if (text) std::fputs(text->Finish().c_str(), stdout);
  std::printf("\n");
  if (!result.ok()) return Failed(result.status());
  PrintIds((*result)[0].tokens);
  PrintGenerationStats(stats, (*result)[0]);
  return 0;
}

// octet generate: on a coordinator with --server, else in this process.
int Generate() {
  if (const std::string server = absl::GetFlag(FLAGS_server); !server.empty()) {
    return GenerateRemote(server);
  }
  if (AnyTlsFlag()) {
    return UsageError(
        "--tls_ca, --tls_cert, --tls_key and --tls_server_name "
        "apply to generate --server");
  }
  absl::StatusOr<GenerateFlags> flags = ReadGenerateFlags();
  if (!flags.ok()) return UsageError(std::string(flags.status().message()));
  absl::StatusOr<LoadedModel> loaded = LoadForGenerate(&*flags);
  if (!loaded.ok()) return Failed(loaded.status());
  PrintLoaded(*flags, *loaded);
  return RunAndPrint(flags->request, *loaded);
}

int Main(int argc, char** argv) {
  absl::SetProgramUsageMessage(absl::StrCat(
      "the octet command line.\n\n"
      "  octet make-model --preset ",
      absl::StrJoin(SyntheticPresetNames(), "|"),
      " --out DIR [--dtype bf16|fp16|fp32] [--seed N]\n"
      "      [--tokenizer sentencepiece|json|none]\n"
      "      writes a random-weight Hugging Face checkpoint with a real "
      "tokenizer\n"
      "  octet quantize --in DIR --out DIR [--scheme "
      "fp8-tensor|fp8-channel-token]\n"
      "      writes an FP8 (e4m3) copy: vLLM's layout, or compressed-tensors'\n"
      "  octet tokenize --model DIR (--text T | --ids 1,2,3 | --jsonl FILE | "
      "--decode_jsonl FILE)\n"
      "      the checkpoint's tokenizer: text to ids, ids to text\n"
      "  octet generate --model DIR [--quantization auto|none|fp8] --prompt "
      "TEXT "
      "[--max_tokens N]\n"
      "      generates on one rank, in this process, and prints the text\n"
      "  octet generate --server HOST:PORT --prompt TEXT [--stream] "
      "[--tls_ca PEM]\n"
      "      asks a running coordinator instead (over TLS with --tls_ca)\n"
      "  octet logits --model DIR --prompts_json '[[1,2,3],[4,5]]' "
      "[--quantization auto|none|fp8]\n"
      "      prints each prompt's last-token logits as JSON (one forward)\n"
      "  octet perplexity --model DIR --text FILE [--window N] "
      "[--quantization auto|none|fp8] [--quantize_lm_head] "
      "[--tp N | --server HOST:PORT]\n"
      "      scores a text teacher-forced: mean NLL and perplexity as JSON\n"
      "  octet gguf --model FILE.gguf [--tensor NAME --out FILE]\n"
      "      what a GGUF file holds and how octet reads it; one tensor "
      "decoded\n"
      "  octet chat-template --model DIR --messages FILE "
      "[--add_generation_prompt=false]\n"
      "      the prompt the model's chat template makes of a conversation\n"
      "--model takes a Hugging Face checkpoint directory or a GGUF file."));
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() != 2) {
    return UsageError(
        "expected one command: make-model, quantize, tokenize, generate, "
        "logits, perplexity, gguf or chat-template (octet --help for "
        "usage)");
  }
  const std::string command = args[1];
  if (command == "make-model") return MakeModel();
  if (command == "quantize") return Quantize();
  if (command == "tokenize") return Tokenize();
  if (command == "generate") return Generate();
  if (command == "logits") return Logits();
  if (command == "perplexity") return Perplexity();
  if (command == "gguf") return Gguf();
  if (command == "chat-template") return ChatTemplateCommand();
  return UsageError(
      absl::StrCat("unknown command '", command, "' (octet --help for usage)"));
}

}  // namespace
}  // namespace octet

int main(int argc, char** argv) { return octet::Main(argc, argv); }
