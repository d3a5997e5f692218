// The lexer (lexer.h): one pass over the template, text between tags
// collected and trimmed by the whitespace rules of the tags on either side.
//
// `line_starting` is jinja2's flag of the same name: lstrip_blocks also
// strips at the start of a text run that follows a tag whose match ended
// with a newline (trim_blocks' "\n" or "-%}"'s whitespace), and at the very
// start of the template.
#include "jinja/lexer.h"

#include <cctype>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace octet::jinja {
namespace {

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' ||
         c == '\v';
}

std::string NormalizeNewlines(absl::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

void AppendUtf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xc0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xe0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

// \xhh, \uhhhh, \Uhhhhhhhh at s[i] (the letter); advances i past it.
bool HexEscape(absl::string_view s, size_t& i, std::string& out) {
  size_t n = s[i] == 'x' ? 2 : s[i] == 'u' ? 4 : 8;
  if (i + n >= s.size()) return false;
  uint32_t cp = 0;
  for (size_t k = 1; k <= n; ++k) {
    char c = s[i + k];
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
    cp = cp * 16 +
         static_cast<uint32_t>(
             std::isdigit(static_cast<unsigned char>(c))
                 ? c - '0'
                 : std::tolower(static_cast<unsigned char>(c)) - 'a' + 10);
  }
  if (cp > 0x10ffff) return false;
  AppendUtf8(cp, out);
  i += n;
  return true;
}

// Python's unicode-escape decoding of a string literal's body.
absl::StatusOr<std::string> Unescape(absl::string_view s, int line) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 == s.size()) {
      out += s[i];
      continue;
    }
    char c = s[++i];
    switch (c) {
      case '\n':
        break;
      case '\\':
        out += '\\';
        break;
      case '\'':
        out += '\'';
        break;
      case '"':
        out += '"';
        break;
      case 'a':
        out += '\a';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'v':
        out += '\v';
        break;
      case 'x':
      case 'u':
      case 'U':
        if (!HexEscape(s, i, out)) {
          return TemplateError(
              line, "a string has a malformed \\x, \\u or \\U escape");
        }
        break;
      case 'N':
        return TemplateError(line,
                             "'\\N{...}' string escapes are not supported");
      default:
        if (c >= '0' && c <= '7') {
          uint32_t cp = 0;
          size_t k = 0;
          for (;
               k < 3 && i + k < s.size() && s[i + k] >= '0' && s[i + k] <= '7';
               ++k) {
            cp = cp * 8 + static_cast<uint32_t>(s[i + k] - '0');
          }
          i += k - 1;
          AppendUtf8(cp, out);
        } else {
          out += '\\';
          out += c;
        }
    }
  }
  return out;
}

class Lexer {
 public:
  Lexer(std::string source, const LexOptions& options)
      : src_(std::move(source)), options_(options) {}

  absl::StatusOr<std::vector<Token>> Run();

 private:
  enum class Tag { kVar, kBlock, kComment };
  struct After {
    bool strip = false;  // "-" before the closing delimiter
    bool trim = false;   // trim_blocks applies
  };

  char At(size_t i) const { return i < src_.size() ? src_[i] : '\0'; }
  bool StartsWith(size_t i, absl::string_view s) const {
    return src_.compare(i, s.size(), s.data(), s.size()) == 0;
  }
  void Advance(size_t to) {
    for (; pos_ < to; ++pos_) line_ += src_[pos_] == '\n';
  }
  void EmitText(std::string text, int line, char sign, Tag tag);
  absl::Status LexTag(Tag tag, char sign);
  absl::Status LexComment();
  absl::StatusOr<bool> LexRaw(size_t tag_start, char sign, int text_line,
                              std::string text);
  absl::StatusOr<bool> LexExpressionToken(absl::string_view end, int& depth);
  absl::Status LexString();
  void LexNumber();
  void CloseTag(char closing_sign, Tag tag, size_t end);

  std::string src_;
  LexOptions options_;
  size_t pos_ = 0;
  int line_ = 1;
  After after_;
  bool line_starting_ = true;
  std::vector<Token> tokens_;
};

// Text before a tag: the previous tag's trailing rule, then this tag's
// leading one.
void Lexer::EmitText(std::string text, int line, char sign, Tag tag) {
  if (sign == '-') {
    size_t end = text.size();
    while (end > 0 && IsSpace(text[end - 1])) --end;
    text.resize(end);
  } else if (sign != '+' && options_.lstrip_blocks && tag != Tag::kVar) {
    size_t l_pos = text.rfind('\n');
    l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
    bool all_space = l_pos < text.size();
    for (size_t i = l_pos; i < text.size(); ++i) all_space &= IsSpace(text[i]);
    if ((l_pos > 0 || line_starting_) && all_space) text.resize(l_pos);
  }
  if (!text.empty())
    tokens_.push_back({Token::Type::kText, std::move(text), line});
}

// The previous tag's trailing rule on the text run starting at pos_.
std::string TrimAfter(std::string text, bool strip, bool trim,
                      bool& line_starting) {
  if (strip) {
    size_t n = 0;
    while (n < text.size() && IsSpace(text[n])) ++n;
    line_starting = line_starting || (n > 0 && text[n - 1] == '\n');
    return text.substr(n);
  }
  if (trim && !text.empty() && text[0] == '\n') {
    line_starting = true;
    return text.substr(1);
  }
  return text;
}

absl::StatusOr<std::vector<Token>> Lexer::Run() {
  while (pos_ <= src_.size()) {
    size_t next = src_.find('{', pos_);
    while (next != std::string::npos) {
      char c = At(next + 1);
      if (c == '{' || c == '%' || c == '#') break;
      next = src_.find('{', next + 1);
    }
    size_t text_end = next == std::string::npos ? src_.size() : next;
    int text_line = line_;
    std::string text = TrimAfter(src_.substr(pos_, text_end - pos_),
                                 after_.strip, after_.trim, line_starting_);
    Advance(text_end);
    if (next == std::string::npos) {
      if (!text.empty())
        tokens_.push_back({Token::Type::kText, text, text_line});
      break;
    }
    char kind = At(next + 1);
    char sign =
        At(next + 2) == '-' || At(next + 2) == '+' ? At(next + 2) : '\0';
    Tag tag = kind == '{'   ? Tag::kVar
              : kind == '%' ? Tag::kBlock
                            : Tag::kComment;
    if (tag == Tag::kBlock) {
      auto raw = LexRaw(next, sign, text_line, text);
      if (!raw.ok()) return raw.status();
      if (*raw) continue;
    }
    EmitText(std::move(text), text_line, sign, tag);
    Advance(next + 2 + (sign ? 1 : 0));
    absl::Status s = tag == Tag::kComment ? LexComment() : LexTag(tag, sign);
    if (!s.ok()) return s;
  }
  tokens_.push_back({Token::Type::kEof, "", line_});
  return std::move(tokens_);
}

void Lexer::CloseTag(char closing_sign, Tag tag, size_t end) {
  after_.strip = closing_sign == '-';
  after_.trim = options_.trim_blocks && tag != Tag::kVar && closing_sign != '+';
  line_starting_ = false;
  Advance(end);
}

absl::Status Lexer::LexComment() {
  int line = line_;
  size_t end = src_.find("#}", pos_);
  if (end == std::string::npos)
    return TemplateError(line, "a comment '{#' is never closed");
  char sign = end > pos_ && (src_[end - 1] == '-' || src_[end - 1] == '+')
                  ? src_[end - 1]
                  : '\0';
  CloseTag(sign, Tag::kComment, end + 2);
  return absl::OkStatus();
}

absl::Status Lexer::LexTag(Tag tag, char sign) {
  (void)sign;
  int line = line_;
  tokens_.push_back(
      {tag == Tag::kVar ? Token::Type::kVarBegin : Token::Type::kBlockBegin, "",
       line});
  absl::string_view end = tag == Tag::kVar ? "}}" : "%}";
  int depth = 0;
  while (true) {
    auto closed = LexExpressionToken(end, depth);
    if (!closed.ok()) return closed.status();
    if (*closed) break;
  }
  return absl::OkStatus();
}

// One token inside a tag; true when it was the closing delimiter.
absl::StatusOr<bool> Lexer::LexExpressionToken(absl::string_view end,
                                               int& depth) {
  while (pos_ < src_.size() && IsSpace(src_[pos_])) Advance(pos_ + 1);
  if (pos_ >= src_.size()) {
    return TemplateError(
        line_, absl::StrCat("a tag is never closed with '", end, "'"));
  }
  Token::Type end_type =
      end == "}}" ? Token::Type::kVarEnd : Token::Type::kBlockEnd;
  Tag tag = end == "}}" ? Tag::kVar : Tag::kBlock;
  if (depth == 0) {
    for (char sign : {'-', '+'}) {
      if (At(pos_) == sign && StartsWith(pos_ + 1, end) &&
          (sign == '-' || tag == Tag::kBlock)) {
        tokens_.push_back({end_type, "", line_});
        CloseTag(sign, tag, pos_ + 1 + end.size());
        return true;
      }
    }
    if (StartsWith(pos_, end)) {
      tokens_.push_back({end_type, "", line_});
      CloseTag('\0', tag, pos_ + end.size());
      return true;
    }
  }
  char c = src_[pos_];
  if (c == '\'' || c == '"') {
    auto s = LexString();
    if (!s.ok()) return s;
    return false;
  }
  if (std::isdigit(static_cast<unsigned char>(c))) {
    LexNumber();
    return false;
  }
  if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
    size_t e = pos_;
    while (
        e < src_.size() &&
        (std::isalnum(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) {
      ++e;
    }
    tokens_.push_back({Token::Type::kName, src_.substr(pos_, e - pos_), line_});
    Advance(e);
    return false;
  }
  static constexpr absl::string_view kOps[] = {
      "//", "**", "==", "!=", "<=", ">=", "+", "-", "/", "*", "%", "~", "[",
      "]",  "(",  ")",  "{",  "}",  "<",  ">", "=", ".", ":", "|", ",", ";"};
  for (absl::string_view op : kOps) {
    if (!StartsWith(pos_, op)) continue;
    if (op == "(" || op == "[" || op == "{") ++depth;
    if ((op == ")" || op == "]" || op == "}") && depth > 0) --depth;
    tokens_.push_back({Token::Type::kOp, std::string(op), line_});
    Advance(pos_ + op.size());
    return false;
  }
  return TemplateError(
      line_, absl::StrCat("unexpected character '", std::string(1, c), "'"));
}

absl::Status Lexer::LexString() {
  char quote = src_[pos_];
  int line = line_;
  size_t i = pos_ + 1;
  while (i < src_.size() && src_[i] != quote) i += src_[i] == '\\' ? 2 : 1;
  if (i >= src_.size())
    return TemplateError(line, "a string literal is never closed");
  auto value =
      Unescape(absl::string_view(src_).substr(pos_ + 1, i - pos_ - 1), line);
  if (!value.ok()) return value.status();
  tokens_.push_back({Token::Type::kString, *std::move(value), line});
  Advance(i + 1);
  return absl::OkStatus();
}

void Lexer::LexNumber() {
  auto digits = [&](size_t i) {
    while (i < src_.size() &&
           (std::isdigit(static_cast<unsigned char>(src_[i])) ||
            (src_[i] == '_' && i + 1 < src_.size() &&
             std::isdigit(static_cast<unsigned char>(src_[i + 1]))))) {
      ++i;
    }
    return i;
  };
  size_t e = digits(pos_);
  bool after_dot = !tokens_.empty() &&
                   tokens_.back().type == Token::Type::kOp &&
                   tokens_.back().value == ".";
  bool is_float = false;
  if (!after_dot && At(e) == '.' &&
      std::isdigit(static_cast<unsigned char>(At(e + 1)))) {
    e = digits(e + 1);
    is_float = true;
  }
  if (!after_dot && (At(e) == 'e' || At(e) == 'E')) {
    size_t k = e + 1 + (At(e + 1) == '+' || At(e + 1) == '-');
    if (std::isdigit(static_cast<unsigned char>(At(k)))) {
      e = digits(k);
      is_float = true;
    }
  }
  std::string text;
  for (size_t i = pos_; i < e; ++i) {
    if (src_[i] != '_') text += src_[i];
  }
  tokens_.push_back(
      {is_float ? Token::Type::kFloat : Token::Type::kInt, text, line_});
  Advance(e);
}

// {% raw %}...{% endraw %} at tag_start: one text token; false when the
// tag is not raw.
absl::StatusOr<bool> Lexer::LexRaw(size_t tag_start, char sign, int text_line,
                                   std::string text) {
  size_t i = tag_start + 2 + (sign ? 1 : 0);
  while (IsSpace(At(i))) ++i;
  if (!StartsWith(i, "raw")) return false;
  i += 3;
  while (IsSpace(At(i))) ++i;
  char close_sign = At(i) == '-' || At(i) == '+' ? At(i) : '\0';
  size_t close = i + (close_sign ? 1 : 0);
  if (!StartsWith(close, "%}")) return false;
  EmitText(std::move(text), text_line, sign, Tag::kBlock);
  Advance(close + 2);
  line_starting_ = false;
  int line = line_;
  // Find {%[-+]? endraw [-+]?%}.
  for (size_t at = src_.find("{%", pos_); at != std::string::npos;
       at = src_.find("{%", at + 2)) {
    size_t k = at + 2;
    char end_sign = At(k) == '-' || At(k) == '+' ? At(k) : '\0';
    if (end_sign) ++k;
    while (IsSpace(At(k))) ++k;
    if (!StartsWith(k, "endraw")) continue;
    k += 6;
    while (IsSpace(At(k))) ++k;
    char final_sign = At(k) == '-' || At(k) == '+' ? At(k) : '\0';
    if (!StartsWith(k + (final_sign ? 1 : 0), "%}")) continue;
    std::string body = TrimAfter(src_.substr(pos_, at - pos_),
                                 close_sign == '-', false, line_starting_);
    Advance(at);
    EmitText(std::move(body), line, end_sign, Tag::kBlock);
    CloseTag(final_sign, Tag::kBlock, k + (final_sign ? 1 : 0) + 2);
    return true;
  }
  return TemplateError(line, "'{% raw %}' is never closed with '{% endraw %}'");
}

}  // namespace

absl::Status TemplateError(int line, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("chat template line ", line, ": ", what));
}

absl::StatusOr<std::vector<Token>> Lex(absl::string_view source,
                                       const LexOptions& options) {
  return Lexer(NormalizeNewlines(source), options).Run();
}

}  // namespace octet::jinja
