#include "worker/model/weight_matrix.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/fp16.h"

namespace pagoda::worker {
namespace {

using common::GgmlType;

// The portable F16 loaders the block decoders below expect under these names.
constexpr auto& LoadHalf = common::LoadF16;
constexpr auto& HalfRowToFloat = common::F16RowToFloat;

#include "worker/model/dequantize_blocks.inc"

constexpr GgmlType kSupported[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0,
                                   GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};

}  // namespace

bool IsSupportedWeightType(GgmlType type) {
  for (GgmlType t : kSupported) {
    if (t == type) return true;
  }
  return false;
}

std::string SupportedWeightTypes() {
  return absl::StrJoin(kSupported, ", ", [](std::string* out, GgmlType t) {
    absl::StrAppend(out, common::GgmlTypeName(t));
  });
}

size_t RowBytes(GgmlType type, int64_t cols) {
  const auto size = common::GgmlTypeSizeOf(type);
  if (!size.has_value()) return 0;
  return static_cast<size_t>(cols / size->block_elems * size->block_bytes);
}

void DequantizeRowPortable(GgmlType type, const uint8_t* row, int n, float* out) {
  DecodeRow(type, row, n, out);
}

std::vector<float> WeightMatrix::ToFloat() const {
  std::vector<float> out(static_cast<size_t>(rows) * cols);
  for (int r = 0; r < rows; ++r) {
    DecodeRow(type, row(r), cols, out.data() + static_cast<size_t>(r) * cols);
  }
  return out;
}

absl::StatusOr<WeightMatrix> CopyWeightMatrix(const common::GgufTensor& t) {
  if (!IsSupportedWeightType(t.type)) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", t.name, "' has type ",
                                                   common::GgmlTypeName(t.type),
                                                   "; supported: ", SupportedWeightTypes()));
  }
  if (t.dims.empty() || t.dims.size() > 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", t.name, "' has ", t.dims.size(), " dims; expected 1 or 2"));
  }
  WeightMatrix m;
  m.type = t.type;
  m.cols = static_cast<int>(t.dims[0]);
  m.rows = t.dims.size() == 2 ? static_cast<int>(t.dims[1]) : 1;
  m.row_bytes = RowBytes(t.type, t.dims[0]);
  // The reader checked that dims[0] is a whole number of blocks and that nbytes fits the file.
  if (m.row_bytes * static_cast<size_t>(m.rows) != t.nbytes) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", t.name, "' holds ", t.nbytes,
                                                   " bytes; its dims and type need ",
                                                   m.row_bytes * static_cast<size_t>(m.rows)));
  }
  const auto* src = reinterpret_cast<const uint8_t*>(t.data);
  m.bytes.assign(src, src + t.nbytes);
  return m;
}

}  // namespace pagoda::worker
