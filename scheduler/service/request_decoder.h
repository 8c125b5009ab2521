// DecodeRequest: the public API's requests from their raw bytes, with precise errors.
//
// gRPC would otherwise parse requests before any handler runs, and answer what it cannot parse
// with a bare INTERNAL ("Failed to parse request"): a proto3 `string` field holding ill-formed
// UTF-8 (protobuf refuses it), truncated or garbage bytes. And it answers a message above its
// receive limit with RESOURCE_EXHAUSTED. The Generation service instead takes Generate and
// Tokenize requests as bytes and decodes them here, so each of these is INVALID_ARGUMENT and
// says what was wrong: the size and the limit, or the field with ill-formed UTF-8 and where.
//
// Contract: never crashes on any input; a success leaves `out` parsed, a failure leaves it
// unspecified. The size is checked first, then UTF-8 (so protobuf never sees, and never logs,
// an ill-formed string), then the bytes are parsed.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace google::protobuf {
class Descriptor;
class Message;
}  // namespace google::protobuf

namespace pagoda::scheduler {

// INVALID_ARGUMENT naming both sizes and --max-request-bytes when `bytes` > `max_bytes`.
absl::Status CheckRequestSize(size_t bytes, size_t max_bytes);

// Parses `bytes` into `out`. INVALID_ARGUMENT when `bytes` is larger than `max_bytes`
// (naming both and --max-request-bytes), when a string field is ill-formed UTF-8 (naming the
// field, the byte and its offset), or when the bytes are no valid message of out's type.
absl::Status DecodeRequest(std::string_view bytes, size_t max_bytes,
                           google::protobuf::Message* out);

// A string field holding ill-formed UTF-8.
struct IllFormedUtf8Field {
  std::string path;   // "text", "stop[1]", "sampling.name": repeated fields carry their index
  size_t offset = 0;  // of the first ill-formed byte in the field's value
  unsigned char byte = 0;
};

// The first string field (depth first, in wire order) of the serialized `type` message in
// `bytes` that holds ill-formed UTF-8; nullopt when there is none or the bytes end early.
std::optional<IllFormedUtf8Field> FindIllFormedUtf8Field(std::string_view bytes,
                                                         const google::protobuf::Descriptor* type);

}  // namespace pagoda::scheduler
