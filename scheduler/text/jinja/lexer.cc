#include "scheduler/text/jinja/lexer.h"

#include <array>
#include <utility>

#include "scheduler/text/jinja/error.h"
#include "scheduler/text/jinja/js_string.h"

namespace pagoda::scheduler::text::jinja {
namespace {

bool IsDigit(char32_t c) { return c >= '0' && c <= '9'; }
bool IsWordChar(char32_t c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || IsDigit(c) || c == '_';
}
bool IsLineStart(const std::u32string& s, size_t i) {
  if (i == 0) return true;
  char32_t p = s[i - 1];
  return p == '\n' || p == '\r' || p == 0x2028 || p == 0x2029;
}

std::string ToUtf8(std::u32string_view s) {
  std::string out;
  for (char32_t c : s) out += FromCodePoint(c);
  return out;
}

// /^[ \t]*({[#%-])/gm -> "$1": spaces and tabs before a block at the start of a line.
std::u32string LstripBlocks(const std::u32string& s) {
  std::u32string out;
  size_t i = 0;
  while (i < s.size()) {
    if (IsLineStart(s, i)) {
      size_t j = i;
      while (j < s.size() && (s[j] == ' ' || s[j] == '\t')) ++j;
      if (j + 1 < s.size() && s[j] == '{' &&
          (s[j + 1] == '#' || s[j + 1] == '%' || s[j + 1] == '-')) {
        i = j;
      }
    }
    out += s[i++];
  }
  return out;
}

// /([#%-]})\n/g -> "$1": the newline after a block.
std::u32string TrimBlocks(const std::u32string& s) {
  std::u32string out;
  for (size_t i = 0; i < s.size(); ++i) {
    out += s[i];
    if (s[i] == '}' && i >= 1 && (s[i - 1] == '#' || s[i - 1] == '%' || s[i - 1] == '-') &&
        i + 1 < s.size() && s[i + 1] == '\n' && out.size() >= 2) {
      ++i;  // drop the newline
    }
  }
  return out;
}

// Matches {%-? \s* (end)?generation \s* -?%} at `i`; sets the end and the two strip flags.
bool MatchGenerationTag(const std::u32string& s, size_t i, size_t* end, bool* lstrip,
                        bool* rstrip) {
  if (s.compare(i, 2, U"{%") != 0) return false;
  size_t j = i + 2;
  *lstrip = j < s.size() && s[j] == '-';
  if (*lstrip) ++j;
  while (j < s.size() && IsJsWhitespace(s[j])) ++j;
  if (s.compare(j, 3, U"end") == 0 && s.compare(j + 3, 10, U"generation") == 0) j += 3;
  if (s.compare(j, 10, U"generation") != 0) return false;
  j += 10;
  while (j < s.size() && IsJsWhitespace(s[j])) ++j;
  *rstrip = j < s.size() && s[j] == '-';
  if (*rstrip) ++j;
  if (s.compare(j, 2, U"%}") != 0) return false;
  *end = j + 2;
  return true;
}

std::u32string RemoveGenerationTags(const std::u32string& s) {
  std::u32string out;
  size_t done = 0;  // everything before `done` is decided
  size_t i = 0;
  while (i < s.size()) {
    size_t end = 0;
    bool lstrip = false, rstrip = false;
    if (s[i] != '{' || !MatchGenerationTag(s, i, &end, &lstrip, &rstrip)) {
      ++i;
      continue;
    }
    size_t ws_start = i;
    while (ws_start > done && IsJsWhitespace(s[ws_start - 1])) --ws_start;
    size_t ws_end = end;
    while (ws_end < s.size() && IsJsWhitespace(s[ws_end])) ++ws_end;
    out.append(s, done, ws_start - done);
    if (!lstrip) out.append(s, ws_start, i - ws_start);
    if (!rstrip) out.append(s, end, ws_end - end);
    done = i = ws_end;
  }
  out.append(s, done, std::u32string::npos);
  return out;
}

struct Rule {
  std::u32string_view text;
  TokenType type;
};

constexpr std::array<Rule, 29> kRules = {{
    {U"{%", TokenType::kOpenStatement},
    {U"%}", TokenType::kCloseStatement},
    {U"{{", TokenType::kOpenExpression},
    {U"}}", TokenType::kCloseExpression},
    {U"(", TokenType::kOpenParen},
    {U")", TokenType::kCloseParen},
    {U"{", TokenType::kOpenCurlyBracket},
    {U"}", TokenType::kCloseCurlyBracket},
    {U"[", TokenType::kOpenSquareBracket},
    {U"]", TokenType::kCloseSquareBracket},
    {U",", TokenType::kComma},
    {U".", TokenType::kDot},
    {U":", TokenType::kColon},
    {U"|", TokenType::kPipe},
    {U"<=", TokenType::kComparisonBinaryOperator},
    {U">=", TokenType::kComparisonBinaryOperator},
    {U"==", TokenType::kComparisonBinaryOperator},
    {U"!=", TokenType::kComparisonBinaryOperator},
    {U"<", TokenType::kComparisonBinaryOperator},
    {U">", TokenType::kComparisonBinaryOperator},
    {U"+", TokenType::kAdditiveBinaryOperator},
    {U"-", TokenType::kAdditiveBinaryOperator},
    {U"~", TokenType::kAdditiveBinaryOperator},
    {U"**", TokenType::kExponentiationBinaryOperator},
    {U"*", TokenType::kMultiplicativeBinaryOperator},
    {U"//", TokenType::kMultiplicativeBinaryOperator},
    {U"/", TokenType::kMultiplicativeBinaryOperator},
    {U"%", TokenType::kMultiplicativeBinaryOperator},
    {U"=", TokenType::kEquals},
}};

class Lexer {
 public:
  explicit Lexer(std::u32string src) : src_(std::move(src)) {}

  std::vector<Token> Run();

 private:
  char32_t At(size_t i) const { return i < src_.size() ? src_[i] : 0; }
  bool StartsWith(std::u32string_view s) const { return src_.compare(pos_, s.size(), s) == 0; }
  TokenType LastType() const { return tokens_.back().type; }
  std::u16string ConsumeWhile(bool (*predicate)(char32_t, char32_t), char32_t arg);
  void StripTrailingWhitespace();
  void SkipLeadingWhitespace() {
    while (pos_ < src_.size() && IsJsWhitespace(src_[pos_])) ++pos_;
  }
  bool LexText();
  void LexComment();
  bool LexSign(char32_t c);
  void LexNumber();

  std::u32string src_;
  size_t pos_ = 0;
  int curly_depth_ = 0;
  std::vector<Token> tokens_;
};

bool WhitespacePredicate(char32_t c, char32_t) { return IsJsWhitespace(c); }
bool DigitPredicate(char32_t c, char32_t) { return IsDigit(c); }
bool WordPredicate(char32_t c, char32_t) { return IsWordChar(c); }
bool NotQuotePredicate(char32_t c, char32_t quote) { return c != quote; }

void AppendCodePoint(char32_t c, std::u16string& out) {
  if (c >= 0x10000) {
    c -= 0x10000;
    out += static_cast<char16_t>(0xD800 + (c >> 10));
    out += static_cast<char16_t>(0xDC00 + (c & 0x3FF));
  } else {
    out += static_cast<char16_t>(c);
  }
}

char32_t Unescape(char32_t c) {
  switch (c) {
    case 'n':
      return '\n';
    case 't':
      return '\t';
    case 'r':
      return '\r';
    case 'b':
      return '\b';
    case 'f':
      return '\f';
    case 'v':
      return '\v';
    case '\'':
      return '\'';
    case '"':
      return '"';
    case '\\':
      return '\\';
    default:
      return 0xFFFFFFFF;
  }
}

// The reference's consumeWhile: escapes are decoded, and reaching the end of the input after
// consuming a character is an error (so a template cannot end inside a token).
std::u16string Lexer::ConsumeWhile(bool (*predicate)(char32_t, char32_t), char32_t arg) {
  std::u16string out;
  while (pos_ < src_.size() && predicate(src_[pos_], arg)) {
    if (src_[pos_] == '\\') {
      ++pos_;
      if (pos_ >= src_.size()) throw JinjaError{"Unexpected end of input"};
      char32_t escaped = src_[pos_++];
      if (escaped == 'x' || escaped == 'u') {
        size_t length = escaped == 'x' ? 2 : 4;
        unsigned value = 0;
        std::string hex;
        for (size_t k = 0; k < length; ++k) {
          char32_t h = At(pos_ + k);
          int d = (h >= '0' && h <= '9')   ? h - '0'
                  : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                  : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                           : -1;
          if (d < 0 || pos_ + k >= src_.size()) {
            throw JinjaError{"Invalid hexadecimal escape sequence"};
          }
          value = value * 16 + d;
        }
        out += static_cast<char16_t>(value);
        pos_ += length;
        continue;
      }
      char32_t unescaped = Unescape(escaped);
      if (unescaped == 0xFFFFFFFF) {
        throw JinjaError{"Unexpected escaped character: " + FromCodePoint(escaped)};
      }
      out += static_cast<char16_t>(unescaped);
      continue;
    }
    AppendCodePoint(src_[pos_++], out);
    if (pos_ >= src_.size()) throw JinjaError{"Unexpected end of input"};
  }
  return out;
}

void Lexer::StripTrailingWhitespace() {
  if (!tokens_.empty() && LastType() == TokenType::kText) {
    tokens_.back().value = JsTrimEnd(tokens_.back().value);
    if (tokens_.back().value.empty()) tokens_.pop_back();
  }
}

// Text up to the next {% {{ {#, when the previous token ended a tag. True when text was added.
bool Lexer::LexText() {
  if (!tokens_.empty() && LastType() != TokenType::kCloseStatement &&
      LastType() != TokenType::kCloseExpression && LastType() != TokenType::kComment) {
    return false;
  }
  size_t start = pos_;
  while (pos_ < src_.size() && !(src_[pos_] == '{' && (At(pos_ + 1) == '%' || At(pos_ + 1) == '{' ||
                                                       At(pos_ + 1) == '#'))) {
    ++pos_;
  }
  if (pos_ == start) return false;
  tokens_.push_back(
      {ToUtf8(std::u32string_view(src_).substr(start, pos_ - start)), TokenType::kText});
  return true;
}

void Lexer::LexComment() {
  pos_ += 2;
  bool strip_before = At(pos_) == '-';
  if (strip_before) ++pos_;
  std::u32string comment;
  while (At(pos_) != '#' || At(pos_ + 1) != '}') {
    if (pos_ + 2 >= src_.size()) throw JinjaError{"Missing end of comment tag"};
    comment += src_[pos_++];
  }
  bool strip_after = !comment.empty() && comment.back() == '-';
  if (strip_after) comment.pop_back();
  if (strip_before) StripTrailingWhitespace();
  tokens_.push_back({ToUtf8(comment), TokenType::kComment});
  pos_ += 2;
  if (strip_after) SkipLeadingWhitespace();
}

// A '-' or '+' that is a sign (a unary operator, or part of a negative number literal). False
// when it is a binary operator for the rules table.
bool Lexer::LexSign(char32_t c) {
  if (tokens_.empty() || LastType() == TokenType::kText) {
    throw JinjaError{"Unexpected character: " + FromCodePoint(c)};
  }
  switch (LastType()) {
    case TokenType::kIdentifier:
    case TokenType::kNumericLiteral:
    case TokenType::kStringLiteral:
    case TokenType::kCloseParen:
    case TokenType::kCloseSquareBracket:
      return false;
    default:
      break;
  }
  ++pos_;
  std::u16string num = ConsumeWhile(DigitPredicate, 0);
  if (!num.empty() && At(pos_) == '.' && IsDigit(At(pos_ + 1))) {
    ++pos_;
    num += u"." + ConsumeWhile(DigitPredicate, 0);
  }
  std::string text = FromCodePoint(c) + FromUtf16(num);
  tokens_.push_back({text, num.empty() ? TokenType::kUnaryOperator : TokenType::kNumericLiteral});
  return true;
}

void Lexer::LexNumber() {
  std::u16string num = ConsumeWhile(DigitPredicate, 0);
  if ((tokens_.empty() || LastType() != TokenType::kDot) && At(pos_) == '.' &&
      IsDigit(At(pos_ + 1))) {
    ++pos_;
    num += u"." + ConsumeWhile(DigitPredicate, 0);
  }
  tokens_.push_back({FromUtf16(num), TokenType::kNumericLiteral});
}

std::vector<Token> Lexer::Run() {
  while (pos_ < src_.size()) {
    if (LexText()) continue;
    if (StartsWith(U"{#")) {
      LexComment();
      continue;
    }
    if (StartsWith(U"{%-") || StartsWith(U"{{-")) {
      StripTrailingWhitespace();
      bool statement = src_[pos_ + 1] == '%';
      tokens_.push_back({statement ? "{%" : "{{",
                         statement ? TokenType::kOpenStatement : TokenType::kOpenExpression});
      if (!statement) curly_depth_ = 0;
      pos_ += 3;
      continue;
    }
    ConsumeWhile(WhitespacePredicate, 0);
    if (StartsWith(U"-%}") || StartsWith(U"-}}")) {
      bool statement = src_[pos_ + 1] == '%';
      tokens_.push_back({statement ? "%}" : "}}",
                         statement ? TokenType::kCloseStatement : TokenType::kCloseExpression});
      pos_ += 3;
      SkipLeadingWhitespace();
      continue;
    }
    if (pos_ >= src_.size()) break;
    char32_t c = src_[pos_];
    if ((c == '-' || c == '+') && LexSign(c)) continue;
    bool matched = false;
    for (const Rule& rule : kRules) {
      if (rule.text == U"}}" && curly_depth_ > 0) continue;
      if (!StartsWith(rule.text)) continue;
      tokens_.push_back({ToUtf8(rule.text), rule.type});
      if (rule.type == TokenType::kOpenExpression) curly_depth_ = 0;
      if (rule.type == TokenType::kOpenCurlyBracket) ++curly_depth_;
      if (rule.type == TokenType::kCloseCurlyBracket) --curly_depth_;
      pos_ += rule.text.size();
      matched = true;
      break;
    }
    if (matched) continue;
    if (c == '\'' || c == '"') {
      ++pos_;
      std::u16string str = ConsumeWhile(NotQuotePredicate, c);
      tokens_.push_back({FromUtf16(str), TokenType::kStringLiteral});
      ++pos_;
      continue;
    }
    if (IsDigit(c)) {
      LexNumber();
      continue;
    }
    if (IsWordChar(c)) {
      tokens_.push_back({FromUtf16(ConsumeWhile(WordPredicate, 0)), TokenType::kIdentifier});
      continue;
    }
    throw JinjaError{"Unexpected character: " + FromCodePoint(c)};
  }
  return std::move(tokens_);
}

}  // namespace

std::u32string Preprocess(std::u32string source) {
  if (!source.empty() && source.back() == '\n') source.pop_back();
  return RemoveGenerationTags(TrimBlocks(LstripBlocks(source)));
}

std::vector<Token> Tokenize(std::string_view source) {
  std::u32string src;
  for (char32_t c : ToCodePoints(source)) src += c;
  return Lexer(Preprocess(std::move(src))).Run();
}

}  // namespace pagoda::scheduler::text::jinja
