#include "common/utf8.h"

#include <cassert>
#include <cstdint>

namespace pagoda::common {
namespace {

// Sequence length announced by a lead byte, or 0 when the byte can never start a character
// (continuation bytes 0x80..0xBF, overlong leads 0xC0/0xC1, and 0xF5..0xFF).
size_t LeadLength(uint8_t lead) {
  if (lead < 0x80) return 1;
  if (lead < 0xC2) return 0;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  if (lead < 0xF5) return 4;
  return 0;
}

// Allowed range of the byte right after `lead` (Unicode table 3-7). Later continuation bytes
// are always 0x80..0xBF. The narrowed ranges exclude overlongs, surrogates and > U+10FFFF.
void SecondByteRange(uint8_t lead, uint8_t& lo, uint8_t& hi) {
  lo = 0x80;
  hi = 0xBF;
  if (lead == 0xE0) lo = 0xA0;
  if (lead == 0xED) hi = 0x9F;
  if (lead == 0xF0) lo = 0x90;
  if (lead == 0xF4) hi = 0x8F;
}

}  // namespace

Utf8Char ScanUtf8Char(std::string_view text) {
  assert(!text.empty());
  const uint8_t lead = static_cast<uint8_t>(text[0]);
  const size_t need = LeadLength(lead);
  if (need == 0) return {Utf8CharKind::kInvalid, 1};
  if (need == 1) return {Utf8CharKind::kValid, 1};
  uint8_t lo, hi;
  SecondByteRange(lead, lo, hi);
  for (size_t i = 1; i < need; ++i) {
    if (i >= text.size()) return {Utf8CharKind::kIncomplete, i};
    const uint8_t byte = static_cast<uint8_t>(text[i]);
    if (byte < lo || byte > hi) return {Utf8CharKind::kInvalid, i};
    lo = 0x80;
    hi = 0xBF;
  }
  return {Utf8CharKind::kValid, need};
}

bool IsValidUtf8(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    // ASCII fast path: most prompts are mostly ASCII.
    if (static_cast<uint8_t>(text[i]) < 0x80) {
      ++i;
      continue;
    }
    const Utf8Char c = ScanUtf8Char(text.substr(i));
    if (c.kind != Utf8CharKind::kValid) return false;
    i += c.length;
  }
  return true;
}

size_t Utf8IncompleteSuffixLength(std::string_view text) {
  // Only a lead byte within the last 3 bytes can start an incomplete tail.
  const size_t window =
      text.size() < kMaxUtf8IncompleteLength ? text.size() : kMaxUtf8IncompleteLength;
  for (size_t back = 1; back <= window; ++back) {
    const size_t pos = text.size() - back;
    const uint8_t byte = static_cast<uint8_t>(text[pos]);
    if (byte >= 0x80 && byte < 0xC0) continue;  // a continuation byte: keep looking for a lead
    const Utf8Char c = ScanUtf8Char(text.substr(pos));
    return c.kind == Utf8CharKind::kIncomplete ? back : 0;
  }
  return 0;
}

std::string SanitizeUtf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const Utf8Char c = ScanUtf8Char(text.substr(i));
    if (c.kind == Utf8CharKind::kValid) {
      out.append(text.substr(i, c.length));
    } else {
      out.append(kUtf8Replacement);
    }
    i += c.length;
  }
  return out;
}

void AppendUtf8(char32_t code_point, std::string& out) {
  const uint32_t cp = static_cast<uint32_t>(code_point);
  assert(cp <= 0x10FFFF && (cp < 0xD800 || cp > 0xDFFF));
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace pagoda::common
