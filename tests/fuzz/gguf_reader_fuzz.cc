// libFuzzer target: arbitrary bytes as a GGUF image (malformed, truncated, hostile).
// Invariants (see gguf_reader.h):
//  * GgufFile::FromBytes accepts, or rejects with InvalidArgument and a message; never a crash,
//    never an allocation beyond libFuzzer's -malloc_limit_mb;
//  * on acceptance every metadata getter and every tensor stays inside the image (ASan checks
//    the reads), arrays have their announced length, and tensor sizes match dims and type;
//  * the model config and tokenizer readers built on it accept or reject cleanly, and a
//    tokenizer they accept keeps the Encode/Decode round trip.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/gguf_reader.h"
#include "common/model_config.h"
#include "scheduler/text/gguf_vocab.h"
#include "tests/fuzz/fuzz_support.h"

namespace pagoda::fuzz {
namespace {

using common::GgufFile;
using common::GgufValueType;

// Text for tokenizers read from fuzzed files: spaces, accents, a literal "▁", an emoji and an
// ill-formed byte.
constexpr std::string_view kProbeText =
    "Once upon a time,  \xC3\xA9t\xC3\xA9 \xE2\x96\x81 \xF0\x9F\x98\x80 \xFF end";

void CheckRejection(std::string_view what, const absl::Status& status) {
  if (status.code() != absl::StatusCode::kInvalidArgument || status.message().empty()) {
    FuzzFail(absl::StrCat(std::string(what), " rejected the input with ", status.ToString(),
                          "; expected INVALID_ARGUMENT with a message"));
  }
}

void CheckArray(const GgufFile& file, const std::string& key) {
  const auto elem = file.GetArrayType(key);
  const auto length = file.GetArrayLength(key);
  if (!elem || !length) FuzzFail(absl::StrCat("array '", key, "' has no element type or length"));
  auto check_length = [&](const auto& values, bool expected) {
    if (values.has_value() != expected || (values && values->size() != *length)) {
      FuzzFail(absl::StrCat("array '", key, "': getter disagrees with type ",
                            common::GgufValueTypeName(*elem), " and length ", *length));
    }
  };
  check_length(file.GetStringArray(key), *elem == GgufValueType::kString);
  check_length(file.GetFloatArray(key),
               *elem == GgufValueType::kFloat32 || *elem == GgufValueType::kFloat64);
  check_length(file.GetInt32Array(key),
               *elem == GgufValueType::kInt32 || *elem == GgufValueType::kUint32);
}

void CheckMetadata(const GgufFile& file) {
  for (const std::string& key : file.Keys()) {
    const auto type = file.GetType(key);
    if (!type || !file.HasKey(key)) FuzzFail(absl::StrCat("listed key '", key, "' is missing"));
    if (*type == GgufValueType::kArray) {
      CheckArray(file, key);
      continue;
    }
    if (file.GetString(key).has_value() != (*type == GgufValueType::kString)) {
      FuzzFail(absl::StrCat("GetString('", key, "') disagrees with the value type"));
    }
    (void)file.GetUint(key);
    (void)file.GetInt(key);
    (void)file.GetFloat(key);
    (void)file.GetBool(key);
  }
}

void CheckTensors(const GgufFile& file) {
  // A file without tensors may end before its (empty) data section would start.
  if (file.data_offset() % file.alignment() != 0 ||
      (!file.tensors().empty() && file.data_offset() > file.file_size())) {
    FuzzFail(absl::StrCat("data offset ", file.data_offset(), " in a ", file.file_size(),
                          "-byte file with alignment ", file.alignment()));
  }
  volatile uint8_t sink = 0;
  for (const common::GgufTensor& t : file.tensors()) {
    const auto size = common::GgmlTypeSizeOf(t.type);
    if (file.FindTensor(t.name) != &t || !size || t.dims.empty() || t.dims.size() > 4) {
      FuzzFail(absl::StrCat("tensor '", t.name, "' has a bad type, rank or index entry"));
    }
    const int64_t elements = t.num_elements();
    if (elements <= 0 || t.nbytes == 0 ||
        t.nbytes != static_cast<size_t>(elements / size->block_elems * size->block_bytes)) {
      FuzzFail(absl::StrCat("tensor '", t.name, "': ", t.nbytes, " bytes for ", elements,
                            " elements of ", common::GgmlTypeName(t.type)));
    }
    // ASan reports these reads if the tensor reaches outside the image.
    sink = sink + static_cast<uint8_t>(t.data[0]) + static_cast<uint8_t>(t.data[t.nbytes - 1]);
  }
  if (file.Fingerprint().size() != 16) FuzzFail("fingerprint is not 16 hex digits");
}

void CheckReaders(const GgufFile& file) {
  auto config = common::ReadModelConfig(file);
  if (config.ok()) {
    if (!common::ValidateModelConfig(*config).ok()) {
      FuzzFail("ReadModelConfig accepted an invalid config");
    }
    (void)common::DescribeModelConfig(*config);
  } else {
    CheckRejection("ReadModelConfig", config.status());
  }
  auto tokenizer = scheduler::text::LoadGgufTokenizer(file);
  if (!tokenizer.ok()) {
    CheckRejection("LoadGgufTokenizer", tokenizer.status());
    return;
  }
  CheckRoundTrip(*tokenizer, kProbeText);
}

void TestOneInput(std::string_view bytes) {
  auto file = GgufFile::FromBytes(std::string(bytes));
  if (!file.ok()) {
    CheckRejection("GgufFile::FromBytes", file.status());
    return;
  }
  CheckMetadata(**file);
  CheckTensors(**file);
  CheckReaders(**file);
}

}  // namespace
}  // namespace pagoda::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  pagoda::fuzz::TestOneInput(pagoda::fuzz::AsText(data, size));
  return 0;
}
