// LoadProcessor and TrainBpe (sentencepiece_bridge.h) through the
// SentencePiece module, loaded once, never unloaded, into a link namespace
// of its own: dlmopen(LM_ID_NEWLM). There the module and everything it links
// (libsentencepiece with its builtin protobuf, libstdc++, libc) are loaded
// afresh and resolve only among themselves, so SentencePiece keeps its own
// protobuf while the program keeps the system one that gRPC links, with no
// RTLD_DEEPBIND (which the sanitizer runtimes refuse;
// sentencepiece_bridge.h). The two namespaces have separate heaps and C++
// runtimes, so they talk only through the C interface of sentencepiece_abi.h:
// the sinks here copy what the module hands out before it frees it, a
// processor is freed by the module's `destroy`, and the sinks never throw
// (an allocation failure in one ends the program, as anywhere else).
#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "model/sentencepiece_abi.h"
#include "model/sentencepiece_bridge.h"

namespace octet::sp_bridge {
namespace {

constexpr char kModule[] = "liboctet_sentencepiece.so";

// Where the module may be: $OCTET_SENTENCEPIECE_MODULE, next to the running
// program (the build tree, bin/ of an install), or in ../lib of it.
std::vector<std::string> Candidates() {
  std::vector<std::string> out;
  if (const char* env = std::getenv("OCTET_SENTENCEPIECE_MODULE")) {
    out.push_back(env);
  }
  std::error_code ec;
  const std::filesystem::path exe =
      std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    out.push_back((exe.parent_path() / kModule).string());
    out.push_back((exe.parent_path().parent_path() / "lib" / kModule).string());
  }
  return out;
}

struct Loaded {
  const OctetSpApi* api = nullptr;
  std::string error;
};

// The module at `path`, in a new link namespace.
Loaded Open(const std::string& path) {
  Loaded l;
  void* handle = dlmopen(LM_ID_NEWLM, path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    l.error = std::string("cannot load ") + path + ": " + dlerror();
    return l;
  }
  using Entry = const OctetSpApi* (*)();
  auto entry = reinterpret_cast<Entry>(dlsym(handle, "OctetSentencePieceApi"));
  const OctetSpApi* api = entry != nullptr ? entry() : nullptr;
  if (api == nullptr || api->version != OCTET_SP_ABI_VERSION) {
    l.error = path + " is not this build's SentencePiece module";
    return l;
  }
  l.api = api;
  return l;
}

const Loaded& Module() {
  static const Loaded loaded = [] {
    std::string tried;
    for (const std::string& path : Candidates()) {
      if (std::filesystem::exists(path)) return Open(path);
      tried += (tried.empty() ? "" : ", ") + path;
    }
    Loaded l;
    l.error = std::string("SentencePiece module ") + kModule +
              " not found (looked at " + tried +
              "; set OCTET_SENTENCEPIECE_MODULE)";
    return l;
  }();
  return loaded;
}

// What the module's sinks deliver to, as their `ctx`.
struct Results {
  std::vector<int> ids;
  std::string bytes;
  std::string error;
};

void ToIds(void* ctx, const int* ids, size_t count) noexcept {
  static_cast<Results*>(ctx)->ids.assign(ids, ids + count);
}
void ToBytes(void* ctx, const char* data, size_t size) noexcept {
  static_cast<Results*>(ctx)->bytes.assign(data, size);
}
void ToError(void* ctx, const char* data, size_t size) noexcept {
  static_cast<Results*>(ctx)->error.assign(data, size);
}

OctetSpString View(const std::string& s) { return {s.data(), s.size()}; }

// A processor made by the module, freed by it.
class ModuleProcessor : public Processor {
 public:
  ModuleProcessor(const OctetSpApi* api, OctetSpProcessor* p)
      : api_(api), p_(p) {}
  ~ModuleProcessor() override { api_->destroy(p_); }
  ModuleProcessor(const ModuleProcessor&) = delete;
  ModuleProcessor& operator=(const ModuleProcessor&) = delete;

  // Empty when SentencePiece fails to encode.
  std::vector<int> Encode(const std::string& text) const override {
    Results r;
    if (!api_->encode(p_, View(text), ToIds, ToError, &r)) r.ids.clear();
    return std::move(r.ids);
  }
  bool Decode(const std::vector<int>& ids, std::string* text,
              std::string* error) const override {
    Results r;
    const bool ok =
        api_->decode(p_, ids.data(), ids.size(), ToBytes, ToError, &r) != 0;
    if (ok) {
      *text = std::move(r.bytes);
    } else {
      *error = std::move(r.error);
    }
    return ok;
  }
  int PieceSize() const override { return api_->piece_size(p_); }
  int BosId() const override { return api_->bos_id(p_); }
  int EosId() const override { return api_->eos_id(p_); }

 private:
  const OctetSpApi* api_;
  OctetSpProcessor* p_;
};

std::vector<OctetSpString> Views(const std::vector<std::string>& strings) {
  std::vector<OctetSpString> out;
  out.reserve(strings.size());
  for (const std::string& s : strings) out.push_back(View(s));
  return out;
}

}  // namespace

bool ModuleAvailable(std::string* error) {
  const Loaded& m = Module();
  if (m.api == nullptr) *error = m.error;
  return m.api != nullptr;
}

std::unique_ptr<Processor> LoadProcessor(const std::string& serialized,
                                         std::string* error) {
  if (!ModuleAvailable(error)) return nullptr;
  const OctetSpApi* api = Module().api;
  Results r;
  OctetSpProcessor* p = api->load(View(serialized), ToError, &r);
  if (p == nullptr) {
    *error = std::move(r.error);
    return nullptr;
  }
  return std::make_unique<ModuleProcessor>(api, p);
}

bool TrainBpe(const std::vector<std::string>& sentences,
              const TrainOptions& options, std::string* serialized,
              std::string* error) {
  if (!ModuleAvailable(error)) return false;
  const std::vector<OctetSpString> text = Views(sentences);
  const std::vector<OctetSpString> symbols =
      Views(options.user_defined_symbols);
  const OctetSpTrainArgs args = {
      .sentences = text.data(),
      .sentence_count = text.size(),
      .vocab_size = options.vocab_size,
      .user_defined_symbols = symbols.data(),
      .user_defined_symbol_count = symbols.size(),
  };
  Results r;
  if (!Module().api->train_bpe(&args, ToBytes, ToError, &r)) {
    *error = std::move(r.error);
    return false;
  }
  *serialized = std::move(r.bytes);
  return true;
}

}  // namespace octet::sp_bridge
