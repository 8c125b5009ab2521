// GGUF v3 writer: builds a model file in memory (metadata, tensor table, aligned tensor data).
//
// Contract: metadata keys are unique (adding a key again replaces its value in place); tensor
// names are unique (AddTensor rejects a repeat). Tensor data is copied at Add time, so callers
// may free their buffers. Alignment is 32 (the GGUF default, so no general.alignment key is
// written). Not thread-safe; one writer per file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/gguf_reader.h"

namespace pagoda::modelgen {

class GgufWriter {
 public:
  void AddUint8(const std::string& key, uint8_t v);
  void AddInt8(const std::string& key, int8_t v);
  void AddUint16(const std::string& key, uint16_t v);
  void AddInt16(const std::string& key, int16_t v);
  void AddUint32(const std::string& key, uint32_t v);
  void AddInt32(const std::string& key, int32_t v);
  void AddUint64(const std::string& key, uint64_t v);
  void AddInt64(const std::string& key, int64_t v);
  void AddFloat32(const std::string& key, float v);
  void AddFloat64(const std::string& key, double v);
  void AddBool(const std::string& key, bool v);
  void AddString(const std::string& key, const std::string& v);
  void AddStringArray(const std::string& key, const std::vector<std::string>& v);
  void AddFloat32Array(const std::string& key, std::span<const float> v);
  void AddInt32Array(const std::string& key, std::span<const int32_t> v);
  void AddUint32Array(const std::string& key, std::span<const uint32_t> v);

  // Adds raw tensor bytes; `dims` innermost first. Fails on a repeated name, non-positive dims,
  // an unknown type or a byte count that does not match dims and type.
  absl::Status AddTensor(const std::string& name, const std::vector<int64_t>& dims,
                         common::GgmlType type, std::span<const std::byte> data);
  // Converts float values to `type` (F32, F16, BF16, or a quantized type of quantize.h, whose
  // rows are dims[0] long) and adds them.
  absl::Status AddFloatTensor(const std::string& name, const std::vector<int64_t>& dims,
                              common::GgmlType type, std::span<const float> values);

  // The complete file image.
  std::string Serialize() const;
  // Writes Serialize() to `path` (replacing it).
  absl::Status WriteFile(const std::string& path) const;

 private:
  struct Tensor {
    std::string name;
    std::vector<int64_t> dims;
    common::GgmlType type;
    std::vector<std::byte> data;
  };
  // `payload` is the encoded value including its type tag.
  void Put(const std::string& key, std::string payload);

  std::vector<std::pair<std::string, std::string>> metadata_;
  std::vector<Tensor> tensors_;
};

}  // namespace pagoda::modelgen
