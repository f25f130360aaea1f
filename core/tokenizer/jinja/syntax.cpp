// The lexer and parser, with jinja2's rules where output depends on them:
// trim_blocks and lstrip_blocks as transformers sets them, '-'/'+' whitespace
// control, one trailing newline of the source dropped, newlines normalized,
// and operator precedence as jinja2's parser has it.

#include "core/tokenizer/jinja/syntax.h"

#include <cstdint>
#include <cstdlib>
#include <initializer_list>

#include <fmt/format.h>

#include "core/tokenizer/jinja/template.h"
#include "core/tokenizer/utf8.h"

namespace pagedllm::jinja {
namespace {

// Deeper nesting than any real template, shallow enough for the parser's recursion.
constexpr int kMaxNesting = 200;

struct Token {
  enum class Type { kText, kVariableBegin, kVariableEnd, kBlockBegin, kBlockEnd, kName, kString, kInt, kFloat,
                    kOperator, kEnd };
  Type type;
  std::string text;
  int line;
  std::int64_t int_value = 0;
  double float_value = 0;
};

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::string rstrip(std::string_view text) {
  std::size_t end = text.size();
  while (end > 0 && is_space(text[end - 1])) --end;
  return std::string(text.substr(0, end));
}

class Lexer {
 public:
  explicit Lexer(std::string_view raw) {
    source_.reserve(raw.size());
    for (std::size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] == '\r') {
        source_ += '\n';
        if (i + 1 < raw.size() && raw[i + 1] == '\n') ++i;
      } else {
        source_ += raw[i];
      }
    }
    if (!source_.empty() && source_.back() == '\n') source_.pop_back();  // keep_trailing_newline=False
  }

  std::vector<Token> run() {
    bool line_starting = true;
    while (pos_ < source_.size()) {
      const std::size_t start = next_tag(pos_);
      std::string text = source_.substr(pos_, start - pos_);
      if (start == source_.size()) {
        emit_text(std::move(text));
        pos_ = start;
        break;
      }
      const char kind = source_[start + 1];
      const char sign = start + 2 < source_.size() ? source_[start + 2] : '\0';
      if (sign == '-') {
        text = rstrip(text);
      } else if (sign != '+' && kind != '{') {
        const std::size_t line_begin = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
        if (line_begin > 0 || line_starting) {
          bool blank = line_begin < text.size();
          for (std::size_t i = line_begin; i < text.size(); ++i) blank = blank && is_space(text[i]);
          if (blank) text.resize(line_begin);
        }
      }
      emit_text(std::move(text));
      advance_to(start);
      pos_ = start + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
      if (kind == '#') {
        skip_comment();
      } else {
        expression(kind == '{');
      }
      line_starting = pos_ > 0 && source_[pos_ - 1] == '\n';
    }
    tokens_.push_back({Token::Type::kEnd, "", line_});
    return std::move(tokens_);
  }

 private:
  std::size_t next_tag(std::size_t from) const {
    for (std::size_t i = from; i + 1 < source_.size(); ++i) {
      if (source_[i] == '{' && (source_[i + 1] == '{' || source_[i + 1] == '%' || source_[i + 1] == '#')) return i;
    }
    return source_.size();
  }

  void advance_to(std::size_t to) {
    for (std::size_t i = line_pos_; i < to; ++i) line_ += source_[i] == '\n';
    line_pos_ = to;
  }

  void emit_text(std::string text) {
    if (!text.empty()) tokens_.push_back({Token::Type::kText, std::move(text), line_});
  }

  [[noreturn]] void fail(const std::string& message) const { throw TemplateError(message, line_); }

  // After a block or comment end: trim_blocks drops one newline; '-' drops all whitespace.
  void after_end(bool strip, bool keep) {
    if (strip) {
      while (pos_ < source_.size() && is_space(source_[pos_])) ++pos_;
    } else if (!keep && pos_ < source_.size() && source_[pos_] == '\n') {
      ++pos_;
    }
    advance_to(pos_);
  }

  void skip_comment() {
    const std::size_t end = source_.find("#}", pos_);
    if (end == std::string::npos) fail("missing end of comment tag");
    const bool strip = end > pos_ && source_[end - 1] == '-';
    const bool keep = end > pos_ && source_[end - 1] == '+';
    pos_ = end + 2;
    after_end(strip, keep);
  }

  void expression(bool variable) {
    tokens_.push_back({variable ? Token::Type::kVariableBegin : Token::Type::kBlockBegin, "", line_});
    std::vector<char> open;  // brackets: inside them an end delimiter is not one (as jinja2's balancing)
    while (true) {
      while (pos_ < source_.size() && is_space(source_[pos_])) ++pos_;
      advance_to(pos_);
      if (pos_ >= source_.size()) fail(variable ? "unexpected end of template, expected '}}'"
                                                : "unexpected end of template, expected '%}'");
      const std::string_view rest = std::string_view(source_).substr(pos_);
      if (open.empty()) {
        if (variable && (rest.starts_with("}}") || rest.starts_with("-}}"))) {
          const bool strip = rest[0] == '-';
          pos_ += strip ? 3 : 2;
          tokens_.push_back({Token::Type::kVariableEnd, "", line_});
          if (strip) after_end(true, true);
          return;
        }
        if (!variable && (rest.starts_with("%}") || rest.starts_with("-%}") || rest.starts_with("+%}"))) {
          const bool strip = rest[0] == '-';
          const bool keep = rest[0] == '+';
          pos_ += rest[0] == '%' ? 2 : 3;
          tokens_.push_back({Token::Type::kBlockEnd, "", line_});
          after_end(strip, keep);
          return;
        }
      }
      const char c = source_[pos_];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        std::size_t end = pos_;
        while (end < source_.size() && (std::isalnum(static_cast<unsigned char>(source_[end])) || source_[end] == '_')) ++end;
        tokens_.push_back({Token::Type::kName, source_.substr(pos_, end - pos_), line_});
        pos_ = end;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        number();
      } else if (c == '\'' || c == '"') {
        string_literal(c);
      } else {
        static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", "<=", ">="};
        std::string op;
        for (auto two : kTwo) {
          if (rest.starts_with(two)) op = two;
        }
        if (op.empty()) {
          if (std::string_view("+-*/%~<>=()[]{},.:|").find(c) == std::string_view::npos) {
            fail(fmt::format("unexpected character '{}'", c));
          }
          op = std::string(1, c);
          if (c == '(' || c == '[' || c == '{') {
            if (open.size() >= static_cast<std::size_t>(kMaxNesting)) fail("brackets nested too deeply");
            open.push_back(c);
          } else if (c == ')' || c == ']' || c == '}') {
            const char expected = c == ')' ? '(' : c == ']' ? '[' : '{';
            if (open.empty() || open.back() != expected) fail(fmt::format("unexpected '{}'", c));
            open.pop_back();
          }
        }
        tokens_.push_back({Token::Type::kOperator, op, line_});
        pos_ += op.size();
      }
    }
  }

  void number() {
    std::size_t end = pos_;
    auto digits = [&] {
      while (end < source_.size() && (std::isdigit(static_cast<unsigned char>(source_[end])) || source_[end] == '_')) ++end;
    };
    digits();
    bool is_float = false;
    if (end + 1 < source_.size() && source_[end] == '.' && std::isdigit(static_cast<unsigned char>(source_[end + 1]))) {
      is_float = true;
      ++end;
      digits();
    }
    if (end < source_.size() && (source_[end] == 'e' || source_[end] == 'E')) {
      std::size_t exponent = end + 1;
      if (exponent < source_.size() && (source_[exponent] == '+' || source_[exponent] == '-')) ++exponent;
      if (exponent < source_.size() && std::isdigit(static_cast<unsigned char>(source_[exponent]))) {
        is_float = true;
        end = exponent;
        digits();
      }
    }
    std::string text;
    for (std::size_t i = pos_; i < end; ++i) {
      if (source_[i] != '_') text += source_[i];
    }
    Token token{is_float ? Token::Type::kFloat : Token::Type::kInt, text, line_};
    if (is_float) {
      token.float_value = std::strtod(text.c_str(), nullptr);
    } else {
      errno = 0;
      token.int_value = std::strtoll(text.c_str(), nullptr, 10);
      if (errno == ERANGE) fail(fmt::format("integer literal {} is out of range", text));
    }
    tokens_.push_back(std::move(token));
    pos_ = end;
  }

  void string_literal(char quote) {
    std::string value;
    std::size_t i = pos_ + 1;
    const int line = line_;
    while (true) {
      if (i >= source_.size()) fail("unterminated string literal");
      const char c = source_[i];
      if (c == quote) break;
      if (c != '\\') {
        value += c;
        ++i;
        continue;
      }
      if (i + 1 >= source_.size()) fail("unterminated string literal");
      const char e = source_[i + 1];
      i += 2;
      auto hex = [&](int count) {
        if (i + static_cast<std::size_t>(count) > source_.size()) fail("truncated escape in a string literal");
        char32_t cp = 0;
        for (int k = 0; k < count; ++k) {
          const char h = source_[i++];
          if (!std::isxdigit(static_cast<unsigned char>(h))) fail("bad escape in a string literal");
          cp = cp * 16 + static_cast<char32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
        }
        if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) fail("bad code point in a string literal");
        tokenizer::utf8::append(value, cp);
      };
      switch (e) {
        case 'n': value += '\n'; break;
        case 't': value += '\t'; break;
        case 'r': value += '\r'; break;
        case '\\': value += '\\'; break;
        case '\'': value += '\''; break;
        case '"': value += '"'; break;
        case 'a': value += '\a'; break;
        case 'b': value += '\b'; break;
        case 'f': value += '\f'; break;
        case 'v': value += '\v'; break;
        case '0': value += '\0'; break;
        case '\n': break;  // a line continuation
        case 'x': hex(2); break;
        case 'u': hex(4); break;
        case 'U': hex(8); break;
        default:  // Python keeps an unknown escape as written
          value += '\\';
          value += e;
      }
    }
    tokens_.push_back({Token::Type::kString, std::move(value), line});
    pos_ = i + 1;
    advance_to(pos_);
  }

  std::string source_;
  std::size_t pos_ = 0;
  std::size_t line_pos_ = 0;
  int line_ = 1;
  std::vector<Token> tokens_;
};

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  NodePtr parse() {
    auto root = std::make_unique<Node>();
    root->type = Node::Type::kTemplate;
    root->body = statements({});
    if (peek().type != Token::Type::kEnd) fail("unexpected tag");
    return root;
  }

 private:
  const Token& peek(std::size_t ahead = 0) const {
    return tokens_[std::min(index_ + ahead, tokens_.size() - 1)];
  }
  const Token& next() {
    const Token& t = tokens_[index_];
    if (index_ + 1 < tokens_.size()) ++index_;
    return t;
  }
  [[noreturn]] void fail(const std::string& message) const { throw TemplateError(message, peek().line); }

  bool at_operator(std::string_view op) const {
    return peek().type == Token::Type::kOperator && peek().text == op;
  }
  bool at_name(std::string_view name) const { return peek().type == Token::Type::kName && peek().text == name; }
  void expect_operator(std::string_view op) {
    if (!at_operator(op)) fail(fmt::format("expected '{}', got {}", op, describe(peek())));
    next();
  }
  std::string expect_name() {
    if (peek().type != Token::Type::kName) fail(fmt::format("expected a name, got {}", describe(peek())));
    return next().text;
  }
  void expect_block_end() {
    if (peek().type != Token::Type::kBlockEnd) fail(fmt::format("expected end of statement block, got {}", describe(peek())));
    next();
  }
  static std::string describe(const Token& t) {
    if (t.type == Token::Type::kEnd) return "end of template";
    if (t.type == Token::Type::kBlockEnd) return "'%}'";
    if (t.type == Token::Type::kVariableEnd) return "'}}'";
    if (t.type == Token::Type::kString) return "a string";
    if (t.type == Token::Type::kText) return "text";
    return "'" + t.text + "'";
  }

  struct DepthGuard {
    explicit DepthGuard(Parser& p) : parser(p) {
      if (++parser.depth_ > kMaxNesting) parser.fail("template nested too deeply");
    }
    ~DepthGuard() { --parser.depth_; }
    Parser& parser;
  };

  // Nodes up to a block tag whose first name is one of `ends` (left unread).
  Body statements(std::initializer_list<std::string_view> ends) {
    DepthGuard guard(*this);
    Body body;
    while (true) {
      const Token& t = peek();
      if (t.type == Token::Type::kEnd) {
        if (ends.size() > 0) fail(fmt::format("unexpected end of template, expected '{}'", *(ends.end() - 1)));
        return body;
      }
      if (t.type == Token::Type::kText) {
        auto node = std::make_unique<Node>();
        node->type = Node::Type::kText;
        node->line = t.line;
        node->text = next().text;
        body.push_back(std::move(node));
      } else if (t.type == Token::Type::kVariableBegin) {
        next();
        auto node = std::make_unique<Node>();
        node->type = Node::Type::kOutput;
        node->line = t.line;
        node->value = expression();
        if (peek().type != Token::Type::kVariableEnd) fail(fmt::format("expected '}}}}', got {}", describe(peek())));
        next();
        body.push_back(std::move(node));
      } else if (t.type == Token::Type::kBlockBegin) {
        const Token& tag = peek(1);
        if (tag.type == Token::Type::kName) {
          for (auto end : ends) {
            if (tag.text == end) return body;
          }
        }
        next();
        body.push_back(statement());
      } else {
        fail(fmt::format("unexpected {}", describe(t)));
      }
    }
  }

  // Consumes "{% name" of a closing tag the caller expects next.
  void open_tag(std::string_view name) {
    next();  // block begin
    if (!at_name(name)) fail(fmt::format("expected '{}'", name));
    next();
  }

  NodePtr statement() {
    const int line = peek().line;
    const std::string tag = expect_name();
    auto node = std::make_unique<Node>();
    node->line = line;
    if (tag == "if") {
      node->type = Node::Type::kIf;
      ExprPtr condition = expression();
      expect_block_end();
      while (true) {
        Body body = statements({"elif", "else", "endif"});
        node->branches.emplace_back(std::move(condition), std::move(body));
        next();
        const std::string which = next().text;
        if (which == "elif") {
          condition = expression();
          expect_block_end();
          continue;
        }
        if (which == "else") {
          expect_block_end();
          node->else_body = statements({"endif"});
          open_tag("endif");
        }
        expect_block_end();
        return node;
      }
    }
    if (tag == "for") {
      node->type = Node::Type::kFor;
      node->targets.push_back(expect_name());
      while (at_operator(",")) {
        next();
        node->targets.push_back(expect_name());
      }
      if (!at_name("in")) fail("expected 'in' in a for loop");
      next();
      node->value = expression(/*with_condition=*/false);
      if (at_name("if")) {
        next();
        node->condition = expression();
      }
      if (at_name("recursive")) fail("recursive for loops are not supported");
      expect_block_end();
      node->body = statements({"else", "endfor"});
      if (at_name_of_tag("else")) {
        open_tag("else");
        expect_block_end();
        node->else_body = statements({"endfor"});
      }
      open_tag("endfor");
      expect_block_end();
      return node;
    }
    if (tag == "set") {
      const std::string first = expect_name();
      if (at_operator(".")) {
        next();
        node->type = Node::Type::kSet;
        node->attribute_owner = first;
        node->attribute = expect_name();
        expect_operator("=");
        node->value = expression();
        expect_block_end();
        return node;
      }
      node->targets.push_back(first);
      while (at_operator(",")) {
        next();
        node->targets.push_back(expect_name());
      }
      if (at_operator("=")) {
        next();
        node->type = Node::Type::kSet;
        node->value = expression();
        expect_block_end();
        return node;
      }
      if (node->targets.size() != 1) fail("a block set assigns one name");
      node->type = Node::Type::kSetBlock;
      if (at_operator("|")) node->value = filter_chain(nullptr);
      expect_block_end();
      node->body = statements({"endset"});
      open_tag("endset");
      expect_block_end();
      return node;
    }
    if (tag == "macro") {
      node->type = Node::Type::kMacro;
      node->name = expect_name();
      expect_operator("(");
      while (!at_operator(")")) {
        std::string parameter = expect_name();
        ExprPtr default_value;
        if (at_operator("=")) {
          next();
          default_value = expression();
        }
        node->parameters.emplace_back(std::move(parameter), std::move(default_value));
        if (!at_operator(")")) expect_operator(",");
      }
      next();
      expect_block_end();
      node->body = statements({"endmacro"});
      open_tag("endmacro");
      if (peek().type == Token::Type::kName) next();  // {% endmacro name %}
      expect_block_end();
      return node;
    }
    if (tag == "break" || tag == "continue") {
      node->type = tag == "break" ? Node::Type::kBreak : Node::Type::kContinue;
      expect_block_end();
      return node;
    }
    if (tag == "filter") {
      node->type = Node::Type::kFilterBlock;
      node->value = filter_chain(nullptr, /*first_without_bar=*/true);
      expect_block_end();
      node->body = statements({"endfilter"});
      open_tag("endfilter");
      expect_block_end();
      return node;
    }
    if (tag == "generation") {  // transformers' AssistantTracker: renders its body as it is
      node->type = Node::Type::kIf;
      auto always = std::make_unique<Expr>();
      always->type = Expr::Type::kLiteral;
      always->literal = Value(true);
      expect_block_end();
      node->branches.emplace_back(std::move(always), statements({"endgeneration"}));
      open_tag("endgeneration");
      expect_block_end();
      return node;
    }
    throw TemplateError(fmt::format("unknown tag '{}'", tag), line);
  }

  bool at_name_of_tag(std::string_view name) const {
    return peek().type == Token::Type::kBlockBegin && peek(1).type == Token::Type::kName && peek(1).text == name;
  }

  ExprPtr make(Expr::Type type, int line) {
    auto e = std::make_unique<Expr>();
    e->type = type;
    e->line = line;
    return e;
  }

  ExprPtr binary(std::string op, ExprPtr left, ExprPtr right, int line) {
    auto e = make(Expr::Type::kBinary, line);
    e->name = std::move(op);
    e->operands.push_back(std::move(left));
    e->operands.push_back(std::move(right));
    return e;
  }

  ExprPtr expression(bool with_condition = true) {
    DepthGuard guard(*this);
    ExprPtr value = or_expression();
    while (with_condition && at_name("if")) {
      const int line = next().line;
      auto e = make(Expr::Type::kCondition, line);
      e->operands.push_back(std::move(value));
      e->operands.push_back(or_expression());
      if (at_name("else")) {
        next();
        e->operands.push_back(expression());
      } else {
        e->operands.push_back(nullptr);
      }
      value = std::move(e);
    }
    return value;
  }

  ExprPtr or_expression() {
    ExprPtr left = and_expression();
    while (at_name("or")) {
      const int line = next().line;
      left = binary("or", std::move(left), and_expression(), line);
    }
    return left;
  }

  ExprPtr and_expression() {
    ExprPtr left = not_expression();
    while (at_name("and")) {
      const int line = next().line;
      left = binary("and", std::move(left), not_expression(), line);
    }
    return left;
  }

  ExprPtr not_expression() {
    if (at_name("not")) {
      DepthGuard guard(*this);
      const int line = next().line;
      auto e = make(Expr::Type::kUnary, line);
      e->name = "not";
      e->operands.push_back(not_expression());
      return e;
    }
    return compare();
  }

  ExprPtr compare() {
    ExprPtr left = math1();
    // jinja2 chains comparisons (a < b < c) as Python does; templates use single ones,
    // and a chain is read as the conjunction of its pairs.
    ExprPtr chained;
    while (true) {
      const int line = peek().line;
      std::string op;
      if (peek().type == Token::Type::kOperator &&
          (peek().text == "==" || peek().text == "!=" || peek().text == "<" || peek().text == ">" ||
           peek().text == "<=" || peek().text == ">=")) {
        op = next().text;
      } else if (at_name("in")) {
        next();
        op = "in";
      } else if (at_name("not") && peek(1).type == Token::Type::kName && peek(1).text == "in") {
        next();
        next();
        op = "not in";
      } else {
        break;
      }
      ExprPtr right = math1();
      if (!chained) {
        chained = binary(op, std::move(left), std::move(right), line);
        continue;
      }
      fail("chained comparisons are not supported");
    }
    return chained ? std::move(chained) : std::move(left);
  }

  ExprPtr math1() {
    ExprPtr left = concat();
    while (at_operator("+") || at_operator("-")) {
      const Token& t = next();
      left = binary(t.text, std::move(left), concat(), t.line);
    }
    return left;
  }

  ExprPtr concat() {
    ExprPtr left = math2();
    while (at_operator("~")) {
      const int line = next().line;
      left = binary("~", std::move(left), math2(), line);
    }
    return left;
  }

  ExprPtr math2() {
    ExprPtr left = power();
    while (at_operator("*") || at_operator("/") || at_operator("//") || at_operator("%")) {
      const Token& t = next();
      left = binary(t.text, std::move(left), power(), t.line);
    }
    return left;
  }

  ExprPtr power() {
    ExprPtr left = unary();
    while (at_operator("**")) {
      const int line = next().line;
      left = binary("**", std::move(left), unary(), line);
    }
    return left;
  }

  ExprPtr unary(bool with_filter = true) {
    DepthGuard guard(*this);
    ExprPtr value;
    if (at_operator("-") || at_operator("+")) {
      const Token& t = next();
      value = make(Expr::Type::kUnary, t.line);
      value->name = t.text;
      value->operands.push_back(unary(false));
    } else {
      value = postfix(primary());
    }
    return with_filter ? filter_expression(std::move(value)) : std::move(value);
  }

  ExprPtr primary() {
    const Token& t = peek();
    const int line = t.line;
    if (t.type == Token::Type::kName) {
      next();
      auto e = make(Expr::Type::kLiteral, line);
      if (t.text == "true" || t.text == "True") {
        e->literal = Value(true);
      } else if (t.text == "false" || t.text == "False") {
        e->literal = Value(false);
      } else if (t.text == "none" || t.text == "None") {
        e->literal = Value::none();
      } else {
        e->type = Expr::Type::kName;
        e->name = t.text;
      }
      return e;
    }
    if (t.type == Token::Type::kString) {
      std::string text = next().text;
      while (peek().type == Token::Type::kString) text += next().text;  // adjacent literals join
      auto e = make(Expr::Type::kLiteral, line);
      e->literal = Value(std::move(text));
      return e;
    }
    if (t.type == Token::Type::kInt || t.type == Token::Type::kFloat) {
      next();
      auto e = make(Expr::Type::kLiteral, line);
      e->literal = t.type == Token::Type::kInt ? Value(t.int_value) : Value(t.float_value);
      return e;
    }
    if (at_operator("(")) {
      next();
      if (at_operator(")")) {
        next();
        return make(Expr::Type::kTuple, line);
      }
      ExprPtr first = expression();
      if (!at_operator(",")) {
        expect_operator(")");
        return first;
      }
      auto e = make(Expr::Type::kTuple, line);
      e->operands.push_back(std::move(first));
      while (at_operator(",")) {
        next();
        if (at_operator(")")) break;
        e->operands.push_back(expression());
      }
      expect_operator(")");
      return e;
    }
    if (at_operator("[")) {
      next();
      auto e = make(Expr::Type::kList, line);
      while (!at_operator("]")) {
        e->operands.push_back(expression());
        if (!at_operator("]")) expect_operator(",");
      }
      next();
      return e;
    }
    if (at_operator("{")) {
      next();
      auto e = make(Expr::Type::kDict, line);
      while (!at_operator("}")) {
        e->operands.push_back(expression());
        expect_operator(":");
        e->operands.push_back(expression());
        if (!at_operator("}")) expect_operator(",");
      }
      next();
      return e;
    }
    fail(fmt::format("unexpected {}", describe(t)));
  }

  ExprPtr postfix(ExprPtr value) {
    while (true) {
      const int line = peek().line;
      if (at_operator(".")) {
        next();
        auto e = make(Expr::Type::kAttribute, line);
        if (peek().type == Token::Type::kInt) {  // foo.0 is foo[0] in jinja2
          e->type = Expr::Type::kItem;
          e->operands.push_back(std::move(value));
          auto index = make(Expr::Type::kLiteral, line);
          index->literal = Value(next().int_value);
          e->operands.push_back(std::move(index));
        } else {
          e->name = expect_name();
          e->operands.push_back(std::move(value));
        }
        value = std::move(e);
      } else if (at_operator("[")) {
        next();
        value = subscript(std::move(value), line);
      } else if (at_operator("(")) {
        value = call(std::move(value), line);
      } else {
        return value;
      }
    }
  }

  ExprPtr subscript(ExprPtr target, int line) {
    ExprPtr parts[3];
    int part = 0;
    bool slice = false;
    while (!at_operator("]")) {
      if (at_operator(":")) {
        next();
        slice = true;
        if (++part > 2) fail("a slice has at most three parts");
        continue;
      }
      if (parts[part]) fail("expected ']'");
      parts[part] = expression();
    }
    next();
    if (!slice) {
      if (!parts[0]) fail("expected a subscript");
      auto e = make(Expr::Type::kItem, line);
      e->operands.push_back(std::move(target));
      e->operands.push_back(std::move(parts[0]));
      return e;
    }
    auto e = make(Expr::Type::kSlice, line);
    e->operands.push_back(std::move(target));
    for (auto& p : parts) e->operands.push_back(std::move(p));
    return e;
  }

  void arguments(Expr& e) {
    expect_operator("(");
    while (!at_operator(")")) {
      if (peek().type == Token::Type::kName && peek(1).type == Token::Type::kOperator && peek(1).text == "=") {
        std::string name = next().text;
        next();
        e.keywords.emplace_back(std::move(name), expression());
      } else {
        if (!e.keywords.empty()) fail("a positional argument follows a keyword argument");
        e.operands.push_back(expression());
      }
      if (!at_operator(")")) expect_operator(",");
    }
    next();
  }

  ExprPtr call(ExprPtr callee, int line) {
    auto e = make(Expr::Type::kCall, line);
    e->operands.push_back(std::move(callee));
    arguments(*e);
    return e;
  }

  ExprPtr filter_expression(ExprPtr value) {
    while (true) {
      if (at_operator("|")) {
        value = filter_chain(std::move(value));
      } else if (at_name("is")) {
        const int line = next().line;
        auto e = make(Expr::Type::kTest, line);
        if (at_name("not")) {
          next();
          e->negated = true;
        }
        e->name = expect_name();
        while (at_operator(".")) {
          next();
          e->name += "." + expect_name();
        }
        e->operands.push_back(std::move(value));
        if (at_operator("(")) {
          arguments(*e);
        } else if (starts_argument()) {  // "is sameas false", "is divisibleby 3"
          e->operands.push_back(postfix(primary()));
        }
        value = std::move(e);
      } else if (at_operator("(")) {
        value = call(std::move(value), peek().line);
      } else {
        return value;
      }
    }
  }

  bool starts_argument() const {
    const Token& t = peek();
    if (t.type == Token::Type::kString || t.type == Token::Type::kInt || t.type == Token::Type::kFloat) return true;
    if (t.type == Token::Type::kOperator) return t.text == "[" || t.text == "{";
    if (t.type != Token::Type::kName) return false;
    static constexpr std::string_view kNotArguments[] = {"else", "or", "and", "if", "is", "in", "not"};
    for (auto word : kNotArguments) {
      if (t.text == word) return false;
    }
    return true;
  }

  // "| name(args) | name..." over `input` (null in a filter block or a block set).
  ExprPtr filter_chain(ExprPtr input, bool first_without_bar = false) {
    bool first = true;
    while (at_operator("|") || (first && first_without_bar)) {
      if (!(first && first_without_bar)) next();
      first = false;
      const int line = peek().line;
      auto e = make(Expr::Type::kFilter, line);
      e->name = expect_name();
      while (at_operator(".")) {
        next();
        e->name += "." + expect_name();
      }
      e->operands.push_back(std::move(input));
      if (at_operator("(")) arguments(*e);
      input = std::move(e);
    }
    return input;
  }

  std::vector<Token> tokens_;
  std::size_t index_ = 0;
  int depth_ = 0;
};

}  // namespace

NodePtr parse_template(std::string_view source) { return Parser(Lexer(source).run()).parse(); }

}  // namespace pagedllm::jinja
