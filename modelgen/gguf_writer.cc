#include "modelgen/gguf_writer.h"

#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/fp16.h"
#include "modelgen/quantize.h"

namespace pagoda::modelgen {

using common::FloatToBf16;
using common::FloatToF16;
using common::GgmlType;
using common::GgmlTypeName;
using common::GgmlTypeSizeOf;
using common::GgufValueType;

namespace {

constexpr size_t kAlignment = 32;

template <typename T>
void Append(std::string* out, T v) {
  char buf[sizeof(T)];
  std::memcpy(buf, &v, sizeof(T));
  out->append(buf, sizeof(T));
}

void AppendString(std::string* out, const std::string& s) {
  Append<uint64_t>(out, s.size());
  out->append(s);
}

void AppendType(std::string* out, GgufValueType t) {
  Append<uint32_t>(out, static_cast<uint32_t>(t));
}

template <typename T>
std::string Scalar(GgufValueType t, T v) {
  std::string out;
  AppendType(&out, t);
  Append<T>(&out, v);
  return out;
}

template <typename T>
std::string Array(GgufValueType elem, std::span<const T> v) {
  std::string out;
  AppendType(&out, GgufValueType::kArray);
  AppendType(&out, elem);
  Append<uint64_t>(&out, v.size());
  for (const T& x : v) Append<T>(&out, x);
  return out;
}

}  // namespace

void GgufWriter::Put(const std::string& key, std::string payload) {
  for (auto& [k, v] : metadata_) {
    if (k == key) {
      v = std::move(payload);
      return;
    }
  }
  metadata_.emplace_back(key, std::move(payload));
}

void GgufWriter::AddUint8(const std::string& k, uint8_t v) {
  Put(k, Scalar(GgufValueType::kUint8, v));
}
void GgufWriter::AddInt8(const std::string& k, int8_t v) {
  Put(k, Scalar(GgufValueType::kInt8, v));
}
void GgufWriter::AddUint16(const std::string& k, uint16_t v) {
  Put(k, Scalar(GgufValueType::kUint16, v));
}
void GgufWriter::AddInt16(const std::string& k, int16_t v) {
  Put(k, Scalar(GgufValueType::kInt16, v));
}
void GgufWriter::AddUint32(const std::string& k, uint32_t v) {
  Put(k, Scalar(GgufValueType::kUint32, v));
}
void GgufWriter::AddInt32(const std::string& k, int32_t v) {
  Put(k, Scalar(GgufValueType::kInt32, v));
}
void GgufWriter::AddUint64(const std::string& k, uint64_t v) {
  Put(k, Scalar(GgufValueType::kUint64, v));
}
void GgufWriter::AddInt64(const std::string& k, int64_t v) {
  Put(k, Scalar(GgufValueType::kInt64, v));
}
void GgufWriter::AddFloat32(const std::string& k, float v) {
  Put(k, Scalar(GgufValueType::kFloat32, v));
}
void GgufWriter::AddFloat64(const std::string& k, double v) {
  Put(k, Scalar(GgufValueType::kFloat64, v));
}
void GgufWriter::AddBool(const std::string& k, bool v) {
  Put(k, Scalar(GgufValueType::kBool, static_cast<uint8_t>(v ? 1 : 0)));
}

void GgufWriter::AddString(const std::string& key, const std::string& v) {
  std::string out;
  AppendType(&out, GgufValueType::kString);
  AppendString(&out, v);
  Put(key, std::move(out));
}

void GgufWriter::AddStringArray(const std::string& key, const std::vector<std::string>& v) {
  std::string out;
  AppendType(&out, GgufValueType::kArray);
  AppendType(&out, GgufValueType::kString);
  Append<uint64_t>(&out, v.size());
  for (const std::string& s : v) AppendString(&out, s);
  Put(key, std::move(out));
}

void GgufWriter::AddFloat32Array(const std::string& key, std::span<const float> v) {
  Put(key, Array(GgufValueType::kFloat32, v));
}
void GgufWriter::AddInt32Array(const std::string& key, std::span<const int32_t> v) {
  Put(key, Array(GgufValueType::kInt32, v));
}
void GgufWriter::AddUint32Array(const std::string& key, std::span<const uint32_t> v) {
  Put(key, Array(GgufValueType::kUint32, v));
}

absl::Status GgufWriter::AddTensor(const std::string& name, const std::vector<int64_t>& dims,
                                   GgmlType type, std::span<const std::byte> data) {
  for (const Tensor& t : tensors_) {
    if (t.name == name)
      return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' repeats"));
  }
  auto size = GgmlTypeSizeOf(type);
  if (!size)
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "': ", GgmlTypeName(type)));
  if (dims.empty() || dims.size() > 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "' has ", dims.size(), " dims (supported: 1..4)"));
  }
  int64_t elems = 1;
  for (int64_t d : dims) {
    if (d <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' has non-positive dims [",
                                                     absl::StrJoin(dims, ", "), "]"));
    }
    elems *= d;
  }
  if (dims[0] % size->block_elems != 0 ||
      static_cast<size_t>(elems / size->block_elems * size->block_bytes) != data.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "' of type ", GgmlTypeName(type), " and dims [",
                     absl::StrJoin(dims, ", "), "] cannot hold ", data.size(), " bytes"));
  }
  tensors_.push_back(Tensor{name, dims, type, std::vector<std::byte>(data.begin(), data.end())});
  return absl::OkStatus();
}

absl::Status GgufWriter::AddFloatTensor(const std::string& name, const std::vector<int64_t>& dims,
                                        GgmlType type, std::span<const float> values) {
  std::vector<std::byte> bytes;
  if (type == GgmlType::F32) {
    bytes.resize(values.size() * 4);
    if (!values.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
  } else if (type == GgmlType::F16 || type == GgmlType::BF16) {
    bytes.resize(values.size() * 2);
    for (size_t i = 0; i < values.size(); ++i) {
      const uint16_t h = type == GgmlType::F16 ? FloatToF16(values[i]) : FloatToBf16(values[i]);
      std::memcpy(bytes.data() + 2 * i, &h, 2);
    }
  } else if (CanQuantize(type)) {
    auto q = QuantizeRows(type, values, dims.empty() ? 0 : dims[0]);
    if (!q.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", name, "': ", q.status().message()));
    }
    bytes = *std::move(q);
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "': cannot encode floats as ", GgmlTypeName(type),
                     " (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K)"));
  }
  return AddTensor(name, dims, type, bytes);
}

std::string GgufWriter::Serialize() const {
  std::string out;
  Append<uint32_t>(&out, 0x46554747);  // "GGUF"
  Append<uint32_t>(&out, 3);
  Append<uint64_t>(&out, tensors_.size());
  Append<uint64_t>(&out, metadata_.size());
  for (const auto& [key, payload] : metadata_) {
    AppendString(&out, key);
    out.append(payload);
  }
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    AppendString(&out, t.name);
    Append<uint32_t>(&out, static_cast<uint32_t>(t.dims.size()));
    for (int64_t d : t.dims) Append<uint64_t>(&out, static_cast<uint64_t>(d));
    Append<uint32_t>(&out, static_cast<uint32_t>(t.type));
    Append<uint64_t>(&out, offset);
    offset += (t.data.size() + kAlignment - 1) / kAlignment * kAlignment;
  }
  for (const Tensor& t : tensors_) {
    out.resize((out.size() + kAlignment - 1) / kAlignment * kAlignment, '\0');
    out.append(reinterpret_cast<const char*>(t.data.data()), t.data.size());
  }
  return out;
}

absl::Status GgufWriter::WriteFile(const std::string& path) const {
  const std::string bytes = Serialize();
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) return absl::PermissionDeniedError(absl::StrCat("cannot open '", path, "' for writing"));
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  f.close();
  if (!f)
    return absl::DataLossError(
        absl::StrCat("failed writing ", bytes.size(), " bytes to '", path, "'"));
  return absl::OkStatus();
}

}  // namespace pagoda::modelgen
