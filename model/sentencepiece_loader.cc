// LoadProcessor and TrainBpe (sentencepiece_bridge.h) through the
// SentencePiece module, loaded once with its own symbol scope.
#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

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
  const Api* api = nullptr;
  std::string error;
};

const Loaded& Module() {
  static const Loaded loaded = [] {
    Loaded l;
    std::string tried;
    for (const std::string& path : Candidates()) {
      if (!std::filesystem::exists(path)) {
        tried += (tried.empty() ? "" : ", ") + path;
        continue;
      }
      // Never closed: Processors made by the module live in its code.
      void* handle =
          dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
      if (handle == nullptr) {
        l.error = std::string("cannot load ") + path + ": " + dlerror();
        return l;
      }
      using Entry = const Api* (*)();
      auto entry =
          reinterpret_cast<Entry>(dlsym(handle, "OctetSentencePieceApi"));
      const Api* api = entry != nullptr ? entry() : nullptr;
      if (api == nullptr || api->version != kApiVersion) {
        l.error = path + " is not this build's SentencePiece module";
        return l;
      }
      l.api = api;
      return l;
    }
    l.error = std::string("SentencePiece module ") + kModule +
              " not found (looked at " + tried +
              "; set OCTET_SENTENCEPIECE_MODULE)";
    return l;
  }();
  return loaded;
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
  return Module().api->load(serialized, error);
}

bool TrainBpe(const std::vector<std::string>& sentences,
              const TrainOptions& options, std::string* serialized,
              std::string* error) {
  if (!ModuleAvailable(error)) return false;
  return Module().api->train(sentences, options, serialized, error);
}

}  // namespace octet::sp_bridge
