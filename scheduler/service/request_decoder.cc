#include "scheduler/service/request_decoder.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/message.h>
#include <google/protobuf/wire_format_lite.h>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/utf8.h"

namespace pagoda::scheduler {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::internal::WireFormatLite;

// Nesting deeper than this is not searched (the API's messages nest two levels).
constexpr int kMaxDepth = 8;

// Offset of the first byte of `text` that starts an ill-formed sequence, or nullopt.
std::optional<size_t> FirstIllFormedByte(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const common::Utf8Char c = common::ScanUtf8Char(text.substr(i));
    if (c.kind != common::Utf8CharKind::kValid) return i;
    i += c.length;
  }
  return std::nullopt;
}

std::optional<IllFormedUtf8Field> Search(std::string_view bytes, const Descriptor* type,
                                         const std::string& prefix, int depth) {
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                                            static_cast<int>(bytes.size()));
  absl::flat_hash_map<int, int> seen;  // occurrences per field number, for repeated indices
  while (const uint32_t tag = in.ReadTag()) {
    const FieldDescriptor* field = type->FindFieldByNumber(WireFormatLite::GetTagFieldNumber(tag));
    if (WireFormatLite::GetTagWireType(tag) != WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      if (!WireFormatLite::SkipField(&in, tag)) return std::nullopt;
      continue;
    }
    uint32_t length = 0;
    std::string value;
    if (!in.ReadVarint32(&length) || !in.ReadString(&value, static_cast<int>(length))) {
      return std::nullopt;
    }
    if (field == nullptr) continue;  // an unknown field: protobuf keeps it without checking
    std::string name = prefix + field->name();
    if (field->is_repeated()) absl::StrAppend(&name, "[", seen[field->number()]++, "]");
    if (field->type() == FieldDescriptor::TYPE_STRING) {
      if (const std::optional<size_t> at = FirstIllFormedByte(value)) {
        return IllFormedUtf8Field{name, *at, static_cast<unsigned char>(value[*at])};
      }
    } else if (field->type() == FieldDescriptor::TYPE_MESSAGE && depth < kMaxDepth) {
      if (auto found = Search(value, field->message_type(), name + ".", depth + 1)) return found;
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<IllFormedUtf8Field> FindIllFormedUtf8Field(std::string_view bytes,
                                                         const Descriptor* type) {
  return Search(bytes, type, "", 0);
}

absl::Status CheckRequestSize(size_t bytes, size_t max_bytes) {
  if (bytes <= max_bytes) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "the request is %d bytes; the limit is %d bytes (--max-request-bytes)", bytes, max_bytes));
}

absl::Status DecodeRequest(std::string_view bytes, size_t max_bytes,
                           google::protobuf::Message* out) {
  if (absl::Status s = CheckRequestSize(bytes.size(), max_bytes); !s.ok()) return s;
  const Descriptor* type = out->GetDescriptor();
  if (std::optional<IllFormedUtf8Field> bad = FindIllFormedUtf8Field(bytes, type)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "field %s is not valid UTF-8: ill-formed byte 0x%02x at offset %d (string fields must "
        "be UTF-8)",
        bad->path, bad->byte, bad->offset));
  }
  if (out->ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrFormat(
      "the request (%d bytes) is not a valid serialized %s", bytes.size(), type->full_name()));
}

}  // namespace pagoda::scheduler
