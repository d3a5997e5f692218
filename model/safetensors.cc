#include "model/safetensors.h"


#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "base/file_util.h"
#include "nlohmann/json.hpp"

namespace octet {
namespace {

using Json = nlohmann::json;

// The reference implementation refuses headers above 100 MB; so do we, before
// allocating anything for them.
constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;

absl::Status Bad(absl::string_view path, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat(path, ": invalid safetensors file: ", what));
}

absl::StatusOr<DType> ParseDType(absl::string_view name) {
  for (DType d : {DType::kF32, DType::kF16, DType::kBf16, DType::kE4m3}) {
    if (name == SafetensorsDTypeName(d)) return d;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "dtype ", name, " is not supported (F32, F16, BF16, F8_E4M3)"));
}

// Reads a non-negative JSON integer.
bool AsUint(const Json& j, uint64_t* out) {
  if (j.is_number_unsigned()) {
    *out = j.get<uint64_t>();
    return true;
  }
  if (j.is_number_integer() && j.get<int64_t>() >= 0) {
    *out = static_cast<uint64_t>(j.get<int64_t>());
    return true;
  }
  return false;
}

// Reads the 8-byte header length and returns the header text it covers.
absl::StatusOr<absl::string_view> HeaderText(absl::string_view file,
                                             absl::string_view path) {
  if (file.size() < 8) {
    return Bad(path,
               absl::StrCat("truncated: ", file.size(),
                            " bytes, shorter than the 8-byte header length"));
  }
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) {
    header_len = (header_len << 8) | static_cast<uint8_t>(file[i]);
  }
  if (header_len > kMaxHeaderBytes) {
    return Bad(path, absl::StrCat("header length ", header_len,
                                  " exceeds the 100 MB limit"));
  }
  if (header_len > file.size() - 8) {
    return Bad(path,
               absl::StrCat("truncated: header length ", header_len,
                            " but only ", file.size() - 8, " bytes follow"));
  }
  return file.substr(8, header_len);
}

// Parses the header text as a JSON object, rejecting duplicate top-level
// names (a JSON object that names a tensor twice is ambiguous; nlohmann
// would silently keep the last).
absl::StatusOr<Json> ParseHeaderJson(absl::string_view text,
                                     absl::string_view path) {
  std::set<std::string> seen;
  std::string duplicate;
  const Json::parser_callback_t on_event = [&](int depth,
                                               Json::parse_event_t event,
                                               Json& parsed) {
    if (depth == 1 && event == Json::parse_event_t::key &&
        !seen.insert(parsed.get<std::string>()).second && duplicate.empty()) {
      duplicate = parsed.get<std::string>();
    }
    return true;
  };
  Json root = Json::parse(text.begin(), text.end(), on_event,
                          /*allow_exceptions=*/false);
  if (root.is_discarded()) return Bad(path, "header is not well-formed JSON");
  if (!root.is_object()) return Bad(path, "header is not a JSON object");
  if (!duplicate.empty()) {
    return Bad(path, absl::StrCat("tensor '", duplicate, "' is listed twice"));
  }
  return root;
}

// Copies the __metadata__ object, whose values must all be strings.
absl::Status ReadMetadata(const Json& value, absl::string_view path,
                          std::map<std::string, std::string>* metadata) {
  if (!value.is_object()) return Bad(path, "__metadata__ is not an object");
  for (const auto& [key, v] : value.items()) {
    if (!v.is_string()) {
      return Bad(
          path, absl::StrCat("__metadata__ value '", key, "' is not a string"));
    }
    (*metadata)[key] = v.get<std::string>();
  }
  return absl::OkStatus();
}

// An error about tensor `tensor` of the file at `path`.
absl::Status BadTensor(absl::string_view path, absl::string_view tensor,
                       absl::string_view what) {
  return Bad(path, absl::StrCat("tensor '", tensor, "': ", what));
}

// Reads a tensor entry's dtype and shape into `e`; returns its element count.
absl::StatusOr<uint64_t> ReadDTypeAndShape(const Json& value,
                                           absl::string_view path,
                                           SafetensorsEntry* e) {
  const auto dtype = value.find("dtype");
  if (dtype == value.end() || !dtype->is_string()) {
    return BadTensor(path, e->name, "no dtype string");
  }
  absl::StatusOr<DType> d = ParseDType(dtype->get<std::string>());
  if (!d.ok()) return BadTensor(path, e->name, d.status().message());
  e->dtype = *d;
  const auto shape = value.find("shape");
  if (shape == value.end() || !shape->is_array()) {
    return BadTensor(path, e->name, "no shape array");
  }
  if (shape->size() > 8) {
    return BadTensor(path, e->name, "more than 8 dimensions");
  }
  uint64_t elements = 1;
  for (const Json& dim : *shape) {
    uint64_t v = 0;
    if (!AsUint(dim, &v) || v > (uint64_t{1} << 40)) {
      return BadTensor(
          path, e->name,
          "shape holds something other than a dimension in [0, 2^40]");
    }
    if (__builtin_mul_overflow(elements, v, &elements) ||
        elements > (uint64_t{1} << 50)) {
      return BadTensor(path, e->name, "element count overflows");
    }
    e->shape.push_back(static_cast<int64_t>(v));
  }
  return elements;
}

// Reads a tensor entry's data_offsets into `e` and checks that they lie in
// the data section and span the bytes `elements` of its dtype need.
absl::Status ReadOffsets(const Json& value, uint64_t elements,
                         uint64_t data_size, absl::string_view path,
                         SafetensorsEntry* e) {
  const auto offsets = value.find("data_offsets");
  if (offsets == value.end() || !offsets->is_array() || offsets->size() != 2 ||
      !AsUint((*offsets)[0], &e->begin) || !AsUint((*offsets)[1], &e->end)) {
    return BadTensor(path, e->name,
                     "data_offsets is not a pair of non-negative integers");
  }
  if (e->begin > e->end) {
    return BadTensor(path, e->name, "data_offsets end before they begin");
  }
  if (e->end > data_size) {
    return BadTensor(
        path, e->name,
        absl::StrCat("data [", e->begin, ", ", e->end,
                     ") runs past the end of the file (data section is ",
                     data_size, " bytes; truncated?)"));
  }
  const uint64_t want = elements * DTypeSize(e->dtype);
  if (e->end - e->begin != want) {
    return BadTensor(path, e->name,
                     absl::StrCat("holds ", e->end - e->begin, " bytes but ",
                                  SafetensorsDTypeName(e->dtype), " x ",
                                  elements, " elements needs ", want));
  }
  return absl::OkStatus();
}

// Parses the header entry of tensor `name`.
absl::StatusOr<SafetensorsEntry> ParseTensorEntry(const std::string& name,
                                                  const Json& value,
                                                  uint64_t data_size,
                                                  absl::string_view path) {
  if (!value.is_object()) {
    return BadTensor(path, name, "entry is not an object");
  }
  SafetensorsEntry e;
  e.name = name;
  OCTET_ASSIGN_OR_RETURN(const uint64_t elements,
                         ReadDTypeAndShape(value, path, &e));
  OCTET_RETURN_IF_ERROR(ReadOffsets(value, elements, data_size, path, &e));
  return e;
}

// Sorts the tensors by offset and checks that there are no overlaps and no
// holes: each tensor starts where the previous one ended, and the last ends
// where the file does.
absl::Status SortAndCheckCoverage(uint64_t data_size, absl::string_view path,
                                  std::vector<SafetensorsEntry>* tensors) {
  std::sort(tensors->begin(), tensors->end(),
            [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
              return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
            });
  uint64_t covered = 0;
  for (const SafetensorsEntry& e : *tensors) {
    if (e.begin < covered) {
      return Bad(path, absl::StrCat("tensor '", e.name,
                                    "' overlaps the tensor before it"));
    }
    if (e.begin > covered) {
      return Bad(path,
                 absl::StrCat("bytes [", covered, ", ", e.begin,
                              ") of the data section belong to no tensor"));
    }
    covered = e.end;
  }
  if (covered != data_size) {
    return Bad(path, absl::StrCat("the last ", data_size - covered,
                                  " bytes of the file belong to no tensor"));
  }
  return absl::OkStatus();
}

}  // namespace

int64_t SafetensorsEntry::num_elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

absl::string_view SafetensorsDTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "F32";
    case DType::kF16:
      return "F16";
    case DType::kBf16:
      return "BF16";
    case DType::kE4m3:
      return "F8_E4M3";
  }
  return "?";
}

absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(
    absl::string_view file, absl::string_view path) {
  OCTET_ASSIGN_OR_RETURN(const absl::string_view text, HeaderText(file, path));
  OCTET_ASSIGN_OR_RETURN(const Json root, ParseHeaderJson(text, path));
  SafetensorsHeader header;
  header.data_offset = 8 + text.size();
  const uint64_t data_size = file.size() - header.data_offset;
  for (const auto& [name, value] : root.items()) {
    if (name == "__metadata__") {
      OCTET_RETURN_IF_ERROR(ReadMetadata(value, path, &header.metadata));
      continue;
    }
    OCTET_ASSIGN_OR_RETURN(SafetensorsEntry e,
                           ParseTensorEntry(name, value, data_size, path));
    header.tensors.push_back(std::move(e));
  }
  OCTET_RETURN_IF_ERROR(SortAndCheckCoverage(data_size, path, &header.tensors));
  return header;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(
    const std::string& path) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  OCTET_ASSIGN_OR_RETURN(f->file_, MappedFile::Open(path));
  OCTET_ASSIGN_OR_RETURN(f->header_,
                         ParseSafetensorsHeader(f->file_->bytes(), path));
  for (size_t i = 0; i < f->header_.tensors.size(); ++i) {
    f->index_[f->header_.tensors[i].name] = i;
  }
  return f;
}

const SafetensorsEntry* SafetensorsFile::Find(absl::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &header_.tensors[it->second];
}

absl::Span<const uint8_t> SafetensorsFile::Data(
    const SafetensorsEntry& entry) const {
  return absl::Span<const uint8_t>(
      file_->data() + header_.data_offset + entry.begin,
      entry.end - entry.begin);
}

void SafetensorsFile::ReleasePages(const SafetensorsEntry& entry) const {
  file_->ReleasePages(Data(entry).data(), entry.end - entry.begin);
}

absl::StatusOr<std::unique_ptr<SafetensorsWriter>> SafetensorsWriter::Create(
    const std::string& path, const std::vector<Spec>& tensors,
    const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  std::set<std::string> names;
  for (const Spec& t : tensors) {
    if (t.name == "__metadata__" || !names.insert(t.name).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": tensor name '", t.name, "' is reserved or repeated"));
    }
    uint64_t bytes = DTypeSize(t.dtype);
    for (int64_t d : t.shape) {
      if (d < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            path, ": tensor '", t.name, "' has a negative dimension"));
      }
      bytes *= static_cast<uint64_t>(d);
    }
    header[t.name] = {{"dtype", SafetensorsDTypeName(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // keep the data 8-byte aligned

  std::unique_ptr<SafetensorsWriter> w(new SafetensorsWriter());
  w->path_ = path;
  w->tmp_ = absl::StrCat(path, ".tmp.", ::getpid());
  w->expected_ = offset;
  w->out_ = std::fopen(w->tmp_.c_str(), "wb");
  if (w->out_ == nullptr) {
    return absl::PermissionDeniedError(
        absl::StrCat(path, ": cannot create: ", std::strerror(errno)));
  }
  uint8_t len[8];
  for (int i = 0; i < 8; ++i)
    len[i] = static_cast<uint8_t>(text.size() >> (8 * i));
  if (std::fwrite(len, 1, 8, w->out_) != 8 ||
      std::fwrite(text.data(), 1, text.size(), w->out_) != text.size()) {
    return absl::InternalError(
        absl::StrCat(path, ": write failed: ", std::strerror(errno)));
  }
  return w;
}

SafetensorsWriter::~SafetensorsWriter() {
  if (out_ != nullptr) {
    std::fclose(out_);
    std::remove(tmp_.c_str());
  }
}

absl::Status SafetensorsWriter::Write(absl::Span<const uint8_t> bytes) {
  if (out_ == nullptr || written_ + bytes.size() > expected_) {
    return absl::FailedPreconditionError(
        absl::StrCat(path_, ": more tensor bytes than the header declares"));
  }
  if (std::fwrite(bytes.data(), 1, bytes.size(), out_) != bytes.size()) {
    return absl::InternalError(
        absl::StrCat(path_, ": write failed: ", std::strerror(errno)));
  }
  written_ += bytes.size();
  return absl::OkStatus();
}

absl::Status SafetensorsWriter::Finish() {
  if (out_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat(path_, ": already finished"));
  }
  if (written_ != expected_) {
    return absl::FailedPreconditionError(
        absl::StrCat(path_, ": ", written_,
                     " tensor bytes written, header declares ", expected_));
  }
  const bool closed = std::fclose(out_) == 0;
  out_ = nullptr;
  if (!closed || std::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    std::remove(tmp_.c_str());
    return absl::InternalError(
        absl::StrCat(path_, ": write failed: ", std::strerror(err)));
  }
  return absl::OkStatus();
}

absl::Status WriteSafetensors(
    const std::string& path, const std::vector<SafetensorsTensor>& tensors,
    const std::map<std::string, std::string>& metadata) {
  std::vector<SafetensorsWriter::Spec> specs;
  for (const SafetensorsTensor& t : tensors) {
    uint64_t elements = 1;
    for (int64_t d : t.shape) elements *= static_cast<uint64_t>(d < 0 ? 0 : d);
    if (elements * DTypeSize(t.dtype) != t.data.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": tensor '", t.name, "' has ", t.data.size(), " bytes for ",
          elements, " elements of ", DTypeName(t.dtype)));
    }
    specs.push_back({t.name, t.dtype, t.shape});
  }
  OCTET_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsWriter> w,
                         SafetensorsWriter::Create(path, specs, metadata));
  for (const SafetensorsTensor& t : tensors) {
    OCTET_RETURN_IF_ERROR(w->Write(t.data));
  }
  return w->Finish();
}

}  // namespace octet
