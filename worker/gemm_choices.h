// Which way each FP8 GEMM with per-sequence scales runs, chosen by
// measuring, alike on every rank, and kept beside the model.
//
// A backend may run GemmE4m3 with row groups more than one way
// (Backend::RowGroupGemmWays; CUDA: cuBLASLt's outer-vector scales, or a
// binary32 product then a row-scaling pass). Which is faster depends on the
// layer's shape, the rows and the device: on an H200, Mistral-7B's decode at
// batch 8 took 6.97 ms a step with the first and 5.29 with the second. So
// the ways are timed, per layer shape and row bucket (RowBucket), never
// guessed.
//
// The ways round slightly differently, so a choice changes a GEMM's bits.
// Made afresh at every load, timing noise could choose differently for a
// TP = 1 and a TP = 2 server, and their tokens would drift apart. So:
//   - every rank takes the same choice: rank 0 reads the file and
//     broadcasts which problems it has choices for; each rank times the
//     others on its own slice (planned, as always, for TP = 1's problem);
//     the times are all-reduced (MAX: the slowest rank's), and every rank
//     picks the fastest way from the same numbers (FastestWay);
//   - choices are kept in a small JSON file (by default beside the model)
//     that rank 0 writes back, so that every later load, at any TP degree,
//     on the same kind of device and library, takes them as they are.
// A file that does not parse, or names a way this backend does not have, is
// an error naming it (delete it to measure again); a file that cannot be
// written is said in the log, and the choices hold for this load.
//
// File format (`octet_gemm_choices` is its version):
//   {"octet_gemm_choices": 1, "choices": [
//     {"device": "NVIDIA H200 (sm_90, ...), cuBLASLt 130100",
//      "rows": 8, "out": 6144, "in": 4096, "per_channel": false,
//      "way": "two-pass", "ms": {"outer-vector": 0.031, "two-pass": 0.019}}]}
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "kernels/backend.h"
#include "parallel/communicator.h"

namespace octet {

// A GEMM with per-sequence scales as a choice is made for it.
struct RowGroupProblem {
  int64_t rows = 0;          // a row bucket (RowBucket), >= 2
  int64_t out = 0, in = 0;   // the whole layer's shape (TP = 1's)
  bool per_channel = false;  // one weight scale per output row
  bool operator==(const RowGroupProblem&) const = default;
};

struct GemmChoice {
  std::string device;  // Backend::GemmWays::device
  RowGroupProblem problem;
  std::string way;
  // The slowest rank's ms per call of each way, when measured: (name, ms).
  std::vector<std::pair<std::string, double>> ms;
};

class GemmChoiceFile {
 public:
  // The choices in `path`; none when it does not exist. InvalidArgument
  // naming the path and what is wrong when it does not parse.
  static absl::StatusOr<GemmChoiceFile> Read(const std::string& path);
  // The same from the file's text; `what` names it in errors.
  static absl::StatusOr<GemmChoiceFile> Parse(absl::string_view text,
                                              absl::string_view what);
  std::string Serialize() const;
  // Written whole to a temporary file beside `path`, then renamed over it.
  absl::Status Write(const std::string& path) const;

  // The choice for `problem` measured on `device`, or null.
  const GemmChoice* Find(absl::string_view device,
                         const RowGroupProblem& problem) const;
  // Adds the choice, or replaces the one for the same device and problem.
  void Set(GemmChoice choice);
  const std::vector<GemmChoice>& choices() const { return choices_; }

 private:
  std::vector<GemmChoice> choices_;
};

// The index of the smallest time (the first of equal ones).
int FastestWay(absl::Span<const double> ms);

// The file beside a model: DIR/octet-gemm-choices.json for a checkpoint
// directory, FILE.gemm-choices.json for a single-file one (GGUF).
std::string DefaultGemmChoicePath(const std::string& model_path);

struct GemmChoiceOptions {
  std::string file;  // read and written by rank 0; empty: neither
  // Row buckets 2, 4, ..., up to the bucket of max_rows (a step's most
  // tokens); more rows take the largest bucket's choice.
  int64_t max_rows = 2048;
  int reps = 5;  // timed calls per way; the median counts
  // Told what was chosen or measured, and a file that cannot be written.
  std::function<void(const std::string&)> log;
};

// Chooses, measures where it must, and sets (Backend::SetRowGroupGemmWay)
// the way of every row bucket of every weight shape among `weights` (this
// rank's FP8 weights that GemmE4m3 runs with row groups), alike on every
// rank of `comm` (null: one rank). Every rank calls it with the same
// weight shapes. Nothing to do on a backend with one way.
absl::Status ChooseRowGroupGemms(Backend& backend, Communicator* comm,
                                 absl::Span<const LinearWeight* const> weights,
                                 const GemmChoiceOptions& options);

}  // namespace octet
