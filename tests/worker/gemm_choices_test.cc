// worker/gemm_choices.h: the file, the decision, and the agreement between
// ranks. The CPU backend runs row-group GEMMs one way; CUDA's two ways run
// only on a GPU (tests/kernels/cuda_gemm_test.cc checks both there). So the
// backend here is the CPU's behind a wrapper that claims two ways and makes
// each take a set time per rank (a sleep before the CPU's real GEMM), read
// through the backend's own clock: the choosing, the collectives (real
// shared-memory communicators, one thread per rank), the file and
// LlamaModel's part in it run exactly as they would on GPU ranks.
#include "worker/gemm_choices.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "kernels/cpu/backend.h"
#include "model/synthetic.h"
#include "parallel/shm_communicator.h"
#include "rpc/store.h"
#include "tests/status_util.h"
#include "tests/worker/capturing_backend.h"
#include "worker/llama_model.h"

namespace octet {
namespace {

namespace fs = std::filesystem;

// The CPU backend with two row-group GEMM ways; way w of a call takes
// delay_ms[w] longer.
class TwoWayBackend : public testing::CapturingBackend {
 public:
  explicit TwoWayBackend(std::vector<double> delay_ms)
      : CapturingBackend(NewCpuBackend({.num_threads = 1})),
        delay_ms_(std::move(delay_ms)) {}

  GemmWays RowGroupGemmWays() const override {
    GemmWays ways;
    ways.device = "test device";
    ways.names = {"first", "second"};
    return ways;
  }
  absl::Status SetRowGroupGemmWay(int64_t rows, const LinearWeight& w,
                                  int way) override {
    absl::MutexLock lock(&mu_);
    way_[{RowBucket(rows), w.out, w.in}] = way;
    return absl::OkStatus();
  }
  absl::Status GemmE4m3(const uint8_t* q, const float* q_scale,
                        const RowGroups& groups, int64_t rows,
                        const LinearWeight& w, void* y) override {
    int way = 0;
    {
      absl::MutexLock lock(&mu_);
      ++gemms_;
      way = way_[{RowBucket(rows), w.out, w.in}];
    }
    std::this_thread::sleep_for(
        std::chrono::duration<double, std::milli>(delay_ms_[way]));
    return CapturingBackend::GemmE4m3(q, q_scale, groups, rows, w, y);
  }

  // The way set for (rows bucket, out, in); -1: none.
  int WayOf(int64_t rows, int64_t out, int64_t in) {
    absl::MutexLock lock(&mu_);
    const auto it = way_.find({RowBucket(rows), out, in});
    return it == way_.end() ? -1 : it->second;
  }
  int64_t gemms() {
    absl::MutexLock lock(&mu_);
    return gemms_;
  }

 private:
  std::vector<double> delay_ms_;
  absl::Mutex mu_;
  std::map<std::tuple<int64_t, int64_t, int64_t>, int> way_
      ABSL_GUARDED_BY(mu_);
  int64_t gemms_ ABSL_GUARDED_BY(mu_) = 0;
};

// An e4m3 weight [out][in] of 1.0 codes, scale 1.
LinearWeight E4m3Weight(Backend& backend, int64_t out, int64_t in) {
  LinearWeight w;
  w.out = out;
  w.in = in;
  w.dtype = DType::kE4m3;
  const std::vector<uint8_t> codes(out * in, 0x38);
  const float scale = 1.0f;
  w.data = *backend.Allocate(codes.size());
  w.scale = *backend.Allocate(sizeof(float));
  EXPECT_TRUE(
      backend.CopyToDevice(w.data.data(), codes.data(), codes.size()).ok());
  EXPECT_TRUE(backend.CopyToDevice(w.scale.data(), &scale, 4).ok());
  return w;
}

GemmChoiceOptions Options(const std::string& file, int64_t max_rows,
                          int reps = 3) {
  GemmChoiceOptions o;
  o.file = file;
  o.max_rows = max_rows;
  o.reps = reps;
  return o;
}

std::string TempPath(const std::string& name) {
  return (fs::temp_directory_path() /
          absl::StrCat("octet_gemm_choices_", ::getpid(), "_", name))
      .string();
}

TEST(GemmChoiceFile, ChoicesRoundTripAndStayApartByDevice) {
  GemmChoiceFile file;
  const RowGroupProblem p{.rows = 8, .out = 6144, .in = 4096};
  file.Set({.device = "gpu A",
            .problem = p,
            .way = "two-pass",
            .ms = {{"outer-vector", 0.5}, {"two-pass", 0.25}}});
  file.Set({.device = "gpu B", .problem = p, .way = "outer-vector", .ms = {}});
  file.Set({.device = "gpu A", .problem = p, .way = "outer-vector", .ms = {}});
  auto back = GemmChoiceFile::Parse(file.Serialize(), "f");
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->choices().size(), 2u);  // A's replaced, B's kept
  EXPECT_EQ(back->Find("gpu A", p)->way, "outer-vector");
  EXPECT_EQ(back->Find("gpu B", p)->way, "outer-vector");
  RowGroupProblem other = p;
  other.per_channel = true;
  EXPECT_EQ(back->Find("gpu A", other), nullptr);
}

TEST(GemmChoiceFile, ABadFileIsAnErrorNamingItAndTheField) {
  const std::string ok_entry =
      R"({"device":"d","rows":8,"out":4,"in":4,"per_channel":false,)"
      R"("way":"w"})";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{", "not JSON"},
      {R"({"choices":[]})", "version"},
      {R"({"octet_gemm_choices":2,"choices":[]})", "version"},
      {R"({"octet_gemm_choices":1,"choices":{}})", "\"choices\""},
      {R"({"octet_gemm_choices":1,"choices":[3]})", "choices[0]"},
      {R"({"octet_gemm_choices":1,"choices":[{"device":"d","rows":6,)"
       R"("out":4,"in":4,"per_channel":false,"way":"w"}]})",
       "choices[0].rows must be a power of two"},
      {R"({"octet_gemm_choices":1,"choices":[{"device":"d","rows":8,)"
       R"("out":0,"in":4,"per_channel":false,"way":"w"}]})",
       "choices[0].out"},
      {R"({"octet_gemm_choices":1,"choices":[{"device":"d","rows":8,)"
       R"("out":4,"in":4,"way":"w"}]})",
       "choices[0].per_channel"},
      {R"({"octet_gemm_choices":1,"choices":[{"device":"","rows":8,)"
       R"("out":4,"in":4,"per_channel":false,"way":"w"}]})",
       "choices[0].device"},
      {absl::StrCat(R"({"octet_gemm_choices":1,"choices":[)", ok_entry, ",",
                    ok_entry, "]}"),
       "choices[1] repeats"},
  };
  for (const auto& [text, says] : cases) {
    const auto file = GemmChoiceFile::Parse(text, "choices.json");
    ASSERT_FALSE(file.ok()) << text;
    EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(file.status().message(), "choices.json"))
        << file.status();
    EXPECT_TRUE(absl::StrContains(file.status().message(), says))
        << file.status() << " should say " << says;
  }
  // A missing file has no choices; a directory in its place is an error.
  EXPECT_TRUE(GemmChoiceFile::Read(TempPath("absent"))->choices().empty());
  EXPECT_FALSE(GemmChoiceFile::Read(fs::temp_directory_path().string()).ok());
}

TEST(GemmChoices, FastestWayTakesTheFirstOfEqualTimes) {
  EXPECT_EQ(FastestWay(std::vector<double>{3, 1, 2}), 1);
  EXPECT_EQ(FastestWay(std::vector<double>{2, 2}), 0);
  EXPECT_EQ(FastestWay(std::vector<double>{5}), 0);
}

TEST(GemmChoices, TheFileLivesBesideTheModel) {
  EXPECT_EQ(DefaultGemmChoicePath("/m/llama"),
            "/m/llama/octet-gemm-choices.json");
  EXPECT_EQ(DefaultGemmChoicePath("/m/llama/"),
            "/m/llama/octet-gemm-choices.json");
  EXPECT_EQ(DefaultGemmChoicePath("/m/smol.Q8.GGUF"),
            "/m/smol.Q8.GGUF.gemm-choices.json");
}

TEST(GemmChoices, OneRankMeasuresOnceThenReadsTheFile) {
  const std::string path = TempPath("one");
  fs::remove(path);
  std::vector<std::string> said;
  GemmChoiceOptions options = Options(path, 5);  // buckets 2, 4, 8
  options.log = [&](const std::string& line) { said.push_back(line); };
  {
    TwoWayBackend backend({6.0, 0.0});  // the second way is faster
    const LinearWeight a = E4m3Weight(backend, 32, 64);
    const LinearWeight b = E4m3Weight(backend, 16, 64);
    const LinearWeight* weights[] = {&a, &b, &a};  // a twice: one shape
    OCTET_ASSERT_OK(ChooseRowGroupGemms(backend, nullptr, weights, options));
    for (int64_t rows : {2, 4, 8, 64, 65536}) {
      EXPECT_EQ(backend.WayOf(rows, 32, 64), 1) << rows;
      EXPECT_EQ(backend.WayOf(rows, 16, 64), 1) << rows;
    }
    EXPECT_EQ(backend.WayOf(1, 32, 64), -1);  // one row: one group
    EXPECT_GT(backend.gemms(), 0);
  }
  auto file = GemmChoiceFile::Read(path);
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ(file->choices().size(), 6u);  // 2 shapes x 3 buckets
  const GemmChoice* c =
      file->Find("test device", {.rows = 4, .out = 16, .in = 64});
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->way, "second");
  ASSERT_EQ(c->ms.size(), 2u);
  EXPECT_GT(c->ms[0].second, c->ms[1].second + 4.0);
  ASSERT_EQ(said.size(), 1u);
  EXPECT_TRUE(absl::StrContains(said[0], "32x64: rows 2-8 second")) << said[0];
  EXPECT_TRUE(absl::StrContains(said[0], "(measured)")) << said[0];

  // Loaded again, with the other way now faster: the file's choice holds,
  // and nothing is measured.
  TwoWayBackend again({0.0, 6.0});
  const LinearWeight a = E4m3Weight(again, 32, 64);
  const LinearWeight* weights[] = {&a};
  said.clear();
  OCTET_ASSERT_OK(ChooseRowGroupGemms(again, nullptr, weights, options));
  EXPECT_EQ(again.WayOf(8, 32, 64), 1);
  EXPECT_EQ(again.gemms(), 0);
  ASSERT_EQ(said.size(), 1u);
  EXPECT_TRUE(absl::StrContains(said[0], "from " + path)) << said[0];
  fs::remove(path);
}

TEST(GemmChoices, AFileNamingAnotherWayIsAnError) {
  const std::string path = TempPath("otherway");
  std::ofstream(path) << R"({"octet_gemm_choices":1,"choices":[)"
                         R"({"device":"test device","rows":2,"out":32,)"
                         R"("in":64,"per_channel":false,"way":"third"}]})";
  TwoWayBackend backend({0.0, 0.0});
  const LinearWeight a = E4m3Weight(backend, 32, 64);
  const LinearWeight* weights[] = {&a};
  const absl::Status s =
      ChooseRowGroupGemms(backend, nullptr, weights, Options(path, 2));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "\"third\"")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), path)) << s;
  fs::remove(path);
}

TEST(GemmChoices, AFileThatCannotBeWrittenIsSaidAndTheChoicesHold) {
  const std::string path = "/proc/octet-no-such-dir/choices.json";
  std::vector<std::string> said;
  TwoWayBackend backend({0.0, 4.0});
  const LinearWeight a = E4m3Weight(backend, 32, 64);
  const LinearWeight* weights[] = {&a};
  GemmChoiceOptions options = Options(path, 2);
  options.log = [&](const std::string& line) { said.push_back(line); };
  OCTET_ASSERT_OK(ChooseRowGroupGemms(backend, nullptr, weights, options));
  EXPECT_EQ(backend.WayOf(2, 32, 64), 0);
  ASSERT_EQ(said.size(), 2u);
  EXPECT_TRUE(absl::StrContains(said[1], "cannot write " + path)) << said[1];
}

// Runs body(rank, communicator) on two ranks, a thread each, over a real
// shared-memory group named `group`; each rank's status (the group's, if it
// could not form).
std::vector<absl::Status> OnTwoRanks(
    const std::string& group,
    const std::function<absl::Status(int, Communicator*)>& body) {
  InMemoryStore store;
  std::vector<absl::Status> status(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      auto comm = NewShmCommunicator(
          store, r, 2, {.group = absl::StrCat(group, ::getpid())});
      status[r] = comm.ok() ? body(r, comm->get()) : comm.status();
    });
  }
  for (auto& t : ranks) t.join();
  return status;
}

// Rank 0 alone would take the first way, rank 1 alone the second; both take
// the way whose slowest rank is fastest.
TEST(GemmChoices, RanksTakeTheSameWayFromTheSlowestRanksTimes) {
  const std::string path = TempPath("two");
  fs::remove(path);
  const std::vector<std::vector<double>> delays = {{0.0, 4.0}, {9.0, 0.0}};
  std::vector<std::vector<int>> ways(2);
  const std::vector<absl::Status> status =
      OnTwoRanks("choices", [&](int r, Communicator* comm) {
        TwoWayBackend backend(delays[r]);
        const LinearWeight a = E4m3Weight(backend, 32, 64);
        const LinearWeight* weights[] = {&a};
        const absl::Status s =
            ChooseRowGroupGemms(backend, comm, weights, Options(path, 4));
        for (int64_t rows : {2, 4}) {
          ways[r].push_back(backend.WayOf(rows, 32, 64));
        }
        return s;
      });
  OCTET_EXPECT_OK(status[0]);
  OCTET_EXPECT_OK(status[1]);
  EXPECT_EQ(ways[0], (std::vector<int>{1, 1}));
  EXPECT_EQ(ways[1], (std::vector<int>{1, 1}));
  auto file = GemmChoiceFile::Read(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->choices().size(), 2u);
  fs::remove(path);
}

// A file rank 0 cannot read fails every rank, none waiting on the others.
TEST(GemmChoices, ABadFileOnRankZeroFailsEveryRank) {
  const std::string path = TempPath("bad");
  std::ofstream(path) << "not json";
  const std::vector<absl::Status> status =
      OnTwoRanks("badchoices", [&](int r, Communicator* comm) {
        TwoWayBackend backend({0.0, 0.0});
        const LinearWeight a = E4m3Weight(backend, 32, 64);
        const LinearWeight* weights[] = {&a};
        // Only rank 0 reads the file: rank 1's path names nothing.
        return ChooseRowGroupGemms(
            backend, comm, weights,
            Options(r == 0 ? path : TempPath("unread"), 2));
      });
  EXPECT_EQ(status[0].code(), absl::StatusCode::kInvalidArgument) << status[0];
  EXPECT_TRUE(absl::StrContains(status[0].message(), path)) << status[0];
  EXPECT_EQ(status[1].code(), absl::StatusCode::kFailedPrecondition)
      << status[1];
  fs::remove(path);
}

// LlamaModel::Load chooses for the FP8 weights that GemmE4m3 runs with row
// groups: QKV and gate_up (the CPU's o_proj and down_proj have block sums).
TEST(GemmChoices, AnFp8ModelChoosesForItsColumnParallelShapes) {
  const fs::path dir = TempPath("model");
  const ModelConfig config = *SyntheticPreset("tiny");
  OCTET_ASSERT_OK(WriteSyntheticCheckpoint(config, {.seed = 3}, dir.string()));
  auto ckpt = Checkpoint::Open(dir.string());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status();
  TwoWayBackend backend({0.0, 3.0});
  ModelOptions o;
  o.method = LinearMethod::kFp8;
  o.gemm_choices = Options(DefaultGemmChoicePath(dir.string()), 2);
  auto model = LlamaModel::Load(**ckpt, backend, o);
  ASSERT_TRUE(model.ok()) << model.status();
  auto file = GemmChoiceFile::Read(o.gemm_choices.file);
  ASSERT_TRUE(file.ok()) << file.status();
  std::vector<std::pair<int64_t, int64_t>> shapes;
  for (const GemmChoice& c : file->choices()) {
    shapes.emplace_back(c.problem.out, c.problem.in);
  }
  const int64_t qkv =
      (config.num_heads + 2 * config.num_kv_heads) * config.head_dim;
  EXPECT_EQ(shapes, (std::vector<std::pair<int64_t, int64_t>>{
                        {qkv, config.hidden_size},
                        {2 * config.intermediate_size, config.hidden_size}}));
  EXPECT_EQ(backend.WayOf(2, qkv, config.hidden_size), 0);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace octet
