#include "common/gguf_reader.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"

namespace pagoda::common {
namespace {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" little-endian
constexpr uint32_t kMaxDims = 4;             // GGML_MAX_DIMS
constexpr uint64_t kMaxNameLength = 1 << 16;
constexpr int64_t kMaxElements = int64_t{1} << 50;
constexpr size_t kFingerprintEdge = 4096;

// Size of a fixed-width scalar value type; 0 for string/array.
size_t ScalarSize(GgufValueType t) {
  switch (t) {
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

bool IsKnownValueType(uint32_t t) { return t <= static_cast<uint32_t>(GgufValueType::kFloat64); }

template <typename T>
T Load(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

void Fnv1a(uint64_t* h, const std::byte* p, size_t n) {
  uint64_t x = *h;
  for (size_t i = 0; i < n; ++i) {
    x ^= static_cast<uint8_t>(p[i]);
    x *= 0x100000001b3ull;
  }
  *h = x;
}

}  // namespace

std::string GgufValueTypeName(GgufValueType type) {
  static constexpr const char* kNames[] = {"uint8",  "int8",    "uint16", "int16",  "uint32",
                                           "int32",  "float32", "bool",   "string", "array",
                                           "uint64", "int64",   "float64"};
  const auto i = static_cast<uint32_t>(type);
  if (i < std::size(kNames)) return kNames[i];
  return absl::StrCat("unknown value type ", i);
}

namespace {

struct GgmlTypeRow {
  GgmlType type;
  const char* name;
  int64_t block_elems;
  int64_t block_bytes;
};

// Names and storage geometry of every ggml type (from ggml's type traits).
constexpr GgmlTypeRow kGgmlTypes[] = {
    {GgmlType::F32, "F32", 1, 4},
    {GgmlType::F16, "F16", 1, 2},
    {GgmlType::Q4_0, "Q4_0", 32, 18},
    {GgmlType::Q4_1, "Q4_1", 32, 20},
    {GgmlType::Q5_0, "Q5_0", 32, 22},
    {GgmlType::Q5_1, "Q5_1", 32, 24},
    {GgmlType::Q8_0, "Q8_0", 32, 34},
    {GgmlType::Q8_1, "Q8_1", 32, 36},
    {GgmlType::Q2_K, "Q2_K", 256, 84},
    {GgmlType::Q3_K, "Q3_K", 256, 110},
    {GgmlType::Q4_K, "Q4_K", 256, 144},
    {GgmlType::Q5_K, "Q5_K", 256, 176},
    {GgmlType::Q6_K, "Q6_K", 256, 210},
    {GgmlType::Q8_K, "Q8_K", 256, 292},
    {GgmlType::IQ2_XXS, "IQ2_XXS", 256, 66},
    {GgmlType::IQ2_XS, "IQ2_XS", 256, 74},
    {GgmlType::IQ3_XXS, "IQ3_XXS", 256, 98},
    {GgmlType::IQ1_S, "IQ1_S", 256, 50},
    {GgmlType::IQ4_NL, "IQ4_NL", 32, 18},
    {GgmlType::IQ3_S, "IQ3_S", 256, 110},
    {GgmlType::IQ2_S, "IQ2_S", 256, 82},
    {GgmlType::IQ4_XS, "IQ4_XS", 256, 136},
    {GgmlType::I8, "I8", 1, 1},
    {GgmlType::I16, "I16", 1, 2},
    {GgmlType::I32, "I32", 1, 4},
    {GgmlType::I64, "I64", 1, 8},
    {GgmlType::F64, "F64", 1, 8},
    {GgmlType::IQ1_M, "IQ1_M", 256, 56},
    {GgmlType::BF16, "BF16", 1, 2},
    {GgmlType::TQ1_0, "TQ1_0", 256, 54},
    {GgmlType::TQ2_0, "TQ2_0", 256, 66},
};

const GgmlTypeRow* FindGgmlType(GgmlType type) {
  for (const GgmlTypeRow& row : kGgmlTypes) {
    if (row.type == type) return &row;
  }
  return nullptr;
}

}  // namespace

std::string GgmlTypeName(GgmlType type) {
  if (const GgmlTypeRow* row = FindGgmlType(type)) return row->name;
  return absl::StrCat("unknown ggml type ", static_cast<uint32_t>(type));
}

std::optional<GgmlTypeSize> GgmlTypeSizeOf(GgmlType type) {
  if (const GgmlTypeRow* row = FindGgmlType(type)) {
    return GgmlTypeSize{row->block_elems, row->block_bytes};
  }
  return std::nullopt;
}

int64_t GgufTensor::num_elements() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

// Bounds-checked little-endian cursor over the mapping. Every read names what it was reading so
// truncation errors say where the file ended.
class GgufCursor {
 public:
  GgufCursor(const std::byte* base, size_t size) : base_(base), size_(size) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }

  absl::Status Need(uint64_t n, std::string_view what) const {
    if (n > remaining()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "GGUF truncated: %s needs %u bytes at offset %u but the file has %u bytes",
          std::string(what), n, pos_, size_));
    }
    return absl::OkStatus();
  }
  template <typename T>
  absl::Status Read(T* out, std::string_view what) {
    RETURN_IF_ERROR(Need(sizeof(T), what));
    *out = Load<T>(base_ + pos_);
    pos_ += sizeof(T);
    return absl::OkStatus();
  }
  absl::Status Skip(uint64_t n, std::string_view what) {
    RETURN_IF_ERROR(Need(n, what));
    pos_ += n;
    return absl::OkStatus();
  }
  // A GGUF string: uint64 length then bytes (no terminator).
  absl::Status ReadString(std::string_view* out, uint64_t max_len, std::string_view what) {
    uint64_t len = 0;
    RETURN_IF_ERROR(Read(&len, what));
    if (len > max_len) {
      return absl::InvalidArgumentError(
          absl::StrFormat("GGUF: %s at offset %u has length %u, limit %u", std::string(what),
                          pos_ - 8, len, max_len));
    }
    RETURN_IF_ERROR(Need(len, what));
    *out = std::string_view(reinterpret_cast<const char*>(base_ + pos_), len);
    pos_ += len;
    return absl::OkStatus();
  }

 private:
  const std::byte* base_;
  size_t size_;
  size_t pos_ = 0;
};

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    return absl::ErrnoToStatus(err, absl::StrCat("cannot open GGUF file '", path, "'"));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return absl::ErrnoToStatus(err, absl::StrCat("cannot stat '", path, "'"));
  }
  if (!S_ISREG(st.st_mode) || st.st_size <= 0) {
    ::close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "' is not a GGUF file: empty or not a regular file"));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);
  if (p == MAP_FAILED) return absl::ErrnoToStatus(err, absl::StrCat("cannot mmap '", path, "'"));
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->path_ = path;
  file->base_ = static_cast<const std::byte*>(p);
  file->size_ = size;
  file->mapped_ = true;
  absl::Status status = file->Parse();
  if (!status.ok()) {
    return absl::Status(status.code(), absl::StrCat("'", path, "': ", status.message()));
  }
  return file;
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::FromBytes(std::string bytes) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->path_ = "<memory>";
  file->owned_ = std::move(bytes);
  file->base_ = reinterpret_cast<const std::byte*>(file->owned_.data());
  file->size_ = file->owned_.size();
  RETURN_IF_ERROR(file->Parse());
  return file;
}

GgufFile::~GgufFile() {
  if (mapped_) ::munmap(const_cast<std::byte*>(base_), size_);
}

namespace {

// Validates one scalar or string metadata value at the cursor and advances past it.
absl::Status SkipValue(GgufCursor& p, GgufValueType type, const std::string& key) {
  const std::string what = absl::StrCat("value of '", key, "'");
  if (type == GgufValueType::kString) {
    std::string_view s;
    return p.ReadString(&s, std::numeric_limits<uint64_t>::max(), what);
  }
  return p.Skip(ScalarSize(type), what);
}

// Reads an array header at the cursor, then validates and skips its elements. `offset` receives
// the position of the first element.
absl::Status ParseArray(GgufCursor& p, const std::string& key, GgufValueType* elem_type,
                        uint64_t* count, size_t* offset) {
  uint32_t elem = 0;
  RETURN_IF_ERROR(p.Read(&elem, absl::StrCat("array type of '", key, "'")));
  RETURN_IF_ERROR(p.Read(count, absl::StrCat("array length of '", key, "'")));
  if (!IsKnownValueType(elem) || elem == static_cast<uint32_t>(GgufValueType::kArray)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "GGUF metadata '%s': arrays of value type %u are not supported (nested arrays or "
        "unknown types)",
        key, elem));
  }
  *elem_type = static_cast<GgufValueType>(elem);
  const bool strings = *elem_type == GgufValueType::kString;
  const size_t min_size = strings ? 8 : ScalarSize(*elem_type);
  if (*count > p.remaining() / min_size) {
    return absl::InvalidArgumentError(
        absl::StrFormat("GGUF truncated: array '%s' claims %u elements but only %u bytes remain",
                        key, *count, p.remaining()));
  }
  *offset = p.pos();
  if (!strings) return p.Skip(*count * min_size, key);
  for (uint64_t j = 0; j < *count; ++j) {
    RETURN_IF_ERROR(SkipValue(p, GgufValueType::kString, key));
  }
  return absl::OkStatus();
}

// Reads n_dims and the dims of a tensor info, bounding each dim and the element count.
absl::Status ReadDims(GgufCursor& p, GgufTensor* t) {
  uint32_t n_dims = 0;
  RETURN_IF_ERROR(p.Read(&n_dims, absl::StrCat("dims of tensor '", t->name, "'")));
  if (n_dims == 0 || n_dims > kMaxDims) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "GGUF tensor '%s' has %u dimensions (supported: 1..%u)", t->name, n_dims, kMaxDims));
  }
  int64_t elems = 1;
  for (uint32_t d = 0; d < n_dims; ++d) {
    uint64_t dim = 0;
    RETURN_IF_ERROR(p.Read(&dim, absl::StrCat("dims of tensor '", t->name, "'")));
    if (dim == 0 || dim > static_cast<uint64_t>(kMaxElements) ||
        static_cast<int64_t>(dim) > kMaxElements / elems) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "GGUF tensor '%s' has dimension %u = %u: each must be >= 1 and the tensor may have at "
          "most 2^50 elements",
          t->name, d, dim));
    }
    elems *= static_cast<int64_t>(dim);
    t->dims.push_back(static_cast<int64_t>(dim));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status GgufFile::Parse() {
  GgufCursor p(base_, size_);
  uint32_t magic = 0;
  RETURN_IF_ERROR(p.Read(&magic, "magic"));
  if (magic != kGgufMagic) {
    return absl::InvalidArgumentError(
        absl::StrFormat("not a GGUF file: bad magic 0x%08x (expected \"GGUF\")", magic));
  }
  RETURN_IF_ERROR(p.Read(&version_, "version"));
  if (version_ != 2 && version_ != 3) {
    return absl::InvalidArgumentError(
        absl::StrFormat("unsupported GGUF version %u (supported: 2, 3)", version_));
  }
  uint64_t tensor_count = 0, kv_count = 0;
  RETURN_IF_ERROR(p.Read(&tensor_count, "tensor count"));
  RETURN_IF_ERROR(p.Read(&kv_count, "metadata count"));
  // Smallest encodings: a key/value is 8 (key length) + 4 (type) + 1 bytes, a tensor info is
  // 8 (name length) + 4 (n_dims) + 8 (one dim) + 4 (type) + 8 (offset) bytes.
  if (kv_count > p.remaining() / 13) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "GGUF truncated or corrupt: metadata count %u is more than a %u-byte file can hold",
        kv_count, size_));
  }
  if (tensor_count > p.remaining() / 32) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "GGUF truncated or corrupt: tensor count %u is more than a %u-byte file can hold",
        tensor_count, size_));
  }
  RETURN_IF_ERROR(ParseMetadata(p, kv_count));
  std::vector<uint64_t> offsets;
  RETURN_IF_ERROR(ParseTensorInfos(p, tensor_count, &offsets));
  header_end_ = p.pos();
  data_offset_ = (header_end_ + alignment_ - 1) / alignment_ * alignment_;
  RETURN_IF_ERROR(PlaceTensors(offsets));
  ComputeFingerprint();
  return absl::OkStatus();
}

absl::Status GgufFile::ParseMetadata(GgufCursor& p, uint64_t kv_count) {
  for (uint64_t i = 0; i < kv_count; ++i) {
    std::string_view key_view;
    RETURN_IF_ERROR(p.ReadString(&key_view, kMaxNameLength, absl::StrCat("metadata key #", i)));
    std::string key(key_view);
    uint32_t raw_type = 0;
    RETURN_IF_ERROR(p.Read(&raw_type, absl::StrCat("type of '", key, "'")));
    if (!IsKnownValueType(raw_type)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "GGUF metadata '%s' has unknown value type %u (known: 0..12)", key, raw_type));
    }
    Entry entry{static_cast<GgufValueType>(raw_type), GgufValueType::kUint8, 0, 0};
    if (entry.type == GgufValueType::kArray) {
      RETURN_IF_ERROR(ParseArray(p, key, &entry.elem_type, &entry.count, &entry.offset));
    } else {
      entry.offset = p.pos();
      RETURN_IF_ERROR(SkipValue(p, entry.type, key));
    }
    if (!entries_.emplace(key, entry).second) {
      return absl::InvalidArgumentError(absl::StrCat("GGUF metadata key '", key, "' repeats"));
    }
  }
  if (HasKey("general.alignment")) {
    auto a = GetUint("general.alignment");
    if (!a || *a == 0 || (*a & (*a - 1)) != 0 || *a > (1u << 20)) {
      return absl::InvalidArgumentError(
          "GGUF general.alignment must be a power-of-two integer in [1, 1048576]");
    }
    alignment_ = static_cast<size_t>(*a);
  }
  return absl::OkStatus();
}

absl::Status GgufFile::ParseTensorInfos(GgufCursor& p, uint64_t tensor_count,
                                        std::vector<uint64_t>* offsets) {
  tensors_.reserve(tensor_count);
  offsets->reserve(tensor_count);
  for (uint64_t i = 0; i < tensor_count; ++i) {
    std::string_view name;
    RETURN_IF_ERROR(p.ReadString(&name, kMaxNameLength, absl::StrCat("tensor name #", i)));
    GgufTensor t{std::string(name), {}, GgmlType::F32, nullptr, 0};
    RETURN_IF_ERROR(ReadDims(p, &t));
    uint32_t type = 0;
    RETURN_IF_ERROR(p.Read(&type, absl::StrCat("type of tensor '", t.name, "'")));
    t.type = static_cast<GgmlType>(type);
    auto size = GgmlTypeSizeOf(t.type);
    if (!size) {
      return absl::InvalidArgumentError(
          absl::StrFormat("GGUF tensor '%s' has unknown ggml type %u", t.name, type));
    }
    if (t.dims[0] % size->block_elems != 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "GGUF tensor '%s' of type %s: row length %d is not a multiple of the block size %d",
          t.name, GgmlTypeName(t.type), t.dims[0], size->block_elems));
    }
    t.nbytes = static_cast<size_t>(t.num_elements() / size->block_elems * size->block_bytes);
    uint64_t offset = 0;
    RETURN_IF_ERROR(p.Read(&offset, absl::StrCat("offset of tensor '", t.name, "'")));
    if (!tensor_index_.emplace(t.name, tensors_.size()).second) {
      return absl::InvalidArgumentError(absl::StrCat("GGUF tensor name '", t.name, "' repeats"));
    }
    tensors_.push_back(std::move(t));
    offsets->push_back(offset);
  }
  return absl::OkStatus();
}

absl::Status GgufFile::PlaceTensors(const std::vector<uint64_t>& offsets) {
  for (size_t i = 0; i < tensors_.size(); ++i) {
    GgufTensor& t = tensors_[i];
    const uint64_t off = offsets[i];
    if (off % alignment_ != 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("GGUF tensor '%s' offset %u is not a multiple of the alignment %u",
                          t.name, off, alignment_));
    }
    if (data_offset_ > size_ || off > size_ - data_offset_ ||
        t.nbytes > size_ - data_offset_ - off) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "GGUF truncated: tensor '%s' (%u bytes at data offset %u) ends past the end of the "
          "%u-byte file (data section starts at %u)",
          t.name, t.nbytes, off, size_, data_offset_));
    }
    t.data = base_ + data_offset_ + off;
  }
  return absl::OkStatus();
}

void GgufFile::ComputeFingerprint() {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a offset basis
  Fnv1a(&h, base_, header_end_);
  for (const GgufTensor& t : tensors_) {
    const size_t edge = std::min(kFingerprintEdge, t.nbytes);
    Fnv1a(&h, t.data, edge);
    Fnv1a(&h, t.data + t.nbytes - edge, edge);
  }
  fingerprint_ = absl::StrFormat("%016x", h);
}

bool GgufFile::HasKey(std::string_view key) const { return entries_.find(key) != entries_.end(); }

std::vector<std::string> GgufFile::Keys() const {
  std::vector<std::string> keys;
  keys.reserve(entries_.size());
  for (const auto& [k, v] : entries_) keys.push_back(k);
  return keys;
}

std::optional<GgufValueType> GgufFile::GetType(std::string_view key) const {
  auto it = entries_.find(key);
  if (it == entries_.end()) return std::nullopt;
  return it->second.type;
}

std::optional<GgufValueType> GgufFile::GetArrayType(std::string_view key) const {
  const Entry* e = Find(key, GgufValueType::kArray);
  if (e == nullptr) return std::nullopt;
  return e->elem_type;
}

std::optional<uint64_t> GgufFile::GetArrayLength(std::string_view key) const {
  const Entry* e = Find(key, GgufValueType::kArray);
  if (e == nullptr) return std::nullopt;
  return e->count;
}

const GgufFile::Entry* GgufFile::Find(std::string_view key, GgufValueType type) const {
  auto it = entries_.find(key);
  if (it == entries_.end() || it->second.type != type) return nullptr;
  return &it->second;
}

std::optional<std::string> GgufFile::GetString(std::string_view key) const {
  const Entry* e = Find(key, GgufValueType::kString);
  if (e == nullptr) return std::nullopt;
  const uint64_t len = Load<uint64_t>(base_ + e->offset);
  return std::string(reinterpret_cast<const char*>(base_ + e->offset + 8), len);
}

// Raw bits of a scalar value, zero/sign extended to 64 bits according to its type.
std::optional<uint64_t> GgufFile::ScalarBits(std::string_view key, GgufValueType* type) const {
  auto it = entries_.find(key);
  if (it == entries_.end()) return std::nullopt;
  const Entry& e = it->second;
  const std::byte* p = base_ + e.offset;
  *type = e.type;
  switch (e.type) {
    case GgufValueType::kUint8:
      return Load<uint8_t>(p);
    case GgufValueType::kBool:
      return Load<uint8_t>(p);
    case GgufValueType::kInt8:
      return static_cast<uint64_t>(int64_t{Load<int8_t>(p)});
    case GgufValueType::kUint16:
      return Load<uint16_t>(p);
    case GgufValueType::kInt16:
      return static_cast<uint64_t>(int64_t{Load<int16_t>(p)});
    case GgufValueType::kUint32:
      return Load<uint32_t>(p);
    case GgufValueType::kInt32:
      return static_cast<uint64_t>(int64_t{Load<int32_t>(p)});
    case GgufValueType::kUint64:
      return Load<uint64_t>(p);
    case GgufValueType::kInt64:
      return Load<uint64_t>(p);
    case GgufValueType::kFloat32:
      return Load<uint32_t>(p);
    case GgufValueType::kFloat64:
      return Load<uint64_t>(p);
    default:
      return std::nullopt;
  }
}

namespace {
bool IsSigned(GgufValueType t) {
  return t == GgufValueType::kInt8 || t == GgufValueType::kInt16 || t == GgufValueType::kInt32 ||
         t == GgufValueType::kInt64;
}
bool IsUnsigned(GgufValueType t) {
  return t == GgufValueType::kUint8 || t == GgufValueType::kUint16 || t == GgufValueType::kUint32 ||
         t == GgufValueType::kUint64;
}
}  // namespace

std::optional<uint64_t> GgufFile::GetUint(std::string_view key) const {
  GgufValueType type;
  auto bits = ScalarBits(key, &type);
  if (!bits) return std::nullopt;
  if (IsUnsigned(type)) return bits;
  if (IsSigned(type) && static_cast<int64_t>(*bits) >= 0) return bits;
  return std::nullopt;
}

std::optional<int64_t> GgufFile::GetInt(std::string_view key) const {
  GgufValueType type;
  auto bits = ScalarBits(key, &type);
  if (!bits) return std::nullopt;
  if (IsSigned(type)) return static_cast<int64_t>(*bits);
  if (IsUnsigned(type) && *bits <= static_cast<uint64_t>(INT64_MAX)) {
    return static_cast<int64_t>(*bits);
  }
  return std::nullopt;
}

std::optional<double> GgufFile::GetFloat(std::string_view key) const {
  GgufValueType type;
  auto bits = ScalarBits(key, &type);
  if (!bits) return std::nullopt;
  if (type == GgufValueType::kFloat32) {
    return std::bit_cast<float>(static_cast<uint32_t>(*bits));
  }
  if (type == GgufValueType::kFloat64) return std::bit_cast<double>(*bits);
  return std::nullopt;
}

std::optional<bool> GgufFile::GetBool(std::string_view key) const {
  const Entry* e = Find(key, GgufValueType::kBool);
  if (e == nullptr) return std::nullopt;
  return Load<uint8_t>(base_ + e->offset) != 0;
}

std::optional<std::vector<std::string>> GgufFile::GetStringArray(std::string_view key) const {
  const Entry* e = Find(key, GgufValueType::kArray);
  if (e == nullptr || e->elem_type != GgufValueType::kString) return std::nullopt;
  std::vector<std::string> out;
  out.reserve(e->count);
  size_t off = e->offset;
  for (uint64_t i = 0; i < e->count; ++i) {
    const uint64_t len = Load<uint64_t>(base_ + off);
    out.emplace_back(reinterpret_cast<const char*>(base_ + off + 8), len);
    off += 8 + len;
  }
  return out;
}

std::optional<std::vector<float>> GgufFile::GetFloatArray(std::string_view key) const {
  const Entry* e = Find(key, GgufValueType::kArray);
  if (e == nullptr) return std::nullopt;
  std::vector<float> out;
  const std::byte* p = base_ + e->offset;
  if (e->elem_type == GgufValueType::kFloat32) {
    out.resize(e->count);
    if (e->count > 0) std::memcpy(out.data(), p, e->count * sizeof(float));
  } else if (e->elem_type == GgufValueType::kFloat64) {
    out.resize(e->count);
    for (uint64_t i = 0; i < e->count; ++i) out[i] = static_cast<float>(Load<double>(p + 8 * i));
  } else {
    return std::nullopt;
  }
  return out;
}

std::optional<std::vector<int32_t>> GgufFile::GetInt32Array(std::string_view key) const {
  const Entry* e = Find(key, GgufValueType::kArray);
  if (e == nullptr) return std::nullopt;
  if (e->elem_type != GgufValueType::kInt32 && e->elem_type != GgufValueType::kUint32) {
    return std::nullopt;
  }
  std::vector<int32_t> out(e->count);
  if (e->count > 0) std::memcpy(out.data(), base_ + e->offset, e->count * sizeof(int32_t));
  return out;
}

const GgufTensor* GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  if (it == tensor_index_.end()) return nullptr;
  return &tensors_[it->second];
}

}  // namespace pagoda::common
