// GGUF (v2 and v3) reader: a read-only memory map of a model file, its metadata and tensor table.
//
// Contract:
//  * Open() maps the whole file read-only and validates every length, count and offset against
//    the file size before use. Hostile or truncated input yields an absl error (never a crash,
//    never an allocation larger than the file); nested arrays and v1 files are rejected.
//  * A GgufFile is immutable after Open(); all accessors are const and thread-safe. Tensor
//    `data` pointers point into the mapping and are valid for the GgufFile's lifetime; the
//    destructor unmaps.
//  * Metadata getters return std::nullopt when the key is absent or holds an incompatible type.
//  * Tensor dims are in GGUF order, innermost (contiguous) first: dims [n_in, n_out] is a
//    row-major matrix of n_out rows of n_in elements.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace pagoda::common {

class GgufCursor;  // parsing detail, defined in gguf_reader.cc

// GGUF metadata value types (numbering from the GGUF specification).
enum class GgufValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

std::string GgufValueTypeName(GgufValueType type);

// ggml tensor element types (numbering from ggml). Names follow ggml so messages read "Q4_0".
enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
  TQ1_0 = 34,
  TQ2_0 = 35,
};

// "F32", "Q4_0", ...; "unknown ggml type <n>" for values not listed above.
std::string GgmlTypeName(GgmlType type);

// Storage geometry of a ggml type: `block_bytes` bytes hold `block_elems` elements.
struct GgmlTypeSize {
  int64_t block_elems;
  int64_t block_bytes;
};
// nullopt for unknown types.
std::optional<GgmlTypeSize> GgmlTypeSizeOf(GgmlType type);

struct GgufTensor {
  std::string name;
  std::vector<int64_t> dims;  // innermost first
  GgmlType type;
  const std::byte* data;  // into the mapping, `nbytes` long
  size_t nbytes;

  int64_t num_elements() const;
};

class GgufFile {
 public:
  // Maps and parses `path`. Errors: NotFound/PermissionDenied from the OS, InvalidArgument for
  // malformed content (bad magic, unsupported version, truncation, absurd counts).
  static absl::StatusOr<std::unique_ptr<GgufFile>> Open(const std::string& path);
  // Parses an in-memory image (the bytes are copied and owned). For tests and tools.
  static absl::StatusOr<std::unique_ptr<GgufFile>> FromBytes(std::string bytes);

  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;
  ~GgufFile();

  const std::string& path() const { return path_; }  // "<memory>" for FromBytes
  uint32_t version() const { return version_; }
  size_t alignment() const { return alignment_; }
  size_t file_size() const { return size_; }
  size_t data_offset() const { return data_offset_; }  // start of the tensor data section

  // Metadata. Integer getters widen any integer type; GetUint rejects negative values and
  // GetInt rejects uint64 values above INT64_MAX (both give nullopt).
  bool HasKey(std::string_view key) const;
  std::vector<std::string> Keys() const;  // sorted
  std::optional<GgufValueType> GetType(std::string_view key) const;
  // For arrays: the element type and count.
  std::optional<GgufValueType> GetArrayType(std::string_view key) const;
  std::optional<uint64_t> GetArrayLength(std::string_view key) const;
  std::optional<std::string> GetString(std::string_view key) const;
  std::optional<uint64_t> GetUint(std::string_view key) const;
  std::optional<int64_t> GetInt(std::string_view key) const;
  std::optional<double> GetFloat(std::string_view key) const;  // f32 or f64
  std::optional<bool> GetBool(std::string_view key) const;
  std::optional<std::vector<std::string>> GetStringArray(std::string_view key) const;
  std::optional<std::vector<float>> GetFloatArray(std::string_view key) const;    // f32/f64
  std::optional<std::vector<int32_t>> GetInt32Array(std::string_view key) const;  // i32/u32

  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* FindTensor(std::string_view name) const;

  // 16 hex digits: FNV-1a-64 over the header region (metadata and tensor table) and the first
  // and last up-to-4096 bytes of every tensor. Same file -> same value; computed at open.
  const std::string& Fingerprint() const { return fingerprint_; }

 private:
  // Where a metadata value lives in the mapping.
  struct Entry {
    GgufValueType type;
    GgufValueType elem_type;  // arrays only
    uint64_t count;           // arrays only
    size_t offset;            // of the value payload (arrays: of the first element)
  };
  GgufFile() = default;
  absl::Status Parse();
  absl::Status ParseMetadata(GgufCursor& cursor, uint64_t kv_count);
  absl::Status ParseTensorInfos(GgufCursor& cursor, uint64_t tensor_count,
                                std::vector<uint64_t>* offsets);
  absl::Status PlaceTensors(const std::vector<uint64_t>& offsets);
  void ComputeFingerprint();
  const Entry* Find(std::string_view key, GgufValueType type) const;
  std::optional<uint64_t> ScalarBits(std::string_view key, GgufValueType* type) const;

  std::string path_;
  const std::byte* base_ = nullptr;
  size_t size_ = 0;
  bool mapped_ = false;  // base_ is an mmap to release
  std::string owned_;    // FromBytes storage
  uint32_t version_ = 0;
  size_t alignment_ = 32;
  size_t data_offset_ = 0;
  size_t header_end_ = 0;  // end of the tensor table
  std::map<std::string, Entry, std::less<>> entries_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
  std::string fingerprint_;
};

}  // namespace pagoda::common
