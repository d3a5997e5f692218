// Choosing row-group GEMM ways (see gemm_choices.h): the file, the timing,
// and the agreement between ranks.
#include "worker/gemm_choices.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/file_util.h"
#include "base/status_macros.h"
#include "nlohmann/json.hpp"

namespace octet {

namespace {

using Json = nlohmann::json;

constexpr int kFileVersion = 1;
constexpr size_t kMaxFileBytes = size_t{4} << 20;
// Buckets above the measured ones take the largest one's way, up to this
// many rows (cuBLASLt's outer-vector limit: CublasLtGemm::kMaxOuterRows).
constexpr int64_t kLastBucket = int64_t{1} << 16;

absl::Status Malformed(absl::string_view what, absl::string_view detail) {
  return absl::InvalidArgumentError(absl::StrCat(
      what, ": ", detail, " (delete the file to measure the choices again)"));
}

// One entry of "choices", checked field by field.
absl::StatusOr<GemmChoice> ParseChoice(const Json& j, absl::string_view what,
                                       size_t index) {
  const std::string at = absl::StrCat("choices[", index, "]");
  if (!j.is_object()) return Malformed(what, at + " is not an object");
  GemmChoice c;
  auto text = [&](const char* key, std::string* out) -> absl::Status {
    if (!j.contains(key) || !j[key].is_string() ||
        j[key].get<std::string>().empty()) {
      return Malformed(
          what, absl::StrCat(at, ".", key, " must be a non-empty string"));
    }
    *out = j[key].get<std::string>();
    return absl::OkStatus();
  };
  auto count = [&](const char* key, int64_t min, int64_t* out) -> absl::Status {
    if (!j.contains(key) || !j[key].is_number_integer() ||
        j[key].get<int64_t>() < min) {
      return Malformed(
          what, absl::StrCat(at, ".", key, " must be an integer >= ", min));
    }
    *out = j[key].get<int64_t>();
    return absl::OkStatus();
  };
  OCTET_RETURN_IF_ERROR(text("device", &c.device));
  OCTET_RETURN_IF_ERROR(text("way", &c.way));
  OCTET_RETURN_IF_ERROR(count("rows", 2, &c.problem.rows));
  OCTET_RETURN_IF_ERROR(count("out", 1, &c.problem.out));
  OCTET_RETURN_IF_ERROR(count("in", 1, &c.problem.in));
  if (RowBucket(c.problem.rows) != c.problem.rows) {
    return Malformed(what, at + ".rows must be a power of two");
  }
  if (!j.contains("per_channel") || !j["per_channel"].is_boolean()) {
    return Malformed(what, at + ".per_channel must be true or false");
  }
  c.problem.per_channel = j["per_channel"].get<bool>();
  if (j.contains("ms")) {
    if (!j["ms"].is_object()) return Malformed(what, at + ".ms: an object");
    for (const auto& [name, ms] : j["ms"].items()) {
      if (!ms.is_number()) {
        return Malformed(what, absl::StrCat(at, ".ms.", name, ": a number"));
      }
      c.ms.emplace_back(name, ms.get<double>());
    }
  }
  return c;
}

Json ToJson(const GemmChoice& c) {
  Json ms = Json::object();
  for (const auto& [name, t] : c.ms) ms[name] = t;
  return Json{{"device", c.device},
              {"rows", c.problem.rows},
              {"out", c.problem.out},
              {"in", c.problem.in},
              {"per_channel", c.problem.per_channel},
              {"way", c.way},
              {"ms", ms}};
}

}  // namespace

absl::StatusOr<GemmChoiceFile> GemmChoiceFile::Parse(absl::string_view text,
                                                     absl::string_view what) {
  const Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Malformed(what, "not JSON");
  if (!j.is_object() || !j.contains("octet_gemm_choices") ||
      j["octet_gemm_choices"] != kFileVersion) {
    return Malformed(what, absl::StrCat("not an octet_gemm_choices file of "
                                        "version ",
                                        kFileVersion));
  }
  if (!j.contains("choices") || !j["choices"].is_array()) {
    return Malformed(what, "\"choices\" must be an array");
  }
  GemmChoiceFile file;
  for (size_t i = 0; i < j["choices"].size(); ++i) {
    OCTET_ASSIGN_OR_RETURN(GemmChoice c, ParseChoice(j["choices"][i], what, i));
    if (file.Find(c.device, c.problem) != nullptr) {
      return Malformed(what,
                       absl::StrCat("choices[", i, "] repeats a problem"));
    }
    file.choices_.push_back(std::move(c));
  }
  return file;
}

absl::StatusOr<GemmChoiceFile> GemmChoiceFile::Read(const std::string& path) {
  absl::StatusOr<std::string> text = ReadSmallFile(path, kMaxFileBytes);
  if (absl::IsNotFound(text.status())) return GemmChoiceFile{};
  OCTET_RETURN_IF_ERROR(text.status());
  return Parse(*text, path);
}

std::string GemmChoiceFile::Serialize() const {
  Json choices = Json::array();
  for (const GemmChoice& c : choices_) choices.push_back(ToJson(c));
  const Json file{{"octet_gemm_choices", kFileVersion}, {"choices", choices}};
  return file.dump(1) + "\n";
}

absl::Status GemmChoiceFile::Write(const std::string& path) const {
  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
  const std::string text = Serialize();
  FILE* f = std::fopen(tmp.c_str(), "w");
  bool ok = f != nullptr &&
            std::fwrite(text.data(), 1, text.size(), f) == text.size();
  if (f != nullptr) ok = std::fclose(f) == 0 && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return absl::PermissionDeniedError(
        absl::StrCat("cannot write ", path, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

const GemmChoice* GemmChoiceFile::Find(absl::string_view device,
                                       const RowGroupProblem& problem) const {
  for (const GemmChoice& c : choices_) {
    if (c.device == device && c.problem == problem) return &c;
  }
  return nullptr;
}

void GemmChoiceFile::Set(GemmChoice choice) {
  for (GemmChoice& c : choices_) {
    if (c.device == choice.device && c.problem == choice.problem) {
      c = std::move(choice);
      return;
    }
  }
  choices_.push_back(std::move(choice));
}

int FastestWay(absl::Span<const double> ms) {
  return static_cast<int>(std::min_element(ms.begin(), ms.end()) - ms.begin());
}

std::string DefaultGemmChoicePath(const std::string& model_path) {
  if (absl::EndsWithIgnoreCase(model_path, ".gguf")) {
    return model_path + ".gemm-choices.json";
  }
  return absl::StrCat(model_path, model_path.ends_with('/') ? "" : "/",
                      "octet-gemm-choices.json");
}

namespace {

// The distinct problems of `weights` (a representative weight of each
// shape), row buckets 2 .. RowBucket(max_rows) for each.
struct Problems {
  std::vector<RowGroupProblem> list;
  std::vector<const LinearWeight*> weight;  // for list[i]
};
Problems ListProblems(absl::Span<const LinearWeight* const> weights,
                      int64_t max_rows) {
  Problems p;
  std::vector<RowGroupProblem> shapes;
  for (const LinearWeight* w : weights) {
    const RowGroupProblem shape{.out = w->full_out > 0 ? w->full_out : w->out,
                                .in = w->full_in > 0 ? w->full_in : w->in,
                                .per_channel = w->scale_per_row};
    if (std::find(shapes.begin(), shapes.end(), shape) != shapes.end()) {
      continue;
    }
    shapes.push_back(shape);
    for (int64_t rows = 2; rows <= std::min(RowBucket(max_rows), kLastBucket);
         rows *= 2) {
      RowGroupProblem problem = shape;
      problem.rows = rows;
      p.list.push_back(problem);
      p.weight.push_back(w);
    }
  }
  return p;
}

// `values` made the same on every rank by the collective `op` (run on a
// copy in the backend's memory, the communicator's).
absl::Status OnEveryRank(Backend& backend, Communicator& comm,
                         std::vector<float>* values,
                         const std::function<absl::Status(float*)>& op) {
  const size_t bytes = values->size() * sizeof(float);
  OCTET_ASSIGN_OR_RETURN(DeviceBuffer buffer, backend.Allocate(bytes));
  OCTET_RETURN_IF_ERROR(
      backend.CopyToDevice(buffer.data(), values->data(), bytes));
  OCTET_RETURN_IF_ERROR(op(buffer.as<float>()));
  OCTET_RETURN_IF_ERROR(comm.Await());
  return backend.CopyToHost(values->data(), buffer.data(), bytes);
}

// Device operands for timing: codes, one scale and one group per row, and
// an output, for up to `rows` rows of the widest weight.
struct Operands {
  DeviceBuffer codes, scales, row_group, y;
};
absl::StatusOr<Operands> MakeOperands(Backend& backend, int64_t rows,
                                      int64_t max_in, int64_t max_out) {
  Operands o;
  std::vector<uint8_t> codes(rows * max_in);
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = (i * 37) & 0x77;
  std::vector<float> scales(rows, 1.0f / 64);
  std::vector<int32_t> row_group(rows);
  for (int64_t r = 0; r < rows; ++r) row_group[r] = static_cast<int32_t>(r);
  OCTET_ASSIGN_OR_RETURN(o.codes, backend.Allocate(codes.size()));
  OCTET_ASSIGN_OR_RETURN(o.scales, backend.Allocate(rows * sizeof(float)));
  OCTET_ASSIGN_OR_RETURN(o.row_group, backend.Allocate(rows * 4));
  OCTET_ASSIGN_OR_RETURN(o.y, backend.Allocate(rows * max_out * 4));
  OCTET_RETURN_IF_ERROR(
      backend.CopyToDevice(o.codes.data(), codes.data(), codes.size()));
  OCTET_RETURN_IF_ERROR(backend.CopyToDevice(o.scales.data(), scales.data(),
                                             rows * sizeof(float)));
  OCTET_RETURN_IF_ERROR(
      backend.CopyToDevice(o.row_group.data(), row_group.data(), rows * 4));
  return o;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// ms per call of each of `ways` ways for problem.rows rows (each its own
// group, as in a decode) against w: a warm-up call each (plans are made),
// then `reps` rounds of one call each, the ways interleaved; the medians.
absl::StatusOr<std::vector<double>> TimeWays(Backend& backend,
                                             const LinearWeight& w,
                                             int64_t rows, int ways, int reps,
                                             const Operands& o) {
  const RowGroups groups{.count = rows, .row_group = o.row_group.as<int32_t>()};
  auto gemm = [&] {
    return backend.GemmE4m3(o.codes.as<uint8_t>(), o.scales.as<float>(), groups,
                            rows, w, o.y.data());
  };
  for (int way = 0; way < ways; ++way) {
    OCTET_RETURN_IF_ERROR(backend.SetRowGroupGemmWay(rows, w, way));
    OCTET_RETURN_IF_ERROR(gemm());
  }
  OCTET_ASSIGN_OR_RETURN(std::unique_ptr<DeviceClock> clock,
                         backend.NewClock());
  for (int rep = 0; rep < reps; ++rep) {
    for (int way = 0; way < ways; ++way) {
      OCTET_RETURN_IF_ERROR(backend.SetRowGroupGemmWay(rows, w, way));
      OCTET_RETURN_IF_ERROR(clock->Mark());
      OCTET_RETURN_IF_ERROR(gemm());
      OCTET_RETURN_IF_ERROR(clock->Mark());
    }
  }
  OCTET_ASSIGN_OR_RETURN(const std::vector<double> marks, clock->Read());
  std::vector<double> ms(ways);
  for (int way = 0; way < ways; ++way) {
    std::vector<double> calls;
    for (int rep = 0; rep < reps; ++rep) {
      const size_t i = 2 * (static_cast<size_t>(rep) * ways + way);
      calls.push_back(marks[i + 1] - marks[i]);
    }
    ms[way] = Median(std::move(calls));
  }
  return ms;
}

// Rank 0's file, as way indices per problem (-1: not in it); a way the
// backend does not have is an error naming it.
absl::Status ReadKnown(const GemmChoiceOptions& options,
                       const Backend::GemmWays& ways, const Problems& p,
                       GemmChoiceFile* file, std::vector<float>* known) {
  if (options.file.empty()) return absl::OkStatus();
  OCTET_ASSIGN_OR_RETURN(*file, GemmChoiceFile::Read(options.file));
  for (size_t i = 0; i < p.list.size(); ++i) {
    const GemmChoice* c = file->Find(ways.device, p.list[i]);
    if (c == nullptr) continue;
    const auto it = std::find(ways.names.begin(), ways.names.end(), c->way);
    if (it == ways.names.end()) {
      return Malformed(options.file,
                       absl::StrCat("way \"", c->way, "\" is not one of ",
                                    ways.device, "'s"));
    }
    (*known)[i] = static_cast<float>(it - ways.names.begin());
  }
  return absl::OkStatus();
}

// ms[i * ways + way] for each problem i not known: this rank's times.
absl::Status MeasureUnknown(Backend& backend, const Problems& p,
                            const std::vector<float>& known, int ways, int reps,
                            std::vector<float>* ms) {
  int64_t max_rows = 0, max_in = 0, max_out = 0;
  for (size_t i = 0; i < p.list.size(); ++i) {
    if (known[i] >= 0) continue;
    max_rows = std::max(max_rows, p.list[i].rows);
    max_in = std::max(max_in, p.weight[i]->in);
    max_out = std::max(max_out, p.weight[i]->out);
  }
  if (max_rows == 0) return absl::OkStatus();
  OCTET_ASSIGN_OR_RETURN(const Operands o,
                         MakeOperands(backend, max_rows, max_in, max_out));
  for (size_t i = 0; i < p.list.size(); ++i) {
    if (known[i] >= 0) continue;
    OCTET_ASSIGN_OR_RETURN(
        const std::vector<double> t,
        TimeWays(backend, *p.weight[i], p.list[i].rows, ways, reps, o));
    std::copy(t.begin(), t.end(), ms->begin() + i * ways);
  }
  return absl::OkStatus();
}

// "6144x4096: rows 2-8 two-pass, 16-2048 outer-vector" for each shape.
std::string Summary(const Problems& p, const std::vector<int>& chosen,
                    const std::vector<std::string>& names) {
  std::string out;
  for (size_t i = 0; i < p.list.size(); ++i) {
    const RowGroupProblem& q = p.list[i];
    if (q.rows == 2) {
      absl::StrAppend(&out, out.empty() ? "" : "; ", q.out, "x", q.in,
                      q.per_channel ? " (per-channel)" : "", ":");
    }
    const bool first = q.rows == 2 || chosen[i - 1] != chosen[i];
    const bool last = i + 1 == p.list.size() || p.list[i + 1].rows == 2 ||
                      chosen[i + 1] != chosen[i];
    if (first) absl::StrAppend(&out, q.rows == 2 ? " rows " : ", ", q.rows);
    if (last) {
      absl::StrAppend(&out, first ? "" : absl::StrCat("-", q.rows), " ",
                      names[chosen[i]]);
    }
  }
  return out;
}

}  // namespace

absl::Status ChooseRowGroupGemms(Backend& backend, Communicator* comm,
                                 absl::Span<const LinearWeight* const> weights,
                                 const GemmChoiceOptions& options) {
  const Backend::GemmWays ways = backend.RowGroupGemmWays();
  const int w = static_cast<int>(ways.names.size());
  if (w < 2 || weights.empty()) return absl::OkStatus();
  if (options.reps < 1) {
    return absl::InvalidArgumentError("GEMM choices: reps must be >= 1");
  }
  const Problems p = ListProblems(weights, options.max_rows);
  const size_t n = p.list.size();
  if (n == 0) return absl::OkStatus();
  const bool group = comm != nullptr && comm->size() > 1;
  const bool root = !group || comm->rank() == 0;
  // 1. Rank 0's file, and whether it read, to every rank.
  GemmChoiceFile file;
  std::vector<float> known(n + 1, -1.0f);
  const absl::Status read =
      root ? ReadKnown(options, ways, p, &file, &known) : absl::OkStatus();
  known[n] = read.ok() ? 0.0f : 1.0f;
  if (group) {
    OCTET_RETURN_IF_ERROR(OnEveryRank(backend, *comm, &known, [&](float* d) {
      return comm->Broadcast(d, (n + 1) * sizeof(float), 0);
    }));
  }
  OCTET_RETURN_IF_ERROR(read);
  if (known[n] != 0.0f) {
    return absl::FailedPreconditionError(
        "rank 0 could not read the GEMM choices file (its log says why)");
  }
  // 2. The rest timed on every rank; the slowest rank's times count.
  std::vector<float> ms(n * w, 0.0f);
  const absl::Status timed =
      MeasureUnknown(backend, p, known, w, options.reps, &ms);
  if (group) {
    OCTET_RETURN_IF_ERROR(OnEveryRank(backend, *comm, &ms, [&](float* d) {
      return comm->AllReduceMax(d, static_cast<int64_t>(ms.size()));
    }));
  }
  OCTET_RETURN_IF_ERROR(timed);
  // 3. The same choice on every rank, set; what was measured, kept.
  std::vector<int> chosen(n);
  bool measured = false;
  for (size_t i = 0; i < n; ++i) {
    const bool was_known = known[i] >= 0;
    chosen[i] = was_known ? static_cast<int>(known[i])
                          : FastestWay(std::vector<double>(
                                ms.begin() + i * w, ms.begin() + (i + 1) * w));
    const bool largest = i + 1 == n || p.list[i + 1].rows == 2;
    for (int64_t rows = p.list[i].rows;
         rows <= (largest ? kLastBucket : p.list[i].rows); rows *= 2) {
      OCTET_RETURN_IF_ERROR(
          backend.SetRowGroupGemmWay(rows, *p.weight[i], chosen[i]));
    }
    if (was_known) continue;
    measured = true;
    GemmChoice c{.device = ways.device,
                 .problem = p.list[i],
                 .way = ways.names[chosen[i]],
                 .ms = {}};
    for (int k = 0; k < w; ++k) c.ms.emplace_back(ways.names[k], ms[i * w + k]);
    file.Set(std::move(c));
  }
  auto log = [&](const std::string& line) {
    if (options.log) options.log(line);
  };
  log(absl::StrCat("FP8 GEMMs with per-sequence scales on ", ways.device, ": ",
                   Summary(p, chosen, ways.names),
                   measured ? " (measured)" : " (from " + options.file + ")"));
  if (root && measured && !options.file.empty()) {
    if (absl::Status s = file.Write(options.file); !s.ok()) {
      log(absl::StrCat(s.message(), "; the choices hold for this load only"));
    }
  }
  return absl::OkStatus();
}

}  // namespace octet
