#include "common/utf8.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <string>

namespace pagoda::common {
namespace {

// An independent decoder for checking: the code point when `s` is exactly one well-formed
// character, computed arithmetically instead of from the table of byte ranges.
std::optional<uint32_t> DecodeOne(const std::string& s) {
  const auto b = [&s](size_t i) { return static_cast<uint8_t>(s[i]); };
  if (s.empty()) return std::nullopt;
  size_t n;
  uint32_t cp;
  if (b(0) < 0x80) {
    n = 1, cp = b(0);
  } else if ((b(0) & 0xE0) == 0xC0) {
    n = 2, cp = b(0) & 0x1F;
  } else if ((b(0) & 0xF0) == 0xE0) {
    n = 3, cp = b(0) & 0x0F;
  } else if ((b(0) & 0xF8) == 0xF0) {
    n = 4, cp = b(0) & 0x07;
  } else {
    return std::nullopt;
  }
  if (s.size() != n) return std::nullopt;
  for (size_t i = 1; i < n; ++i) {
    if ((b(i) & 0xC0) != 0x80) return std::nullopt;
    cp = (cp << 6) | (b(i) & 0x3F);
  }
  static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return std::nullopt;
  return cp;
}

TEST(Utf8Test, AcceptsWellFormedText) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("plain ASCII\n"));
  EXPECT_TRUE(IsValidUtf8(std::string(1, '\0')));
  EXPECT_TRUE(IsValidUtf8("caf\xC3\xA9"));               // é
  EXPECT_TRUE(IsValidUtf8("\xE2\x82\xAC"));              // €
  EXPECT_TRUE(IsValidUtf8("\xE4\xB8\xAD\xE6\x96\x87"));  // 中文
  EXPECT_TRUE(IsValidUtf8("\xF0\x9F\x98\x80"));          // 😀
  EXPECT_TRUE(IsValidUtf8("\xF4\x8F\xBF\xBF"));          // U+10FFFF
  EXPECT_TRUE(IsValidUtf8("\xED\x9F\xBF\xEE\x80\x80"));  // U+D7FF, U+E000
}

TEST(Utf8Test, RejectsIllFormedText) {
  EXPECT_FALSE(IsValidUtf8("\x80"));              // lone continuation byte
  EXPECT_FALSE(IsValidUtf8("\xC0\xAF"));          // overlong '/'
  EXPECT_FALSE(IsValidUtf8("\xC1\xBF"));          // overlong
  EXPECT_FALSE(IsValidUtf8("\xE0\x80\xAF"));      // overlong 3-byte
  EXPECT_FALSE(IsValidUtf8("\xF0\x80\x80\xAF"));  // overlong 4-byte
  EXPECT_FALSE(IsValidUtf8("\xED\xA0\x80"));      // U+D800 surrogate
  EXPECT_FALSE(IsValidUtf8("\xED\xBF\xBF"));      // U+DFFF surrogate
  EXPECT_FALSE(IsValidUtf8("\xF4\x90\x80\x80"));  // U+110000
  EXPECT_FALSE(IsValidUtf8("\xF5\x80\x80\x80"));  // lead byte beyond U+10FFFF
  EXPECT_FALSE(IsValidUtf8("\xFF"));
  EXPECT_FALSE(IsValidUtf8("abc\xE2\x82"));  // truncated €
  EXPECT_FALSE(
      IsValidUtf8("\xC3"
                  "a"));  // lead without continuation
}

TEST(Utf8Test, AgreesWithArithmeticDecoderOnAllShortSequences) {
  // Every 1-, 2- and 3-byte string, and 4-byte strings with representative tails.
  std::string s;
  for (int b0 = 0; b0 < 256; ++b0) {
    s.assign(1, static_cast<char>(b0));
    ASSERT_EQ(IsValidUtf8(s), DecodeOne(s).has_value()) << b0;
    for (int b1 = 0; b1 < 256; ++b1) {
      s.assign({static_cast<char>(b0), static_cast<char>(b1)});
      ASSERT_EQ(ScanUtf8Char(s).kind == Utf8CharKind::kValid && ScanUtf8Char(s).length == 2,
                DecodeOne(s).has_value())
          << b0 << " " << b1;
      if (b0 < 0xE0) continue;
      for (int b2 = 0; b2 < 256; ++b2) {
        s.assign({static_cast<char>(b0), static_cast<char>(b1), static_cast<char>(b2)});
        ASSERT_EQ(ScanUtf8Char(s).kind == Utf8CharKind::kValid && ScanUtf8Char(s).length == 3,
                  DecodeOne(s).has_value());
        if (b0 < 0xF0 || (b2 != 0x80 && b2 != 0xBF && b2 != 0x41)) continue;
        for (int b3 : {0x00, 0x41, 0x7F, 0x80, 0x9F, 0xBF, 0xC0, 0xFF}) {
          s.push_back(static_cast<char>(b3));
          ASSERT_EQ(IsValidUtf8(s), DecodeOne(s).has_value());
          s.pop_back();
        }
      }
    }
  }
}

TEST(Utf8Test, ScanClassifiesCharacters) {
  EXPECT_EQ(ScanUtf8Char("a").kind, Utf8CharKind::kValid);
  EXPECT_EQ(ScanUtf8Char("\xE2\x82\xAC"
                         "x")
                .length,
            3u);
  Utf8Char c = ScanUtf8Char("\xF0\x9F\x98");
  EXPECT_EQ(c.kind, Utf8CharKind::kIncomplete);
  EXPECT_EQ(c.length, 3u);
  c = ScanUtf8Char(
      "\xF0\x9F"
      "a");  // ill-formed: the maximal subpart is F0 9F
  EXPECT_EQ(c.kind, Utf8CharKind::kInvalid);
  EXPECT_EQ(c.length, 2u);
  c = ScanUtf8Char("\xE0\x80\x80");  // E0 80 can never be well-formed: E0 alone is the subpart
  EXPECT_EQ(c.kind, Utf8CharKind::kInvalid);
  EXPECT_EQ(c.length, 1u);
}

TEST(Utf8Test, IncompleteSuffixLength) {
  EXPECT_EQ(Utf8IncompleteSuffixLength(""), 0u);
  EXPECT_EQ(Utf8IncompleteSuffixLength("abc"), 0u);
  EXPECT_EQ(Utf8IncompleteSuffixLength("a\xE2\x82\xAC"), 0u);
  EXPECT_EQ(Utf8IncompleteSuffixLength("a\xE2"), 1u);
  EXPECT_EQ(Utf8IncompleteSuffixLength("a\xE2\x82"), 2u);
  EXPECT_EQ(Utf8IncompleteSuffixLength("\xF0\x9F\x98"), 3u);
  EXPECT_EQ(Utf8IncompleteSuffixLength("\xF0\x9F"), 2u);
  EXPECT_EQ(Utf8IncompleteSuffixLength("a\x82"), 0u);     // stray continuation
  EXPECT_EQ(Utf8IncompleteSuffixLength("\xE0\x80"), 0u);  // can never complete
  EXPECT_EQ(Utf8IncompleteSuffixLength("\xED\xA0"), 0u);  // would be a surrogate
  EXPECT_EQ(Utf8IncompleteSuffixLength("\x80\x80\x80"), 0u);
}

TEST(Utf8Test, SanitizeReplacesMaximalSubparts) {
  const std::string fffd(kUtf8Replacement);
  EXPECT_EQ(SanitizeUtf8("ok \xC3\xA9"), "ok \xC3\xA9");
  EXPECT_EQ(SanitizeUtf8("a\x80"
                         "b"),
            "a" + fffd + "b");
  EXPECT_EQ(SanitizeUtf8("\xE2\x82"), fffd);  // one truncated character
  EXPECT_EQ(SanitizeUtf8("\xE2\x82"
                         "A"),
            fffd + "A");
  EXPECT_EQ(SanitizeUtf8("\xF0\x80\x80"), fffd + fffd + fffd);
  EXPECT_EQ(SanitizeUtf8("\xED\xA0\x80"), fffd + fffd + fffd);
  EXPECT_EQ(SanitizeUtf8("\xFF\xFE"), fffd + fffd);
  EXPECT_TRUE(IsValidUtf8(SanitizeUtf8("\xC0\xAF\xF4\x90\x80\x80\xE2")));
}

TEST(Utf8Test, AppendEncodesScalarValues) {
  for (uint32_t cp : {0x0u, 0x41u, 0x7Fu, 0x80u, 0x7FFu, 0x800u, 0xD7FFu, 0xE000u, 0xFFFDu, 0xFFFFu,
                      0x10000u, 0x1F600u, 0x10FFFFu}) {
    std::string s;
    AppendUtf8(static_cast<char32_t>(cp), s);
    EXPECT_EQ(DecodeOne(s), cp) << std::hex << cp;
  }
  std::string s;
  AppendUtf8(U'\uFFFD', s);
  EXPECT_EQ(s, kUtf8Replacement);
}

}  // namespace
}  // namespace pagoda::common
