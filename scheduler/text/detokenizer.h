// Incremental detokenization for one generated sequence.
//
// Contract:
//  * A StreamingDetokenizer belongs to one request and is not thread-safe. It keeps a reference
//    to the Tokenizer, which must outlive it.
//  * The concatenation of everything Push() and Flush() return is well-formed UTF-8 and equals
//    SanitizeUtf8(concatenated TokenBytes of the pushed ids).
//  * Push() never returns part of a character: a trailing incomplete multi-byte sequence (at
//    most 3 bytes) is held until a later token completes it. Ill-formed bytes are emitted as
//    U+FFFD as soon as they are known to be ill-formed, so nothing is held forever.
//  * Generated tokens follow a prompt, so no leading space is stripped (unlike
//    Tokenizer::Decode). Control, unknown and unused tokens produce no text.
#pragma once

#include <cstdint>
#include <string>

#include "scheduler/text/tokenizer.h"

namespace pagoda::scheduler::text {

class StreamingDetokenizer {
 public:
  explicit StreamingDetokenizer(const Tokenizer& tokenizer) : tokenizer_(&tokenizer) {}

  // Appends the token's bytes and returns the text that became complete (possibly empty).
  std::string Push(int32_t id);

  // Returns the held bytes, each ill-formed subpart replaced by U+FFFD, and resets the holding.
  // Call once the sequence ends.
  std::string Flush();

  // Bytes currently held back (0..3).
  size_t held_bytes() const { return pending_.size(); }

 private:
  const Tokenizer* tokenizer_;
  std::string pending_;  // an incomplete UTF-8 prefix, at most kMaxUtf8IncompleteLength bytes
};

}  // namespace pagoda::scheduler::text
