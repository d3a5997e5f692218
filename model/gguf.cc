// Reading GGUF (see gguf.h). A Reader walks the bytes with a bound check
// before every read; each section (header, metadata, tensor infos, data
// layout) is one function that stops at the first thing wrong and says what.
#include "model/gguf.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/file_util.h"
#include "base/status_macros.h"

namespace octet {
namespace {

constexpr uint64_t kDefaultAlignment = 32;
constexpr uint32_t kMaxDims = 4;  // GGML_MAX_DIMS

// Bounds-checked little-endian reads over the file's bytes.
class Reader {
 public:
  Reader(absl::string_view bytes, absl::string_view path)
      : bytes_(bytes), path_(path) {}

  uint64_t pos() const { return pos_; }
  absl::string_view path() const { return path_; }
  uint64_t left() const { return bytes_.size() - pos_; }

  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ": not a valid GGUF file: ", what));
  }

  template <typename T>
  absl::StatusOr<T> Read(absl::string_view what) {
    if (left() < sizeof(T)) {
      return Error(absl::StrCat("truncated while reading ", what, " at byte ",
                                pos_));
    }
    T v;
    std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  absl::StatusOr<std::string> ReadString(absl::string_view what) {
    OCTET_ASSIGN_OR_RETURN(const uint64_t n, Read<uint64_t>(what));
    if (n > left()) {
      return Error(absl::StrCat(what, " claims ", n, " bytes at byte ", pos_,
                                "; only ", left(), " remain"));
    }
    std::string s(bytes_.substr(pos_, n));
    pos_ += n;
    return s;
  }

 private:
  absl::string_view bytes_;
  absl::string_view path_;
  uint64_t pos_ = 0;
};

// The encoded size of one scalar of `type`, or 0 for strings and arrays.
uint64_t ScalarBytes(GgufValueType type) {
  switch (type) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kBool:
      return 1;
    case GgufValueType::kUint16:
    case GgufValueType::kInt16:
      return 2;
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kFloat32:
      return 4;
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
    case GgufValueType::kFloat64:
      return 8;
    default:
      return 0;
  }
}

bool IsKnownType(uint32_t t) { return t <= 12; }

bool IsSignedInt(GgufValueType t) {
  return t == GgufValueType::kInt8 || t == GgufValueType::kInt16 ||
         t == GgufValueType::kInt32 || t == GgufValueType::kInt64;
}

bool IsFloatType(GgufValueType t) {
  return t == GgufValueType::kFloat32 || t == GgufValueType::kFloat64;
}

// One scalar of `type` (not a string or array) into `v`'s u/i/f.
absl::Status ReadScalar(Reader& r, GgufValueType type, absl::string_view what,
                        GgufValue& v) {
  v.is_signed = IsSignedInt(type);
  switch (type) {
#define OCTET_GGUF_SCALAR(enumerator, ctype, field)                 \
  case GgufValueType::enumerator: {                                 \
    OCTET_ASSIGN_OR_RETURN(const ctype x, r.Read<ctype>(what));     \
    v.field = x;                                                    \
    return absl::OkStatus();                                        \
  }
    OCTET_GGUF_SCALAR(kUint8, uint8_t, u)
    OCTET_GGUF_SCALAR(kInt8, int8_t, i)
    OCTET_GGUF_SCALAR(kUint16, uint16_t, u)
    OCTET_GGUF_SCALAR(kInt16, int16_t, i)
    OCTET_GGUF_SCALAR(kUint32, uint32_t, u)
    OCTET_GGUF_SCALAR(kInt32, int32_t, i)
    OCTET_GGUF_SCALAR(kUint64, uint64_t, u)
    OCTET_GGUF_SCALAR(kInt64, int64_t, i)
    OCTET_GGUF_SCALAR(kFloat32, float, f)
    OCTET_GGUF_SCALAR(kFloat64, double, f)
#undef OCTET_GGUF_SCALAR
    case GgufValueType::kBool: {
      OCTET_ASSIGN_OR_RETURN(const uint8_t x, r.Read<uint8_t>(what));
      if (x > 1) return r.Error(absl::StrCat(what, " is a bool of value ", x));
      v.u = x;
      return absl::OkStatus();
    }
    default:
      return r.Error(absl::StrCat(what, " is not a scalar"));
  }
}

// An array value (after its value type): element type, count, elements.
absl::Status ReadArray(Reader& r, absl::string_view what, GgufValue& v) {
  OCTET_ASSIGN_OR_RETURN(const uint32_t et, r.Read<uint32_t>(what));
  if (!IsKnownType(et)) {
    return r.Error(absl::StrCat(what, " has elements of unknown type ", et));
  }
  v.element_type = static_cast<GgufValueType>(et);
  if (v.element_type == GgufValueType::kArray) {
    return r.Error(absl::StrCat(what, " is an array of arrays, which octet "
                                      "does not read"));
  }
  OCTET_ASSIGN_OR_RETURN(const uint64_t n, r.Read<uint64_t>(what));
  // Every element takes at least one byte (a string at least eight): a count
  // the rest of the file cannot hold is a lie, caught before any allocation.
  const uint64_t least = v.element_type == GgufValueType::kString
                             ? 8
                             : ScalarBytes(v.element_type);
  if (n > r.left() / least) {
    return r.Error(absl::StrCat(what, " claims ", n, " elements; only ",
                                r.left(), " bytes remain"));
  }
  v.is_signed = IsSignedInt(v.element_type);
  for (uint64_t k = 0; k < n; ++k) {
    if (v.element_type == GgufValueType::kString) {
      OCTET_ASSIGN_OR_RETURN(std::string s, r.ReadString(what));
      v.strings.push_back(std::move(s));
      continue;
    }
    GgufValue e;
    OCTET_RETURN_IF_ERROR(ReadScalar(r, v.element_type, what, e));
    if (IsFloatType(v.element_type)) {
      v.floats.push_back(e.f);
    } else {
      v.ints.push_back(e.is_signed ? e.i : static_cast<int64_t>(e.u));
    }
  }
  return absl::OkStatus();
}

absl::Status ReadMetadata(Reader& r, uint64_t count, GgufContents& out) {
  if (count > r.left() / 12) {  // key length, value type, one byte at least
    return r.Error(absl::StrCat("the header claims ", count,
                                " metadata entries; the file cannot hold them"));
  }
  for (uint64_t k = 0; k < count; ++k) {
    OCTET_ASSIGN_OR_RETURN(std::string key,
                           r.ReadString(absl::StrCat("metadata key ", k)));
    const std::string what = absl::StrCat("metadata '", key, "'");
    OCTET_ASSIGN_OR_RETURN(const uint32_t t, r.Read<uint32_t>(what));
    if (!IsKnownType(t)) {
      return r.Error(absl::StrCat(what, " has unknown value type ", t));
    }
    GgufValue v;
    v.type = static_cast<GgufValueType>(t);
    if (v.type == GgufValueType::kString) {
      OCTET_ASSIGN_OR_RETURN(v.s, r.ReadString(what));
    } else if (v.type == GgufValueType::kArray) {
      OCTET_RETURN_IF_ERROR(ReadArray(r, what, v));
    } else {
      OCTET_RETURN_IF_ERROR(ReadScalar(r, v.type, what, v));
    }
    if (!out.metadata.emplace(std::move(key), std::move(v)).second) {
      return r.Error(absl::StrCat(what, " appears twice"));
    }
  }
  return absl::OkStatus();
}

// One tensor info: name, dims, type, offset; its size from type and dims.
absl::StatusOr<GgufTensorInfo> ReadTensorInfo(Reader& r, uint64_t k) {
  GgufTensorInfo t;
  OCTET_ASSIGN_OR_RETURN(t.name, r.ReadString(absl::StrCat("tensor name ", k)));
  const std::string what = absl::StrCat("tensor '", t.name, "'");
  OCTET_ASSIGN_OR_RETURN(const uint32_t n_dims, r.Read<uint32_t>(what));
  if (n_dims == 0 || n_dims > kMaxDims) {
    return r.Error(absl::StrCat(what, " has ", n_dims, " dimensions (1 to ",
                                kMaxDims, ")"));
  }
  uint64_t elements = 1;
  for (uint32_t d = 0; d < n_dims; ++d) {
    OCTET_ASSIGN_OR_RETURN(const uint64_t dim, r.Read<uint64_t>(what));
    if (dim == 0 || dim > (uint64_t{1} << 40) ||
        elements > (uint64_t{1} << 50) / dim) {
      return r.Error(absl::StrCat(what, " has dimension ", d, " = ", dim,
                                  ", or more than 2^50 values"));
    }
    elements *= dim;
    t.dims.push_back(static_cast<int64_t>(dim));
  }
  OCTET_ASSIGN_OR_RETURN(const uint32_t type, r.Read<uint32_t>(what));
  const std::optional<GgmlType> decodable = DecodableGgmlType(type);
  if (!decodable) {
    return absl::InvalidArgumentError(absl::StrCat(
        r.path(), ": ", what, " has type ", GgmlTypeName(type),
        ", which octet cannot decode (it reads F32, F16, BF16, Q4_0, Q4_1, "
        "Q5_0, Q5_1, Q8_0, Q4_K, Q5_K and Q6_K)"));
  }
  t.type = *decodable;
  const GgmlBlock block = BlockOf(t.type);
  if (t.dims[0] % block.block_values != 0) {
    return r.Error(absl::StrCat(what, " has rows of ", t.dims[0],
                                " values, not a whole number of ",
                                GgmlTypeName(type), " blocks of ",
                                block.block_values));
  }
  t.bytes = elements / block.block_values * block.block_bytes;
  OCTET_ASSIGN_OR_RETURN(t.offset, r.Read<uint64_t>(what));
  return t;
}

// Where the data section starts and that every tensor lies inside it,
// aligned, without overlapping another.
absl::Status PlaceTensors(const Reader& r, uint64_t file_size,
                          GgufContents& out) {
  uint64_t alignment = kDefaultAlignment;
  if (auto a = out.metadata.find("general.alignment");
      a != out.metadata.end()) {
    const GgufValue& v = a->second;
    if (v.type != GgufValueType::kUint32 || v.u == 0 || (v.u & (v.u - 1))) {
      return r.Error("general.alignment must be a UINT32 power of two");
    }
    alignment = v.u;
  }
  out.data_offset = (r.pos() + alignment - 1) / alignment * alignment;
  if (out.data_offset > file_size) {
    return r.Error("truncated before the data section");
  }
  const uint64_t data_size = file_size - out.data_offset;
  std::vector<const GgufTensorInfo*> by_offset;
  for (const GgufTensorInfo& t : out.tensors) {
    if (t.offset % alignment != 0 || t.offset > data_size ||
        t.bytes > data_size - t.offset) {
      return r.Error(absl::StrCat(
          "tensor '", t.name, "' (", t.bytes, " bytes at data offset ",
          t.offset, ") is not an aligned range inside the ", data_size,
          "-byte data section"));
    }
    by_offset.push_back(&t);
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](auto* a, auto* b) { return a->offset < b->offset; });
  for (size_t k = 1; k < by_offset.size(); ++k) {
    const GgufTensorInfo& prev = *by_offset[k - 1];
    if (prev.offset + prev.bytes > by_offset[k]->offset) {
      return r.Error(absl::StrCat("tensors '", prev.name, "' and '",
                                  by_offset[k]->name, "' overlap"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

int64_t GgufTensorInfo::num_elements() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

absl::StatusOr<GgufContents> ParseGguf(absl::string_view file,
                                       absl::string_view path) {
  Reader r(file, path);
  if (file.substr(0, 4) != "GGUF") {
    return r.Error("it does not start with \"GGUF\"");
  }
  GgufContents out;
  (void)r.Read<uint32_t>("magic");
  OCTET_ASSIGN_OR_RETURN(out.version, r.Read<uint32_t>("the version"));
  if (out.version != 2 && out.version != 3) {
    return r.Error(absl::StrCat(
        "version ", out.version,
        (out.version > 0xFFFF ? " (a big-endian file?)" : ""),
        "; octet reads versions 2 and 3"));
  }
  OCTET_ASSIGN_OR_RETURN(const uint64_t n_tensors,
                         r.Read<uint64_t>("the tensor count"));
  OCTET_ASSIGN_OR_RETURN(const uint64_t n_kv,
                         r.Read<uint64_t>("the metadata count"));
  OCTET_RETURN_IF_ERROR(ReadMetadata(r, n_kv, out));
  if (n_tensors > r.left() / 24) {  // name length, n_dims, a dim, type, offset
    return r.Error(absl::StrCat("the header claims ", n_tensors,
                                " tensors; the file cannot hold them"));
  }
  std::map<std::string, size_t, std::less<>> seen;
  for (uint64_t k = 0; k < n_tensors; ++k) {
    OCTET_ASSIGN_OR_RETURN(GgufTensorInfo t, ReadTensorInfo(r, k));
    if (!seen.emplace(t.name, k).second) {
      return r.Error(absl::StrCat("tensor '", t.name, "' appears twice"));
    }
    out.tensors.push_back(std::move(t));
  }
  OCTET_RETURN_IF_ERROR(PlaceTensors(r, file.size(), out));
  return out;
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(
    const std::string& path) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = path;
  OCTET_ASSIGN_OR_RETURN(f->file_, MappedFile::Open(path));
  OCTET_ASSIGN_OR_RETURN(f->contents_, ParseGguf(f->file_->bytes(), path));
  for (size_t i = 0; i < f->contents_.tensors.size(); ++i) {
    f->index_[f->contents_.tensors[i].name] = i;
  }
  return f;
}

const GgufTensorInfo* GgufFile::FindTensor(absl::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &contents_.tensors[it->second];
}

absl::Span<const uint8_t> GgufFile::Data(const GgufTensorInfo& t) const {
  return absl::Span<const uint8_t>(
      file_->data() + contents_.data_offset + t.offset, t.bytes);
}

void GgufFile::ReleasePages(const GgufTensorInfo& t) const {
  file_->ReleasePages(Data(t).data(), t.bytes);
}

const GgufValue* GgufFile::FindValue(absl::string_view key) const {
  auto it = contents_.metadata.find(key);
  return it == contents_.metadata.end() ? nullptr : &it->second;
}

absl::StatusOr<const GgufValue*> GgufFile::Typed(absl::string_view key,
                                                 GgufValueType want) const {
  const GgufValue* v = FindValue(key);
  if (v == nullptr) {
    return absl::NotFoundError(
        absl::StrCat(path_, ": metadata '", key, "' is missing"));
  }
  const bool integer = ScalarBytes(want) > 0 && !IsFloatType(want) &&
                       want != GgufValueType::kBool;
  const bool fits =
      v->type == want ||
      (integer && ScalarBytes(v->type) > 0 && !IsFloatType(v->type) &&
       v->type != GgufValueType::kBool) ||
      (IsFloatType(want) && IsFloatType(v->type));
  if (!fits) {
    return absl::InvalidArgumentError(absl::StrCat(
        path_, ": metadata '", key, "' is ", GgufValueTypeName(v->type),
        ", not ", GgufValueTypeName(want)));
  }
  return v;
}

absl::StatusOr<std::string> GgufFile::GetString(absl::string_view key) const {
  OCTET_ASSIGN_OR_RETURN(const GgufValue* v,
                         Typed(key, GgufValueType::kString));
  return v->s;
}

absl::StatusOr<uint64_t> GgufFile::GetUint(absl::string_view key) const {
  OCTET_ASSIGN_OR_RETURN(const GgufValue* v,
                         Typed(key, GgufValueType::kUint64));
  if (v->is_signed && v->i < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        path_, ": metadata '", key, "' is ", v->i, "; it must be >= 0"));
  }
  return v->is_signed ? static_cast<uint64_t>(v->i) : v->u;
}

absl::StatusOr<double> GgufFile::GetFloat(absl::string_view key) const {
  OCTET_ASSIGN_OR_RETURN(const GgufValue* v,
                         Typed(key, GgufValueType::kFloat64));
  return v->f;
}

absl::StatusOr<bool> GgufFile::GetBool(absl::string_view key) const {
  OCTET_ASSIGN_OR_RETURN(const GgufValue* v, Typed(key, GgufValueType::kBool));
  return v->u != 0;
}

absl::StatusOr<const std::vector<std::string>*> GgufFile::GetStrings(
    absl::string_view key) const {
  OCTET_ASSIGN_OR_RETURN(const GgufValue* v,
                         Typed(key, GgufValueType::kArray));
  if (v->element_type != GgufValueType::kString) {
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ": metadata '", key, "' is an array of ",
                     GgufValueTypeName(v->element_type), ", not of STRING"));
  }
  return &v->strings;
}

absl::StatusOr<const std::vector<int64_t>*> GgufFile::GetInts(
    absl::string_view key) const {
  OCTET_ASSIGN_OR_RETURN(const GgufValue* v,
                         Typed(key, GgufValueType::kArray));
  if (v->element_type == GgufValueType::kString ||
      IsFloatType(v->element_type)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ": metadata '", key, "' is an array of ",
                     GgufValueTypeName(v->element_type), ", not of integers"));
  }
  return &v->ints;
}

absl::StatusOr<const std::vector<double>*> GgufFile::GetFloats(
    absl::string_view key) const {
  OCTET_ASSIGN_OR_RETURN(const GgufValue* v, Typed(key, GgufValueType::kArray));
  if (!IsFloatType(v->element_type)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ": metadata '", key, "' is an array of ",
                     GgufValueTypeName(v->element_type), ", not of floats"));
  }
  return &v->floats;
}

absl::string_view GgufValueTypeName(GgufValueType type) {
  static constexpr const char* kNames[] = {
      "UINT8", "INT8", "UINT16", "INT16", "UINT32", "INT32", "FLOAT32",
      "BOOL",  "STRING", "ARRAY", "UINT64", "INT64", "FLOAT64"};
  const auto i = static_cast<uint32_t>(type);
  return i < std::size(kNames) ? kNames[i] : "unknown";
}

}  // namespace octet
