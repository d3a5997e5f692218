// Checkpoint directories: synthetic ones load and validate, single-file and
// sharded; determinism of the synthetic writer; and a clear error for each way
// a checkpoint can disagree with its config. Also the tokenizer.
#include "model/checkpoint.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/bf16.h"
#include "base/file_util.h"
#include "model/synthetic.h"
#include "model/tokenizer.h"
#include "model/tokenizer_corpus.h"
#include "tests/process_util.h"

namespace octet {
namespace {

namespace fs = std::filesystem;

std::string TempDir(const std::string& name) {
  const fs::path p = fs::temp_directory_path() /
                     absl::StrCat("octet_ckpt_", ::getpid(), "_", name);
  fs::remove_all(p);
  return p.string();
}

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string MakeTiny(const std::string& name, SyntheticOptions options = {},
                     const std::string& preset = "tiny") {
  const std::string dir = TempDir(name);
  absl::StatusOr<ModelConfig> c = SyntheticPreset(preset);
  EXPECT_TRUE(c.ok());
  EXPECT_TRUE(WriteSyntheticCheckpoint(*c, options, dir).ok());
  return dir;
}

void ExpectOpenFails(const std::string& dir, const std::string& fragment) {
  absl::StatusOr<std::unique_ptr<Checkpoint>> c = Checkpoint::Open(dir);
  ASSERT_FALSE(c.ok()) << "opened " << dir;
  EXPECT_NE(std::string(c.status().message()).find(fragment), std::string::npos)
      << "'" << c.status().message() << "' lacks '" << fragment << "'";
}

TEST(Checkpoint, SyntheticTinyOpensAndValidates) {
  for (const std::string preset : {"tiny", "tiny-mistral"}) {
    const std::string dir = MakeTiny(preset, {}, preset);
    absl::StatusOr<std::unique_ptr<Checkpoint>> c = Checkpoint::Open(dir);
    ASSERT_TRUE(c.ok()) << c.status();
    const ModelConfig& cfg = (*c)->config();
    EXPECT_EQ(cfg.torch_dtype, DType::kBf16);
    absl::StatusOr<TensorView> q =
        (*c)->Get("model.layers.1.self_attn.q_proj.weight");
    ASSERT_TRUE(q.ok());
    EXPECT_EQ(q->dtype, DType::kBf16);
    EXPECT_EQ(q->shape, (std::vector<int64_t>{cfg.num_heads * cfg.head_dim,
                                              cfg.hidden_size}));
    EXPECT_EQ(q->bytes.size(), static_cast<size_t>(q->num_elements() * 2));
    EXPECT_EQ((*c)->Has("lm_head.weight"), !cfg.tie_word_embeddings);
    EXPECT_EQ((*c)->Get("nope").status().code(), absl::StatusCode::kNotFound);
    fs::remove_all(dir);
  }
}

TEST(Checkpoint, SyntheticWeightsHaveTheIntendedScale) {
  const std::string dir = MakeTiny("scale", {.dtype = DType::kF32});
  absl::StatusOr<std::unique_ptr<Checkpoint>> c = Checkpoint::Open(dir);
  ASSERT_TRUE(c.ok()) << c.status();
  auto rms = [&](const std::string& name) {
    const TensorView t = *(*c)->Get(name);
    const float* v = reinterpret_cast<const float*>(t.bytes.data());
    double s = 0;
    for (int64_t i = 0; i < t.num_elements(); ++i) s += double(v[i]) * v[i];
    return std::sqrt(s / t.num_elements());
  };
  const double h = (*c)->config().hidden_size;
  EXPECT_NEAR(rms("model.layers.0.self_attn.q_proj.weight"), 1 / std::sqrt(h),
              0.1 / std::sqrt(h));
  EXPECT_NEAR(rms("model.layers.0.input_layernorm.weight"), 1.0, 0.01);
  EXPECT_LT(rms("model.layers.0.mlp.down_proj.weight"),
            rms("model.layers.0.mlp.up_proj.weight"));
  fs::remove_all(dir);
}

TEST(Checkpoint, SameSeedSameBytesOtherSeedOtherBytes) {
  const std::string a = MakeTiny("seed_a", {.seed = 7});
  const std::string b = MakeTiny("seed_b", {.seed = 7});
  const std::string c = MakeTiny("seed_c", {.seed = 8});
  for (const char* f :
       {"model.safetensors", "config.json", "tokenizer.model"}) {
    EXPECT_EQ(ReadFile(fs::path(a) / f), ReadFile(fs::path(b) / f)) << f;
  }
  EXPECT_NE(ReadFile(fs::path(a) / "model.safetensors"),
            ReadFile(fs::path(c) / "model.safetensors"));
  for (const auto& d : {a, b, c}) fs::remove_all(d);
}

TEST(Checkpoint, ShardedCheckpointsLoadThroughTheIndex) {
  const std::string dir = MakeTiny("sharded", {.shard_bytes = 64 << 10});
  EXPECT_TRUE(fs::exists(fs::path(dir) / "model.safetensors.index.json"));
  EXPECT_FALSE(fs::exists(fs::path(dir) / "model.safetensors"));
  absl::StatusOr<std::unique_ptr<Checkpoint>> c = Checkpoint::Open(dir);
  ASSERT_TRUE(c.ok()) << c.status();
  const std::string single = MakeTiny("unsharded");
  absl::StatusOr<std::unique_ptr<Checkpoint>> s = Checkpoint::Open(single);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ((*c)->TensorNames(), (*s)->TensorNames());
  for (const std::string& name : (*s)->TensorNames()) {
    const TensorView x = *(*c)->Get(name), y = *(*s)->Get(name);
    ASSERT_EQ(std::string(x.bytes.begin(), x.bytes.end()),
              std::string(y.bytes.begin(), y.bytes.end()))
        << name;
  }
  // An index that lies about where a tensor is.
  std::string index = ReadFile(fs::path(dir) / "model.safetensors.index.json");
  const size_t at = index.find("model-00001-of-");
  ASSERT_NE(at, std::string::npos);
  index.replace(index.find("model-00002-of-"), 15, "model-00001-of-");
  std::ofstream(fs::path(dir) / "model.safetensors.index.json") << index;
  ExpectOpenFails(dir, "is not in model-00001-of-");
  fs::remove_all(dir);
  fs::remove_all(single);
}

TEST(Checkpoint, RejectsCheckpointsThatDisagreeWithTheirConfig) {
  const std::string dir = MakeTiny("bad");
  const fs::path config = fs::path(dir) / "config.json";
  const std::string good = ReadFile(config);
  auto with_config = [&](const std::string& from, const std::string& to) {
    std::string text = good;
    const size_t at = text.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    text.replace(at, from.size(), to);
    std::ofstream(config) << text;
  };
  with_config("\"num_hidden_layers\": 2", "\"num_hidden_layers\": 3");
  ExpectOpenFails(
      dir, "checkpoint has no tensor 'model.layers.2.input_layernorm.weight'");
  with_config("\"intermediate_size\": 160", "\"intermediate_size\": 128");
  ExpectOpenFails(
      dir,
      "tensor 'model.layers.0.mlp.gate_proj.weight' has shape [160, 64] but "
      "config.json implies [128, 64]");
  with_config("\"tie_word_embeddings\": true",
              "\"tie_word_embeddings\": false");
  ExpectOpenFails(dir, "no tensor 'lm_head.weight'");
  std::ofstream(config) << good;
  ASSERT_TRUE(Checkpoint::Open(dir).ok());
  fs::remove(fs::path(dir) / "model.safetensors");
  ExpectOpenFails(dir, "no model.safetensors or model.safetensors.index.json");
  fs::remove_all(dir);
  ExpectOpenFails(dir, "config.json: cannot read");
}

// Files of the wrong kind fail with an error naming them; a FIFO would make
// a plain open() wait forever for a writer.
TEST(Checkpoint, RejectsFifosAndDirectoriesInPlaceOfFiles) {
  const std::string dir = MakeTiny("kinds");
  const fs::path config = fs::path(dir) / "config.json";
  const std::string good = ReadFile(config);
  fs::remove(config);
  ASSERT_EQ(::mkfifo(config.c_str(), 0600), 0);
  ExpectOpenFails(dir, "config.json: not a regular file");
  fs::remove(config);
  std::ofstream(config) << good;

  const fs::path weights = fs::path(dir) / "model.safetensors";
  fs::rename(weights, fs::path(dir) / "saved");
  ASSERT_EQ(::mkfifo(weights.c_str(), 0600), 0);
  ExpectOpenFails(dir, "model.safetensors: not a regular file");
  fs::remove(weights);
  fs::create_directory(weights);
  ExpectOpenFails(dir, "model.safetensors: not a regular file");
  fs::remove(weights);
  fs::rename(fs::path(dir) / "saved", weights);

  const fs::path tok = fs::path(dir) / "tokenizer.model";
  fs::remove(tok);
  ASSERT_EQ(::mkfifo(tok.c_str(), 0600), 0);
  EXPECT_EQ(Tokenizer::Load(dir).status().code(),
            absl::StatusCode::kInvalidArgument);
  fs::remove(tok);
  EXPECT_EQ(Tokenizer::Load(dir).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(Checkpoint::Open(dir).ok());
  fs::remove_all(dir);
}

TEST(ReadTokenFile, StripsWhitespaceAndRefusesEmptyOrOddFiles) {
  const std::string dir = TempDir("token");
  fs::create_directories(dir);
  const fs::path file = fs::path(dir) / "token";
  std::ofstream(file) << "  s3cret\n";
  EXPECT_EQ(ReadTokenFile(file.string()).value_or(""), "s3cret");
  std::ofstream(file) << " \n";
  EXPECT_EQ(ReadTokenFile(file.string()).status().code(),
            absl::StatusCode::kInvalidArgument);
  fs::remove(file);
  EXPECT_EQ(ReadTokenFile(file.string()).status().code(),
            absl::StatusCode::kNotFound);
  ASSERT_EQ(::mkfifo(file.c_str(), 0600), 0);  // must not block
  EXPECT_EQ(ReadTokenFile(file.string()).status().code(),
            absl::StatusCode::kInvalidArgument);
  fs::remove_all(dir);
}

// `ids` through a TextStream: the text, each piece checked to be whole
// UTF-8 (no replacement character from a split multi-byte character).
std::string Stream(const Tokenizer& t, const std::vector<int64_t>& ids) {
  TextStream stream(t);
  std::string streamed;
  for (int64_t id : ids) {
    const std::string piece = stream.Add(id);
    EXPECT_EQ(piece.find("\xEF\xBF\xBD"), std::string::npos) << piece;
    streamed += piece;
  }
  return streamed + stream.Finish();
}

TEST(TextStream, StreamsWholeCharactersAndKeepsSpaces) {
  const std::string dir = MakeTiny("stream");
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::Load(dir);
  ASSERT_TRUE(t.ok()) << t.status();
  // Multi-byte characters the tokenizer never saw arrive as byte pieces,
  // one byte per id; spaces ride on the word pieces after them.
  const std::string text = "The cat 日本語 sat ☃ on Zürich mats";
  std::vector<int64_t> ids = (*t)->Encode(text, /*add_bos=*/true);
  ids.push_back(100000);  // an id beyond the tokenizer: U+FFFD
  ids.push_back((*t)->eos_id());
  const std::string streamed = Stream(**t, ids);
  EXPECT_EQ(streamed, text + "\xEF\xBF\xBD");
  fs::remove_all(dir);
}

// make-model --tokenizer json: a Llama 3-style tokenizer.json alone, which
// the loader picks, whose special tokens config.json names, and which
// round-trips text and streams whole characters.
TEST(Tokenizer, ASyntheticTokenizerJsonServesTheModel) {
  SyntheticOptions options;
  options.tokenizer = SyntheticOptions::Tokenizer::kJson;
  const std::string dir = MakeTiny("tokjson", options);
  EXPECT_FALSE(fs::exists(fs::path(dir) / "tokenizer.model"));
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::Load(dir);
  ASSERT_TRUE(t.ok()) << t.status();
  absl::StatusOr<ModelConfig> config = LoadModelConfig(dir);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ((*t)->vocab_size(), 512);
  EXPECT_EQ((*t)->bos_id(), 509);
  EXPECT_EQ(config->bos_token_id, 509);
  EXPECT_EQ(config->eos_token_ids, (std::vector<int64_t>{510, 511}));
  int64_t bytes = 0, tokens = 0;
  for (const std::string& line : TokenizerCorpus()) {
    const std::vector<int64_t> ids = (*t)->Encode(line, true);
    ASSERT_FALSE(ids.empty());
    EXPECT_EQ(ids[0], 509);
    EXPECT_EQ((*t)->Decode(ids), line);
    bytes += static_cast<int64_t>(line.size());
    tokens += static_cast<int64_t>(ids.size()) - 1;
  }
  EXPECT_LT(tokens * 2, bytes) << "the learned merges should halve the text";
  const std::string text = "The cat 日本語 sat ☃ on Zürich mats";
  std::vector<int64_t> ids = (*t)->Encode(text, /*add_bos=*/true);
  ids.push_back(511);  // <|eot_id|>: nothing
  EXPECT_EQ(Stream(**t, ids), text);
  fs::remove_all(dir);
}

TEST(Tokenizer, RoundTripsTextAndHasTheModelsVocabulary) {
  const std::string dir = MakeTiny("tok");
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::Load(dir);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->vocab_size(), 512);
  EXPECT_EQ((*t)->bos_id(), 1);
  EXPECT_EQ((*t)->eos_id(), 2);
  for (const std::string& line : TokenizerCorpus()) {
    const std::vector<int64_t> ids = (*t)->Encode(line, true);
    ASSERT_FALSE(ids.empty());
    EXPECT_EQ(ids[0], 1);
    EXPECT_EQ((*t)->Decode(ids), line);
  }
  // Text it never saw still round-trips, through byte pieces.
  const std::string odd = "Zürich ☃ 42";
  EXPECT_EQ((*t)->Decode((*t)->Encode(odd, false)), odd);
  // Ids beyond the tokenizer (a padded model vocabulary) are visible.
  std::vector<int64_t> ids = (*t)->Encode("Hello", false);
  ids.push_back(100000);
  EXPECT_EQ((*t)->Decode(ids), "Hello\xEF\xBF\xBD");
  fs::remove_all(dir);
  EXPECT_EQ(Tokenizer::Load(dir).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Tokenizer::FromSerialized("garbage", "x").status().code(),
            absl::StatusCode::kInvalidArgument);
}

// tokenizer_config.json's add_bos_token beside a tokenizer.model: false
// leaves BOS out (the id stays known); another type is an error.
TEST(Tokenizer, TokenizerConfigCanSayNotToAddBos) {
  const std::string dir = MakeTiny("tok_bos");
  const std::string config = (fs::path(dir) / "tokenizer_config.json").string();
  std::ofstream(config) << R"({"add_bos_token": false, "bos_token": "<s>"})";
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = Tokenizer::Load(dir);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->bos_id(), 1);
  EXPECT_EQ((*t)->Encode("Hello", true), (*t)->Encode("Hello", false));
  std::ofstream(config) << R"({"add_bos_token": true})";
  t = Tokenizer::Load(dir);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->Encode("Hello", true)[0], 1);
  std::ofstream(config) << R"({"add_bos_token": "no"})";
  EXPECT_NE(Tokenizer::Load(dir).status().message().find(
                "add_bos_token is not true or false"),
            std::string::npos);
  std::ofstream(config) << "[1, 2]";
  EXPECT_NE(Tokenizer::Load(dir).status().message().find("not a JSON object"),
            std::string::npos);
  fs::remove_all(dir);
}

// A tokenizer with more pieces than the model's vocabulary would hand the
// model ids it cannot embed: refused at load, naming both sizes. A model
// vocabulary padded beyond the tokenizer's is fine; no tokenizer is null.
TEST(Tokenizer, LoadTokenizerForChecksItAgainstTheConfig) {
  const std::string dir = MakeTiny("tok_for");
  ModelConfig c = *SyntheticPreset("tiny");  // vocabulary 512
  absl::StatusOr<std::unique_ptr<Tokenizer>> t = LoadTokenizerFor(dir, c);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_NE(*t, nullptr);
  c.vocab_size = 640;  // padded
  EXPECT_TRUE(LoadTokenizerFor(dir, c).ok());
  c.vocab_size = 256;
  t = LoadTokenizerFor(dir, c);
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(t.status().message())
                .find("has 512 ids, more than config.json's vocab_size 256"),
            std::string::npos)
      << t.status();
  fs::remove(fs::path(dir) / "tokenizer.model");
  t = LoadTokenizerFor(dir, c);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(*t, nullptr);
  fs::remove_all(dir);
}

TEST(Tokenizer, AMissingSentencePieceModuleIsAClearError) {
  // SentencePiece is a module beside the programs (sentencepiece_bridge.h):
  // `octet` copied away from it must say so, and where it looked.
  const fs::path dir =
      fs::temp_directory_path() / absl::StrCat("octet_nomodule_", ::getpid());
  fs::create_directories(dir);
  ASSERT_TRUE(WriteSyntheticCheckpoint(*SyntheticPreset("tiny"), {.seed = 2},
                                       (dir / "model").string())
                  .ok());
  const fs::path octet = testing::SiblingProgram("octet");
  fs::copy_file(octet, dir / "octet");
  // The CUDA kernels' library, which `octet` loads from its folder too.
  const fs::path kernels = octet.parent_path() / "liboctet_cuda_device_code.so";
  if (fs::exists(kernels)) fs::copy_file(kernels, dir / kernels.filename());
  const std::string command = absl::StrCat(
      "env -u OCTET_SENTENCEPIECE_MODULE ", (dir / "octet").string(),
      " generate --model ", (dir / "model").string(),
      " --prompt hello --max_tokens 2 2> ", (dir / "stderr").string());
  const int status = std::system(command.c_str());
  EXPECT_NE(status, 0);
  std::ifstream err(dir / "stderr");
  std::stringstream text;
  text << err.rdbuf();
  EXPECT_NE(text.str().find("SentencePiece module liboctet_sentencepiece.so "
                            "not found"),
            std::string::npos)
      << text.str();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace octet
