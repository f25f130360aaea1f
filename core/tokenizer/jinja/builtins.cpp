#include "core/tokenizer/jinja/builtins.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <functional>
#include <initializer_list>
#include <limits>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <utility>

#include <fmt/format.h>
#include <utf8proc.h>

#include "core/tokenizer/jinja/template.h"
#include "core/tokenizer/unicode_properties.h"
#include "core/tokenizer/utf8.h"

namespace pagedllm::jinja {
namespace {

// ---- strings as Python sees them: sequences of code points -------------------------------------

std::vector<std::string_view> characters(std::string_view s) {
  std::vector<std::string_view> out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = std::min(tokenizer::utf8::sequence_length(static_cast<unsigned char>(s[i])), s.size() - i);
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

char32_t code_point(std::string_view ch) {
  if (ch.size() == 1) return static_cast<unsigned char>(ch[0]);
  if (tokenizer::utf8::find_invalid(ch)) return 0xFFFD;
  std::size_t length = 0;
  return tokenizer::utf8::decode_at(ch, 0, &length);
}

// str.isspace(): Unicode White_Space plus the ASCII separators 0x1C-0x1F.
bool is_python_space(std::string_view ch) {
  const char32_t c = code_point(ch);
  return tokenizer::unicode::is_whitespace(c) || (c >= 0x1C && c <= 0x1F);
}

std::string map_case(std::string_view s, bool upper) {
  std::string out;
  out.reserve(s.size());
  for (auto ch : characters(s)) {
    if (ch.size() == 1 && static_cast<unsigned char>(ch[0]) < 0x80) {
      out += static_cast<char>(upper ? std::toupper(static_cast<unsigned char>(ch[0]))
                                     : std::tolower(static_cast<unsigned char>(ch[0])));
      continue;
    }
    const char32_t c = code_point(ch);
    if (c == 0xFFFD) {
      out += ch;
      continue;
    }
    tokenizer::utf8::append(out, static_cast<char32_t>(upper ? utf8proc_toupper(static_cast<utf8proc_int32_t>(c))
                                                             : utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
  }
  return out;
}

bool is_cased_letter(std::string_view ch) {
  const char32_t c = code_point(ch);
  return utf8proc_toupper(static_cast<utf8proc_int32_t>(c)) != static_cast<utf8proc_int32_t>(c) ||
         utf8proc_tolower(static_cast<utf8proc_int32_t>(c)) != static_cast<utf8proc_int32_t>(c);
}

std::string strip(std::string_view s, const Value& chars, bool left, bool right) {
  auto parts = characters(s);
  std::vector<std::string_view> strip_set;
  const bool whitespace = chars.is_undefined() || chars.is_none();
  if (!whitespace) {
    if (!chars.is_string()) throw TemplateError("strip arg must be None or str");
    strip_set = characters(chars.as_string());
  }
  auto strippable = [&](std::string_view ch) {
    return whitespace ? is_python_space(ch) : std::find(strip_set.begin(), strip_set.end(), ch) != strip_set.end();
  };
  std::size_t begin = 0;
  std::size_t end = parts.size();
  if (left) {
    while (begin < end && strippable(parts[begin])) ++begin;
  }
  if (right) {
    while (end > begin && strippable(parts[end - 1])) --end;
  }
  std::string out;
  for (std::size_t i = begin; i < end; ++i) out += parts[i];
  return out;
}

std::vector<Value> split(std::string_view s, const Value& separator, std::int64_t max_split) {
  std::vector<Value> out;
  if (separator.is_undefined() || separator.is_none()) {
    auto parts = characters(s);
    std::size_t i = 0;
    while (i < parts.size()) {
      while (i < parts.size() && is_python_space(parts[i])) ++i;
      if (i == parts.size()) break;
      if (max_split >= 0 && static_cast<std::int64_t>(out.size()) == max_split) {
        std::string rest;
        for (std::size_t k = i; k < parts.size(); ++k) rest += parts[k];
        // Python strips only the whitespace before the rest, keeping its trailing whitespace.
        out.emplace_back(std::move(rest));
        return out;
      }
      std::string word;
      while (i < parts.size() && !is_python_space(parts[i])) word += parts[i++];
      out.emplace_back(std::move(word));
    }
    return out;
  }
  if (!separator.is_string()) throw TemplateError("must be str or None, not " + separator.type_name());
  const std::string& sep = separator.as_string();
  if (sep.empty()) throw TemplateError("empty separator");
  std::size_t start = 0;
  while (true) {
    if (max_split >= 0 && static_cast<std::int64_t>(out.size()) == max_split) break;
    const std::size_t at = s.find(sep, start);
    if (at == std::string_view::npos) break;
    out.emplace_back(std::string(s.substr(start, at - start)));
    start = at + sep.size();
  }
  out.emplace_back(std::string(s.substr(start)));
  return out;
}

std::string replace(std::string_view s, std::string_view old, std::string_view with, std::int64_t count,
                    std::size_t max_bytes) {
  std::string out;
  if (old.empty()) {  // Python inserts `with` around every character
    auto parts = characters(s);
    std::int64_t done = 0;
    for (std::size_t i = 0; i <= parts.size(); ++i) {
      if (count < 0 || done < count) {
        out += with;
        ++done;
      }
      if (i < parts.size()) out += parts[i];
      if (out.size() > max_bytes) throw TemplateError("a string grew past the output limit");
    }
    return out;
  }
  std::size_t start = 0;
  std::int64_t done = 0;
  while (count < 0 || done < count) {
    const std::size_t at = s.find(old, start);
    if (at == std::string_view::npos) break;
    out += s.substr(start, at - start);
    out += with;
    start = at + old.size();
    ++done;
    if (out.size() > max_bytes) throw TemplateError("a string grew past the output limit");
  }
  out += s.substr(start);
  return out;
}

// Python's str.splitlines().
std::vector<std::string> split_lines(std::string_view s) {
  std::vector<std::string> lines;
  std::string line;
  auto parts = characters(s);
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const char32_t c = code_point(parts[i]);
    const bool breaks = c == '\n' || c == '\r' || c == '\v' || c == '\f' || c == 0x1C || c == 0x1D || c == 0x1E ||
                        c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!breaks) {
      line += parts[i];
      continue;
    }
    if (c == '\r' && i + 1 < parts.size() && parts[i + 1] == "\n") ++i;
    lines.push_back(std::move(line));
    line.clear();
  }
  if (!line.empty()) lines.push_back(std::move(line));
  return lines;
}

// ---- arguments ------------------------------------------------------------------------------------

// A builtin's parameters by position and name, as Python binds them.
class Params {
 public:
  Params(Arguments& args, const char* function, std::initializer_list<const char*> names)
      : args_(args), names_(names) {
    if (args.positional.size() > names_.size()) {
      throw TemplateError(fmt::format("{}() takes at most {} argument(s) ({} given)", function, names_.size(),
                                      args.positional.size()));
    }
    for (const auto& keyword : args.keyword) {  // not a structured binding: clang 14 cannot capture one
      const std::string& key = keyword.first;
      if (std::find_if(names_.begin(), names_.end(), [&](const char* n) { return key == n; }) == names_.end()) {
        throw TemplateError(fmt::format("{}() got an unexpected keyword argument '{}'", function, key));
      }
    }
  }
  Value get(std::size_t index) const {
    if (index < args_.positional.size()) return args_.positional[index];
    for (const auto& [key, value] : args_.keyword) {
      if (key == names_[index]) return value;
    }
    return Value();
  }
  Value get(std::size_t index, Value fallback) const {
    Value v = get(index);
    return v.is_undefined() ? fallback : v;
  }

 private:
  Arguments& args_;
  std::vector<const char*> names_;
};

std::int64_t require_int(const Value& v, const char* what) {
  if (v.is_int() || v.is_bool()) return v.as_int();
  throw TemplateError(fmt::format("{} must be an integer, not {}", what, v.type_name()));
}

const std::string& require_string(const Value& v, const char* what) {
  if (!v.is_string()) throw TemplateError(fmt::format("{} must be a string, not {}", what, v.type_name()));
  return v.as_string();
}

Value check_size(Evaluator& evaluator, std::string s) {
  if (s.size() > evaluator.max_string_bytes()) throw TemplateError("a string grew past the output limit");
  return Value(std::move(s));
}

[[noreturn]] void fail_undefined(const Value& v) { throw TemplateError(v.undefined_name()); }

// ---- comparisons ----------------------------------------------------------------------------------

bool less(const Value& a, const Value& b, const char* op = "<") {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() < b.as_double();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();
  if (a.is_list() && b.is_list()) {
    const auto& x = a.items();
    const auto& y = b.items();
    for (std::size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!(x[i] == y[i])) return less(x[i], y[i], op);
    }
    return x.size() < y.size();
  }
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  throw TemplateError(fmt::format("'{}' not supported between instances of '{}' and '{}'", op, a.type_name(),
                                  b.type_name()));
}

std::int64_t length_of(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return 0;
    case Value::Kind::kString: return static_cast<std::int64_t>(characters(v.as_string()).size());
    case Value::Kind::kList:
      if (v.is_generator()) break;
      return static_cast<std::int64_t>(v.items().size());
    case Value::Kind::kDict: return static_cast<std::int64_t>(v.dict_entries().entries.size());
    case Value::Kind::kNone:
    case Value::Kind::kBool:
    case Value::Kind::kInt:
    case Value::Kind::kFloat:
    case Value::Kind::kFunction: break;
  }
  throw TemplateError(fmt::format("object of type '{}' has no len()", v.type_name()));
}

// The value of `attribute` ("a.b" or "0" for an index) of `item`, as jinja2's make_attrgetter.
Value attribute_of(Evaluator& evaluator, const Value& item, const std::string& attribute) {
  Value v = item;
  std::size_t start = 0;
  while (true) {
    const std::size_t dot = attribute.find('.', start);
    const std::string part = attribute.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    const bool index = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
    v = index ? get_item(v, Value(static_cast<std::int64_t>(std::stoll(part))), 0) : get_attribute(evaluator, v, part, 0);
    if (dot == std::string::npos) return v;
    start = dot + 1;
  }
}

// ---- filters --------------------------------------------------------------------------------------

using Filter = std::function<Value(Evaluator&, Value, Arguments&)>;

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

// markupsafe.escape: Markup stays as it is; anything else is made a string and escaped.
Value escape(const Value& v) { return v.is_markup() ? v : Value::markup(html_escape(v.str())); }

// The same kind of string as `like`: Markup when `like` is Markup (what Markup's own methods return).
Value string_like(const Value& like, std::string text) {
  return like.is_markup() ? Value::markup(std::move(text)) : Value(std::move(text));
}

Value sorted(Evaluator& evaluator, std::vector<Value> items, bool reverse, bool case_sensitive, const Value& attribute) {
  auto key = [&](const Value& v) {
    Value k = attribute.is_undefined() || attribute.is_none() ? v : attribute_of(evaluator, v, attribute.str());
    if (!case_sensitive && k.is_string()) return Value(map_case(k.as_string(), false));
    return k;
  };
  std::vector<std::pair<Value, Value>> keyed;
  for (auto& item : items) keyed.emplace_back(key(item), std::move(item));
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    return reverse ? less(b.first, a.first) : less(a.first, b.first);
  });
  std::vector<Value> out;
  for (auto& [k, v] : keyed) out.push_back(std::move(v));
  return Value::list(std::move(out));
}

Value select(Evaluator& evaluator, const Value& input, Arguments& args, bool keep, bool by_attribute, int line) {
  std::size_t next = 0;
  std::string attribute;
  if (by_attribute) {
    if (args.positional.empty()) throw TemplateError("selectattr/rejectattr need an attribute name");
    attribute = require_string(args.positional[next++], "attribute");
  }
  std::string test;
  Arguments test_args;
  if (next < args.positional.size()) {
    test = require_string(args.positional[next++], "test name");
    test_args.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(next), args.positional.end());
    test_args.keyword = args.keyword;
  }
  std::vector<Value> out;
  if (!input.truthy()) return Value::generator({});
  for (const Value& item : iterate(input, line)) {
    evaluator.step(line);
    Value probe = by_attribute ? attribute_of(evaluator, item, attribute) : item;
    Arguments call_args = test_args;
    const bool passes = test.empty() ? probe.truthy() : call_test(evaluator, test, probe, call_args, line);
    if (passes == keep) out.push_back(item);
  }
  return Value::generator(std::move(out));
}

Value to_json_filter(Evaluator& evaluator, Value input, Arguments& args) {
  Params p(args, "tojson", {"ensure_ascii", "indent", "separators", "sort_keys"});
  Value::JsonStyle style;
  Value indent = p.get(1);
  if (!indent.is_undefined() && !indent.is_none()) {
    if (indent.is_string()) throw TemplateError("tojson: an indent string is not supported; give a number");
    style.indent = static_cast<int>(std::clamp<std::int64_t>(require_int(indent, "tojson indent"), 0, 64));
  }
  Value separators = p.get(2);
  if (!separators.is_undefined() && !separators.is_none()) {
    if (!separators.is_list() || separators.items().size() != 2) {
      throw TemplateError("tojson: separators must be a pair of strings");
    }
    style.item_separator = require_string(separators.items()[0], "tojson separator");
    style.key_separator = require_string(separators.items()[1], "tojson separator");
    if (style.item_separator.empty() || style.key_separator.empty()) {
      throw TemplateError("tojson: empty separators are not supported");
    }
  }
  style.sort_keys = p.get(3, Value(false)).truthy();
  std::string json = input.to_json(style);
  if (p.get(0, Value(false)).truthy()) {  // ensure_ascii: \uXXXX (surrogate pairs above the BMP)
    std::string ascii;
    for (auto ch : characters(json)) {
      const char32_t c = code_point(ch);
      if (c < 0x80) {
        ascii += ch;
      } else if (c < 0x10000) {
        ascii += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
      } else {
        const char32_t v = c - 0x10000;
        ascii += fmt::format("\\u{:04x}\\u{:04x}", static_cast<unsigned>(0xD800 + (v >> 10)),
                             static_cast<unsigned>(0xDC00 + (v & 0x3FF)));
      }
    }
    json = std::move(ascii);
  }
  return check_size(evaluator, std::move(json));
}

Value python_int(const Value& v, const Value& fallback, std::int64_t base) {
  if (v.is_int() || v.is_bool()) return Value(v.as_int());
  if (v.is_float()) {
    const double f = v.as_double();
    if (!std::isfinite(f) || std::fabs(f) >= 9.2e18) return fallback;
    return Value(static_cast<std::int64_t>(f));
  }
  if (v.is_string()) {
    const std::string text = strip(v.as_string(), Value(), true, true);
    errno = 0;
    char* end = nullptr;
    const long long parsed = std::strtoll(text.c_str(), &end, static_cast<int>(base));
    if (!text.empty() && end && *end == '\0' && errno == 0) return Value(static_cast<std::int64_t>(parsed));
    const double f = std::strtod(text.c_str(), &end);
    if (!text.empty() && end && *end == '\0' && std::isfinite(f) && std::fabs(f) < 9.2e18) {
      return Value(static_cast<std::int64_t>(f));
    }
  }
  return fallback;
}

const std::unordered_map<std::string_view, Filter>& filters() {
  static const std::unordered_map<std::string_view, Filter> table = [] {
    std::unordered_map<std::string_view, Filter> t;
    t["abs"] = [](Evaluator&, Value v, Arguments& args) {
      Params(args, "abs", {});
      if (v.is_float()) return Value(std::fabs(v.as_double()));
      if (v.is_number()) return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
      throw TemplateError(fmt::format("bad operand type for abs(): '{}'", v.type_name()));
    };
    t["attr"] = [](Evaluator& e, Value v, Arguments& args) {
      Params p(args, "attr", {"name"});
      return get_attribute(e, v, require_string(p.get(0), "attr name"), 0);
    };
    t["capitalize"] = [](Evaluator&, Value v, Arguments& args) {
      Params(args, "capitalize", {});
      const std::string s = v.str();
      auto parts = characters(s);
      if (parts.empty()) return string_like(v, std::string());
      std::string rest;
      for (std::size_t i = 1; i < parts.size(); ++i) rest += parts[i];
      return string_like(v, map_case(parts[0], true) + map_case(rest, false));
    };
    t["length"] = [](Evaluator&, Value v, Arguments& args) {
      Params(args, "length", {});
      return Value(length_of(v));
    };
    t["count"] = t["length"];
    t["default"] = [](Evaluator&, Value v, Arguments& args) {
      Params p(args, "default", {"default_value", "boolean"});
      const bool boolean = p.get(1, Value(false)).truthy();
      if (v.is_undefined() || (boolean && !v.truthy())) return p.get(0, Value(std::string()));
      return v;
    };
    t["d"] = t["default"];
    t["dictsort"] = [](Evaluator& e, Value v, Arguments& args) {
      Params p(args, "dictsort", {"case_sensitive", "by", "reverse"});
      if (!v.is_dict()) throw TemplateError("dictsort: a dict is needed, not " + v.type_name());
      const std::string by = p.get(1, Value("key")).str();
      if (by != "key" && by != "value") throw TemplateError("You can only sort by either \"key\" or \"value\"");
      const bool by_value = by == "value";
      std::vector<Value> pairs;
      for (const auto& [key, value] : v.dict_entries().entries) pairs.push_back(Value::tuple({Value(key), value}));
      const bool case_sensitive = p.get(0, Value(false)).truthy();
      // Sorted by the pair's item 0 (key) or 1 (value), as attribute_of reads a digit.
      return sorted(e, std::move(pairs), p.get(2, Value(false)).truthy(), case_sensitive, Value(by_value ? "1" : "0"));
    };
    t["escape"] = [](Evaluator&, Value v, Arguments& args) {
      Params(args, "escape", {});
      return escape(v);
    };
    t["e"] = t["escape"];
    t["forceescape"] = [](Evaluator&, Value v, Arguments& args) {
      Params(args, "forceescape", {});
      return Value::markup(html_escape(v.str()));
    };
    t["first"] = [](Evaluator&, Value v, Arguments& args) {
      Params(args, "first", {});
      auto items = iterate(v, 0);
      return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
    };
    t["last"] = [](Evaluator&, Value v, Arguments& args) {
      Params(args, "last", {});
      if (v.is_generator()) throw TemplateError("'generator' object is not reversible");
      auto items = iterate(v, 0);
      return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
    };
    t["float"] = [](Evaluator&, Value v, Arguments& args) {
      Params p(args, "float", {"default"});
      if (v.is_number()) return Value(v.as_double());
      if (v.is_string()) {
        const std::string text = strip(v.as_string(), Value(), true, true);
        char* end = nullptr;
        const double f = std::strtod(text.c_str(), &end);
        if (!text.empty() && end && *end == '\0') return Value(f);
      }
      return p.get(0, Value(0.0));
    };
    t["int"] = [](Evaluator&, Value v, Arguments& args) {
      Params p(args, "int", {"default", "base"});
      return python_int(v, p.get(0, Value(static_cast<std::int64_t>(0))), p.get(1, Value(10)).as_int());
    };
    t["items"] = [](Evaluator&, Value v, Arguments& args) {
      Params(args, "items", {});
      if (v.is_undefined()) return Value::list();
      if (!v.is_dict()) throw TemplateError("items: can only get item pairs from a mapping, not " + v.type_name());
      std::vector<Value> pairs;
      for (const auto& [key, value] : v.dict_entries().entries) pairs.push_back(Value::tuple({Value(key), value}));
      return Value::list(std::move(pairs));
    };
    t["join"] = [](Evaluator& e, Value v, Arguments& args) {
      Params p(args, "join", {"d", "attribute"});
      const std::string separator = p.get(0, Value(std::string())).str();
      const Value attribute = p.get(1);
      std::string out;
      bool first = true;
      for (const Value& item : iterate(v, 0)) {
        if (!first) out += separator;
        first = false;
        out += (attribute.is_undefined() || attribute.is_none() ? item : attribute_of(e, item, attribute.str())).str();
        if (out.size() > e.max_string_bytes()) throw TemplateError("a string grew past the output limit");
      }
      return Value(std::move(out));
    };
    t["list"] = [](Evaluator&, Value v, Arguments& args) {
      Params(args, "list", {});
      return Value::list(iterate(v, 0));
    };
    t["lower"] = [](Evaluator&, Value v, Arguments& args) {
      Params(args, "lower", {});
      return string_like(v, map_case(v.str(), false));
    };
    t["upper"] = [](Evaluator&, Value v, Arguments& args) {
      Params(args, "upper", {});
      return string_like(v, map_case(v.str(), true));
    };
    t["map"] = [](Evaluator& e, Value v, Arguments& args) {
      std::vector<Value> out;
      if (!v.truthy()) return Value::generator({});
      const auto attribute = std::find_if(args.keyword.begin(), args.keyword.end(),
                                          [](const auto& kw) { return kw.first == "attribute"; });
      if (attribute != args.keyword.end()) {
        Value fallback;
        for (const auto& [key, value] : args.keyword) {
          if (key == "default") {
            fallback = value;
          } else if (key != "attribute") {
            throw TemplateError(fmt::format("map() got an unexpected keyword argument '{}'", key));
          }
        }
        for (const Value& item : iterate(v, 0)) {
          e.step(0);
          Value mapped = attribute_of(e, item, attribute->second.str());
          out.push_back(mapped.is_undefined() && !fallback.is_undefined() ? fallback : mapped);
        }
        return Value::generator(std::move(out));
      }
      if (args.positional.empty()) throw TemplateError("map: give a filter name or attribute=");
      const std::string filter = require_string(args.positional[0], "map filter name");
      Arguments rest;
      rest.positional.assign(args.positional.begin() + 1, args.positional.end());
      rest.keyword = args.keyword;
      for (const Value& item : iterate(v, 0)) {
        e.step(0);
        Arguments call_args = rest;
        out.push_back(call_filter(e, filter, item, call_args, 0));
      }
      return Value::generator(std::move(out));
    };
    auto extreme = [](bool want_max) {
      return [want_max](Evaluator& e, Value v, Arguments& args) {
        Params p(args, want_max ? "max" : "min", {"case_sensitive", "attribute"});
        auto items = iterate(v, 0);
        if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
        Value list = sorted(e, items, want_max, p.get(0, Value(false)).truthy(), p.get(1));
        return list.items().front();
      };
    };
    t["max"] = extreme(true);
    t["min"] = extreme(false);
    t["replace"] = [](Evaluator& e, Value v, Arguments& args) {
      Params p(args, "replace", {"old", "new", "count"});
      const Value count = p.get(2);
      return Value(replace(v.str(), p.get(0).str(), p.get(1).str(),
                           count.is_undefined() || count.is_none() ? -1 : require_int(count, "count"),
                           e.max_string_bytes()));
    };
    t["reverse"] = [](Evaluator&, Value v, Arguments& args) {
      Params(args, "reverse", {});
      if (v.is_string()) {
        auto parts = characters(v.as_string());
        std::string out;
        for (auto it = parts.rbegin(); it != parts.rend(); ++it) out += *it;
        return string_like(v, std::move(out));
      }
      auto items = iterate(v, 0);
      std::reverse(items.begin(), items.end());
      return Value::list(std::move(items));
    };
    t["round"] = [](Evaluator&, Value v, Arguments& args) {
      Params p(args, "round", {"precision", "method"});
      const std::int64_t precision = require_int(p.get(0, Value(0)), "precision");
      const std::string method = p.get(1, Value("common")).str();
      const double scale = std::pow(10.0, static_cast<double>(precision));
      const double x = v.as_double() * scale;
      double r;
      if (method == "common") {
        r = std::round(x);
      } else if (method == "ceil") {
        r = std::ceil(x);
      } else if (method == "floor") {
        r = std::floor(x);
      } else {
        throw TemplateError("method must be common, ceil or floor");
      }
      return Value(r / scale);
    };
    t["safe"] = [](Evaluator&, Value v, Arguments& args) {
      Params(args, "safe", {});
      return v.is_markup() ? v : Value::markup(v.str());
    };
    t["select"] = [](Evaluator& e, Value v, Arguments& args) { return select(e, v, args, true, false, 0); };
    t["reject"] = [](Evaluator& e, Value v, Arguments& args) { return select(e, v, args, false, false, 0); };
    t["selectattr"] = [](Evaluator& e, Value v, Arguments& args) { return select(e, v, args, true, true, 0); };
    t["rejectattr"] = [](Evaluator& e, Value v, Arguments& args) { return select(e, v, args, false, true, 0); };
    t["sort"] = [](Evaluator& e, Value v, Arguments& args) {
      Params p(args, "sort", {"reverse", "case_sensitive", "attribute"});
      return sorted(e, iterate(v, 0), p.get(0, Value(false)).truthy(), p.get(1, Value(false)).truthy(), p.get(2));
    };
    t["string"] = [](Evaluator&, Value v, Arguments& args) {
      Params(args, "string", {});
      return v.is_string() ? v : Value(v.str());
    };
    t["sum"] = [](Evaluator& e, Value v, Arguments& args) {
      Params p(args, "sum", {"attribute", "start"});
      Value total = p.get(1, Value(0));
      const Value attribute = p.get(0);
      for (const Value& item : iterate(v, 0)) {
        total = binary_operator(e, "+", total,
                                attribute.is_undefined() || attribute.is_none() ? item : attribute_of(e, item, attribute.str()), 0);
      }
      return total;
    };
    t["title"] = [](Evaluator&, Value v, Arguments& args) {
      Params(args, "title", {});
      // jinja2's do_title: words begin after whitespace, '-', and opening brackets.
      std::string out;
      bool word_start = true;
      const std::string text = v.str();
      for (auto ch : characters(text)) {
        const bool boundary = is_python_space(ch) || ch == "-" || ch == "(" || ch == "{" || ch == "[" || ch == "<";
        if (boundary) {
          out += ch;
          word_start = true;
          continue;
        }
        out += map_case(ch, word_start);
        word_start = false;
      }
      return Value(std::move(out));
    };
    t["tojson"] = to_json_filter;
    t["trim"] = [](Evaluator&, Value v, Arguments& args) {
      Params p(args, "trim", {"chars"});
      return string_like(v, strip(v.str(), p.get(0), true, true));
    };
    t["unique"] = [](Evaluator& e, Value v, Arguments& args) {
      Params p(args, "unique", {"case_sensitive", "attribute"});
      const bool case_sensitive = p.get(0, Value(false)).truthy();
      const Value attribute = p.get(1);
      std::vector<Value> out;
      std::vector<Value> seen;
      for (const Value& item : iterate(v, 0)) {
        e.step(0);
        Value key = attribute.is_undefined() || attribute.is_none() ? item : attribute_of(e, item, attribute.str());
        if (!case_sensitive && key.is_string()) key = Value(map_case(key.as_string(), false));
        if (std::find(seen.begin(), seen.end(), key) != seen.end()) continue;
        seen.push_back(std::move(key));
        out.push_back(item);
      }
      return Value::list(std::move(out));
    };
    t["wordcount"] = [](Evaluator&, Value v, Arguments& args) {
      Params(args, "wordcount", {});
      return Value(static_cast<std::int64_t>(split(v.str(), Value(), -1).size()));
    };
    t["indent"] = [](Evaluator& e, Value v, Arguments& args) {
      Params p(args, "indent", {"width", "first", "blank"});
      const Value width = p.get(0, Value(4));
      const std::string indentation =
          width.is_string() ? width.as_string()
                            : std::string(static_cast<std::size_t>(std::clamp<std::int64_t>(require_int(width, "width"), 0, 1024)), ' ');
      const bool first = p.get(1, Value(false)).truthy();
      const bool blank = p.get(2, Value(false)).truthy();
      auto lines = split_lines(v.str() + "\n");
      std::string out;
      if (blank) {
        for (std::size_t i = 0; i < lines.size(); ++i) {
          if (i > 0) out += "\n" + indentation;
          out += lines[i];
        }
      } else if (!lines.empty()) {
        out = lines[0];
        for (std::size_t i = 1; i < lines.size(); ++i) {
          out += "\n";
          if (!lines[i].empty()) out += indentation;
          out += lines[i];
        }
      }
      if (first) out = indentation + out;
      return string_like(v, check_size(e, std::move(out)).as_string());
    };
    return t;
  }();
  return table;
}

// ---- tests ----------------------------------------------------------------------------------------

using Test = std::function<bool(const Value&, Arguments&)>;

const Value& one_argument(Arguments& args, const char* test) {
  if (args.positional.size() != 1 || !args.keyword.empty()) {
    throw TemplateError(fmt::format("the test '{}' takes one argument", test));
  }
  return args.positional[0];
}

void no_arguments(Arguments& args, const char* test) {
  if (!args.positional.empty() || !args.keyword.empty()) {
    throw TemplateError(fmt::format("the test '{}' takes no argument", test));
  }
}

const std::unordered_map<std::string_view, Test>& tests() {
  static const std::unordered_map<std::string_view, Test> table = [] {
    std::unordered_map<std::string_view, Test> t;
    auto simple = [&t](std::string_view name, bool (*predicate)(const Value&)) {
      t[name] = [name, predicate](const Value& v, Arguments& args) {
        no_arguments(args, std::string(name).c_str());
        return predicate(v);
      };
    };
    simple("defined", [](const Value& v) { return !v.is_undefined(); });
    simple("undefined", [](const Value& v) { return v.is_undefined(); });
    simple("none", [](const Value& v) { return v.is_none(); });
    simple("boolean", [](const Value& v) { return v.is_bool(); });
    simple("false", [](const Value& v) { return v.is_bool() && !v.as_bool(); });
    simple("true", [](const Value& v) { return v.is_bool() && v.as_bool(); });
    simple("integer", [](const Value& v) { return v.is_int(); });
    simple("float", [](const Value& v) { return v.is_float(); });
    simple("number", [](const Value& v) { return v.is_number(); });
    simple("string", [](const Value& v) { return v.is_string(); });
    simple("mapping", [](const Value& v) { return v.is_dict() && !v.is_namespace(); });
    // Undefined iterates (as nothing) and has a length in jinja2, so it is both.
    simple("iterable", [](const Value& v) { return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict(); });
    simple("sequence", [](const Value& v) {
      return v.is_undefined() || v.is_string() || (v.is_list() && !v.is_generator()) || (v.is_dict() && !v.is_namespace());
    });
    simple("callable", [](const Value& v) { return v.is_function(); });
    simple("escaped", [](const Value& v) { return v.is_markup(); });
    simple("odd", [](const Value& v) { return require_int(v, "odd") % 2 != 0; });
    simple("even", [](const Value& v) { return require_int(v, "even") % 2 == 0; });
    simple("lower", [](const Value& v) { return v.is_string() && map_case(v.as_string(), false) == v.as_string(); });
    simple("upper", [](const Value& v) { return v.is_string() && map_case(v.as_string(), true) == v.as_string(); });
    auto compare = [&t](std::initializer_list<std::string_view> names, std::function<bool(const Value&, const Value&)> f) {
      for (auto name : names) {
        t[name] = [name, f](const Value& v, Arguments& args) { return f(v, one_argument(args, std::string(name).c_str())); };
      }
    };
    compare({"eq", "equalto", "=="}, [](const Value& a, const Value& b) { return a == b; });
    compare({"ne", "!="}, [](const Value& a, const Value& b) { return !(a == b); });
    compare({"lt", "lessthan", "<"}, [](const Value& a, const Value& b) { return less(a, b); });
    compare({"gt", "greaterthan", ">"}, [](const Value& a, const Value& b) { return less(b, a); });
    compare({"le", "<="}, [](const Value& a, const Value& b) { return !less(b, a); });
    compare({"ge", ">="}, [](const Value& a, const Value& b) { return !less(a, b); });
    compare({"sameas"}, [](const Value& a, const Value& b) {
      if (a.is_none() || a.is_bool() || b.is_none() || b.is_bool()) return a.kind() == b.kind() && a == b;
      if (a.is_dict() || b.is_dict()) return a.is_dict() && b.is_dict() && &a.dict_entries() == &b.dict_entries();
      return a.kind() == b.kind() && a == b && (a.is_list() ? &a.items() == &b.items() : true);
    });
    compare({"divisibleby"}, [](const Value& a, const Value& b) {
      const std::int64_t d = require_int(b, "divisibleby");
      if (d == 0) throw TemplateError("integer division or modulo by zero");
      return require_int(a, "divisibleby") % d == 0;
    });
    compare({"in"}, [](const Value& a, const Value& b) {
      if (b.is_string()) return a.is_string() && b.as_string().find(a.as_string()) != std::string::npos;
      if (b.is_list()) return std::find(b.items().begin(), b.items().end(), a) != b.items().end();
      if (b.is_dict()) {
        if (!a.hashable()) throw TemplateError(fmt::format("unhashable type: '{}'", a.type_name()));
        return b.dict_entries().find_item(a) != nullptr;
      }
      throw TemplateError(fmt::format("argument of type '{}' is not iterable", b.type_name()));
    });
    return t;
  }();
  return table;
}

// ---- methods --------------------------------------------------------------------------------------

Value unsafe(const std::string& name, const std::string& type) {
  return Value::function(name, [name, type](Arguments&) -> Value {
    throw TemplateError(fmt::format("access to attribute '{}' of '{}' object is unsafe.", name, type));
  });
}

// Python's str.format with positional ({}, {0}) and named ({name}) fields; no format specs.
std::string python_format(const std::string& format, Arguments& args, std::size_t max_bytes) {
  std::string out;
  std::size_t auto_index = 0;
  for (std::size_t i = 0; i < format.size(); ++i) {
    const char c = format[i];
    if (c == '}') {
      if (i + 1 < format.size() && format[i + 1] == '}') ++i;
      out += '}';
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < format.size() && format[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    const std::size_t close = format.find('}', i);
    if (close == std::string::npos) throw TemplateError("Single '{' encountered in format string");
    const std::string field = format.substr(i + 1, close - i - 1);
    if (field.find_first_of(":!.[") != std::string::npos) {
      throw TemplateError("str.format: format specs and conversions are not supported");
    }
    Value value;
    if (field.empty() || std::all_of(field.begin(), field.end(), [](char d) { return std::isdigit(static_cast<unsigned char>(d)); })) {
      const std::size_t index = field.empty() ? auto_index++ : static_cast<std::size_t>(std::stoul(field));
      if (index >= args.positional.size()) throw TemplateError("Replacement index out of range for positional args tuple");
      value = args.positional[index];
    } else {
      const auto k = std::find_if(args.keyword.begin(), args.keyword.end(), [&](const auto& kw) { return kw.first == field; });
      if (k == args.keyword.end()) throw TemplateError(fmt::format("KeyError: '{}'", field));
      value = k->second;
    }
    out += value.str();
    if (out.size() > max_bytes) throw TemplateError("a string grew past the output limit");
    i = close;
  }
  return out;
}

Value string_method(Evaluator& evaluator, const std::string& s, const std::string& name) {
  auto method = [&](std::function<Value(Arguments&)> f) { return Value::function("str." + name, std::move(f)); };
  const std::size_t max_bytes = evaluator.max_string_bytes();
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    return method([s, name](Arguments& args) {
      Params p(args, name.c_str(), {"chars"});
      return Value(strip(s, p.get(0), name != "rstrip", name != "lstrip"));
    });
  }
  if (name == "split" || name == "rsplit") {
    return method([s, name](Arguments& args) {
      Params p(args, name.c_str(), {"sep", "maxsplit"});
      const std::int64_t max_split = require_int(p.get(1, Value(-1)), "maxsplit");
      if (name == "rsplit" && max_split >= 0) throw TemplateError("str.rsplit with maxsplit is not supported");
      return Value::list(split(s, p.get(0), max_split));
    });
  }
  if (name == "startswith" || name == "endswith") {
    return method([s, name](Arguments& args) {
      Params p(args, name.c_str(), {"prefix"});
      const Value affix = p.get(0);
      std::vector<Value> options = affix.is_list() ? affix.items() : std::vector<Value>{affix};
      for (const Value& option : options) {
        const std::string& a = require_string(option, name.c_str());
        if (name == "startswith" ? std::string_view(s).starts_with(a) : std::string_view(s).ends_with(a)) return Value(true);
      }
      return Value(false);
    });
  }
  if (name == "upper" || name == "lower") {
    return method([s, name](Arguments& args) {
      Params(args, name.c_str(), {});
      return Value(map_case(s, name == "upper"));
    });
  }
  if (name == "title" || name == "capitalize") {
    return method([s, name](Arguments& args) {
      Params(args, name.c_str(), {});
      std::string out;
      bool previous_cased = false;
      bool first = true;
      for (auto ch : characters(s)) {
        if (name == "capitalize") {
          out += map_case(ch, first);
          first = false;
          continue;
        }
        const bool cased = is_cased_letter(ch);
        out += cased ? map_case(ch, !previous_cased) : std::string(ch);
        previous_cased = cased;
      }
      return Value(std::move(out));
    });
  }
  if (name == "replace") {
    return method([s, max_bytes](Arguments& args) {
      Params p(args, "replace", {"old", "new", "count"});
      return Value(replace(s, require_string(p.get(0), "replace old"), require_string(p.get(1), "replace new"),
                           require_int(p.get(2, Value(-1)), "count"), max_bytes));
    });
  }
  if (name == "find" || name == "rfind" || name == "count" || name == "index") {
    return method([s, name](Arguments& args) {
      Params p(args, name.c_str(), {"sub"});
      const std::string sub = require_string(p.get(0), name.c_str());
      if (name == "count") {
        if (sub.empty()) return Value(static_cast<std::int64_t>(characters(s).size() + 1));
        std::int64_t n = 0;
        for (std::size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size())) ++n;
        return Value(n);
      }
      const std::size_t at = name == "rfind" ? s.rfind(sub) : s.find(sub);
      if (at == std::string::npos) {
        if (name == "index") throw TemplateError("substring not found");
        return Value(static_cast<std::int64_t>(-1));
      }
      return Value(static_cast<std::int64_t>(characters(std::string_view(s).substr(0, at)).size()));
    });
  }
  if (name == "join") {
    return method([s, max_bytes](Arguments& args) {
      Params p(args, "join", {"iterable"});
      std::string out;
      bool first = true;
      for (const Value& item : iterate(p.get(0), 0)) {
        if (!first) out += s;
        first = false;
        out += require_string(item, "str.join item");
        if (out.size() > max_bytes) throw TemplateError("a string grew past the output limit");
      }
      return Value(std::move(out));
    });
  }
  if (name == "format") {
    return method([s, max_bytes](Arguments& args) { return Value(python_format(s, args, max_bytes)); });
  }
  if (name == "splitlines") {
    return method([s](Arguments& args) {
      Params(args, "splitlines", {});
      std::vector<Value> lines;
      for (auto& line : split_lines(s)) lines.emplace_back(std::move(line));
      return Value::list(std::move(lines));
    });
  }
  if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace" || name == "isupper" ||
      name == "islower") {
    return method([s, name](Arguments& args) {
      Params(args, name.c_str(), {});
      auto parts = characters(s);
      if (parts.empty()) return Value(false);
      if (name == "isupper" || name == "islower") {
        const bool upper = name == "isupper";
        bool any_cased = false;
        for (auto ch : parts) {
          if (!is_cased_letter(ch)) continue;
          any_cased = true;
          if (map_case(ch, upper) != ch) return Value(false);
        }
        return Value(any_cased);
      }
      for (auto ch : parts) {
        const char32_t c = code_point(ch);
        const auto category = utf8proc_category(static_cast<utf8proc_int32_t>(c));
        const bool digit = category == UTF8PROC_CATEGORY_ND;
        const bool alpha = category >= UTF8PROC_CATEGORY_LU && category <= UTF8PROC_CATEGORY_LO;
        const bool ok = name == "isdigit" ? digit : name == "isalpha" ? alpha : name == "isalnum" ? (digit || alpha)
                                                                                                   : is_python_space(ch);
        if (!ok) return Value(false);
      }
      return Value(true);
    });
  }
  return Value::undefined(fmt::format("'str object' has no attribute '{}'", name));
}

// Markup's methods (markupsafe): those that make a string return Markup, after HTML-escaping
// their plain-string arguments (replace's, format's fields, join's items); split and splitlines
// return Markup pieces. The others (startswith, find, ...) are str's.
Value markup_method(Evaluator& evaluator, const Value& target, const std::string& name) {
  Value method = string_method(evaluator, target.as_string(), name);
  static constexpr std::string_view kMakesMarkup[] = {"strip", "lstrip", "rstrip", "upper", "lower", "title",
                                                       "capitalize", "replace", "format", "join", "split", "rsplit",
                                                       "splitlines"};
  if (!method.is_function() || std::find(std::begin(kMakesMarkup), std::end(kMakesMarkup), name) == std::end(kMakesMarkup)) {
    return method;
  }
  return Value::function("Markup." + name, [method, name](Arguments& args) {
    if (name == "replace" || name == "format") {
      for (Value& argument : args.positional) argument = escape(argument);
      for (auto& keyword : args.keyword) keyword.second = escape(keyword.second);
    } else if (name == "join" && !args.positional.empty()) {
      std::vector<Value> items;
      for (const Value& item : iterate(args.positional[0], 0)) items.push_back(escape(item));
      args.positional[0] = Value::list(std::move(items));
    }
    Value result = method.call(args);
    if (!result.is_list()) return Value::markup(result.as_string());
    std::vector<Value> pieces;
    for (const Value& piece : result.items()) pieces.push_back(Value::markup(piece.as_string()));
    return Value::list(std::move(pieces));
  });
}

Value dict_method(const Value& dict, const std::string& name) {
  auto method = [&](std::function<Value(Arguments&)> f) { return Value::function("dict." + name, std::move(f)); };
  if (name == "get") {
    return method([dict](Arguments& args) {
      Params p(args, "get", {"key", "default"});
      const Value key = p.get(0);
      if (!key.hashable()) throw TemplateError(fmt::format("unhashable type: '{}'", key.type_name()));
      if (const Value* v = dict.dict_entries().find_item(key)) return *v;
      return p.get(1, Value::none());
    });
  }
  if (name == "items" || name == "keys" || name == "values") {
    return method([dict, name](Arguments& args) {
      Params(args, name.c_str(), {});
      std::vector<Value> out;
      for (const auto& [key, value] : dict.dict_entries().entries) {
        out.push_back(name == "items" ? Value::tuple({Value(key), value}) : name == "keys" ? Value(key) : value);
      }
      return Value::list(std::move(out));
    });
  }
  if (name == "copy") {
    return method([dict](Arguments& args) {
      Params(args, "copy", {});
      Value copy = Value::dict();
      copy.dict_entries() = dict.dict_entries();
      return copy;
    });
  }
  static constexpr std::string_view kMutating[] = {"pop", "popitem", "update", "setdefault", "clear"};
  for (auto m : kMutating) {
    if (name == m) return unsafe(name, "dict");
  }
  return Value();
}

Value list_method(const Value& list, const std::string& name) {
  if (name == "index" || name == "count") {
    return Value::function("list." + name, [list, name](Arguments& args) {
      Params p(args, name.c_str(), {"value"});
      const Value x = p.get(0);
      const auto& items = list.items();
      if (name == "count") return Value(static_cast<std::int64_t>(std::count(items.begin(), items.end(), x)));
      const auto it = std::find(items.begin(), items.end(), x);
      if (it == items.end()) throw TemplateError(fmt::format("{} is not in list", x.repr()));
      return Value(static_cast<std::int64_t>(it - items.begin()));
    });
  }
  static constexpr std::string_view kMutating[] = {"append", "pop", "extend", "insert", "remove", "sort", "reverse", "clear"};
  for (auto m : kMutating) {
    if (name == m) return unsafe(name, list.type_name());
  }
  return Value();
}

std::int64_t normalize_index(std::int64_t index, std::int64_t size) { return index < 0 ? index + size : index; }

}  // namespace

// ---- entry points ---------------------------------------------------------------------------------

Value call_filter(Evaluator& evaluator, const std::string& name, Value input, Arguments& args, int line) {
  const auto& table = filters();
  const auto it = table.find(name);
  if (it == table.end()) throw TemplateError(fmt::format("No filter named '{}'.", name), line);
  try {
    return it->second(evaluator, std::move(input), args);
  } catch (TemplateError& error) {
    if (error.line() > 0 || line == 0) throw;
    throw TemplateError(error.message(), line);
  }
}

bool call_test(Evaluator& evaluator, const std::string& name, const Value& input, Arguments& args, int line) {
  evaluator.step(line);
  const auto& table = tests();
  const auto it = table.find(name);
  if (it == table.end()) throw TemplateError(fmt::format("No test named '{}'.", name), line);
  try {
    return it->second(input, args);
  } catch (TemplateError& error) {
    if (error.line() > 0 || line == 0) throw;
    throw TemplateError(error.message(), line);
  }
}

Value get_attribute(Evaluator& evaluator, const Value& target, const std::string& name, int line) {
  switch (target.kind()) {
    case Value::Kind::kUndefined: throw TemplateError(target.undefined_name(), line);
    case Value::Kind::kDict: {
      if (!target.is_namespace()) {
        if (Value method = dict_method(target, name); !method.is_undefined()) return method;
      }
      if (const Value* v = target.dict_entries().find(name)) return *v;
      return Value::undefined(fmt::format("'{}' has no attribute '{}'",
                                          target.is_namespace() ? "Namespace object" : "dict object", name));
    }
    case Value::Kind::kString:
      if (target.is_markup()) return markup_method(evaluator, target, name);
      return string_method(evaluator, target.as_string(), name);
    case Value::Kind::kList:
      if (target.is_generator()) break;
      if (Value method = list_method(target, name); !method.is_undefined()) return method;
      break;
    case Value::Kind::kNone:
    case Value::Kind::kBool:
    case Value::Kind::kInt:
    case Value::Kind::kFloat:
    case Value::Kind::kFunction: break;
  }
  return Value::undefined(fmt::format("'{} object' has no attribute '{}'", target.type_name(), name));
}

Value get_item(const Value& target, const Value& key, int line) {
  switch (target.kind()) {
    case Value::Kind::kUndefined: throw TemplateError(target.undefined_name(), line);
    case Value::Kind::kDict:
      if (const Value* v = target.dict_entries().find_item(key)) return *v;
      return Value::undefined(fmt::format("'dict object' has no attribute {}", key.repr()));
    case Value::Kind::kList:
    case Value::Kind::kString: {
      if (!key.is_int() && !key.is_bool()) {
        return Value::undefined(fmt::format("'{} object' has no attribute {}", target.type_name(), key.repr()));
      }
      if (target.is_generator()) return Value::undefined("'generator object' has no attribute " + key.repr());
      if (target.is_list()) {
        const auto size = static_cast<std::int64_t>(target.items().size());
        const std::int64_t index = normalize_index(key.as_int(), size);
        if (index < 0 || index >= size) return Value::undefined(fmt::format("{} object has no element {}", target.type_name(), key.as_int()));
        return target.items()[static_cast<std::size_t>(index)];
      }
      auto parts = characters(target.as_string());
      const auto size = static_cast<std::int64_t>(parts.size());
      const std::int64_t index = normalize_index(key.as_int(), size);
      if (index < 0 || index >= size) return Value::undefined(fmt::format("str object has no element {}", key.as_int()));
      return string_like(target, std::string(parts[static_cast<std::size_t>(index)]));
    }
    case Value::Kind::kNone:
    case Value::Kind::kBool:
    case Value::Kind::kInt:
    case Value::Kind::kFloat:
    case Value::Kind::kFunction: break;
  }
  return Value::undefined(fmt::format("'{} object' has no attribute {}", target.type_name(), key.repr()));
}

Value slice(const Value& target, const Value& start, const Value& stop, const Value& step, int line) {
  if (target.is_undefined()) throw TemplateError(target.undefined_name(), line);
  auto bound = [&](const Value& v) -> std::optional<std::int64_t> {
    if (v.is_undefined() || v.is_none()) return std::nullopt;
    if (!v.is_int() && !v.is_bool()) throw TemplateError("slice indices must be integers or None", line);
    return v.as_int();
  };
  const std::int64_t stride = bound(step).value_or(1);
  if (stride == 0) throw TemplateError("slice step cannot be zero", line);
  std::vector<std::string_view> chars;
  std::int64_t size;
  if (target.is_string()) {
    chars = characters(target.as_string());
    size = static_cast<std::int64_t>(chars.size());
  } else if (target.is_list() && !target.is_generator()) {
    size = static_cast<std::int64_t>(target.items().size());
  } else {
    throw TemplateError(fmt::format("'{}' object is not subscriptable", target.type_name()), line);
  }
  // Python's slice.indices().
  auto clamp = [&](std::optional<std::int64_t> v, std::int64_t fallback) {
    if (!v) return fallback;
    std::int64_t i = *v < 0 ? *v + size : *v;
    if (stride > 0) return std::clamp<std::int64_t>(i, 0, size);
    return std::clamp<std::int64_t>(i, -1, size - 1);
  };
  const std::int64_t begin = clamp(bound(start), stride > 0 ? 0 : size - 1);
  const std::int64_t end = clamp(bound(stop), stride > 0 ? size : -1);
  std::vector<std::int64_t> picks;
  for (std::int64_t i = begin; stride > 0 ? i < end : i > end; i += stride) picks.push_back(i);
  if (target.is_string()) {
    std::string out;
    for (auto i : picks) out += chars[static_cast<std::size_t>(i)];
    return string_like(target, std::move(out));
  }
  std::vector<Value> out;
  for (auto i : picks) out.push_back(target.items()[static_cast<std::size_t>(i)]);
  return target.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
}

Value negate(const Value& operand, bool minus, int line) {
  if (operand.is_undefined()) throw TemplateError(operand.undefined_name(), line);
  if (operand.is_float()) return Value(minus ? -operand.as_double() : operand.as_double());
  if (operand.is_number()) {
    if (minus && operand.as_int() == std::numeric_limits<std::int64_t>::min()) throw TemplateError("integer overflow", line);
    return Value(minus ? -operand.as_int() : operand.as_int());
  }
  throw TemplateError(fmt::format("bad operand type for unary {}: '{}'", minus ? '-' : '+', operand.type_name()), line);
}

Value binary_operator(Evaluator& evaluator, const std::string& op, const Value& left, const Value& right, int line) {
  if (op == "==") return Value(left == right);
  if (op == "!=") return Value(!(left == right));
  if (op == "~") return check_size(evaluator, left.str() + right.str());
  if (op == "in" || op == "not in") {
    Arguments args;
    args.positional.push_back(right);
    bool found = right.is_undefined() ? false : tests().at("in")(left, args);
    return Value(op == "in" ? found : !found);
  }
  try {
    if (op == "<") return Value(less(left, right, "<"));
    if (op == ">") return Value(less(right, left, ">"));
    if (op == "<=") return Value(!less(right, left, "<="));
    if (op == ">=") return Value(!less(left, right, ">="));
  } catch (TemplateError& error) {
    throw TemplateError(error.message(), line);
  }
  if (left.is_undefined()) throw TemplateError(left.undefined_name(), line);
  if (right.is_undefined()) throw TemplateError(right.undefined_name(), line);
  auto unsupported = [&]() -> TemplateError {
    return TemplateError(fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", op, left.type_name(),
                                     right.type_name()),
                         line);
  };
  if (left.is_number() && right.is_number()) {
    const bool floating = left.is_float() || right.is_float();
    const std::int64_t a = left.as_int();
    const std::int64_t b = right.as_int();
    const double x = left.as_double();
    const double y = right.as_double();
    std::int64_t r = 0;
    if (op == "+") {
      if (floating) return Value(x + y);
      if (__builtin_add_overflow(a, b, &r)) throw TemplateError("integer overflow", line);
      return Value(r);
    }
    if (op == "-") {
      if (floating) return Value(x - y);
      if (__builtin_sub_overflow(a, b, &r)) throw TemplateError("integer overflow", line);
      return Value(r);
    }
    if (op == "*") {
      if (floating) return Value(x * y);
      if (__builtin_mul_overflow(a, b, &r)) throw TemplateError("integer overflow", line);
      return Value(r);
    }
    if (op == "/") {
      if (y == 0) throw TemplateError("division by zero", line);
      return Value(x / y);
    }
    if (op == "//" || op == "%") {
      if (y == 0) throw TemplateError("integer division or modulo by zero", line);
      if (floating) {
        const double m = std::fmod(x, y);
        const double mod = (m != 0 && ((m < 0) != (y < 0))) ? m + y : m;
        return op == "%" ? Value(mod) : Value(std::floor(x / y));
      }
      if (a == std::numeric_limits<std::int64_t>::min() && b == -1) throw TemplateError("integer overflow", line);
      std::int64_t q = a / b;
      std::int64_t m = a % b;
      if (m != 0 && ((m < 0) != (b < 0))) {
        m += b;
        --q;
      }
      return op == "%" ? Value(m) : Value(q);
    }
    if (op == "**") {
      if (!floating && b >= 0) {
        std::int64_t result = 1;
        for (std::int64_t i = 0; i < b; ++i) {
          if (__builtin_mul_overflow(result, a, &result)) throw TemplateError("integer overflow", line);
          if (result == 0 || result == 1) break;
        }
        return Value(result);
      }
      return Value(std::pow(x, y));
    }
    throw unsupported();
  }
  if (op == "+") {
    if (left.is_string() && right.is_string()) {
      // Markup + str (either order) escapes the plain string: jinja2's `'...'|safe + text`.
      if (left.is_markup() || right.is_markup()) {
        return Value::markup(check_size(evaluator, escape(left).as_string() + escape(right).as_string()).as_string());
      }
      return check_size(evaluator, left.as_string() + right.as_string());
    }
    if (left.is_list() && right.is_list() && left.is_tuple() == right.is_tuple() && !left.is_generator() &&
        !right.is_generator()) {
      if (left.items().size() + right.items().size() > evaluator.max_string_bytes() / 16) {
        throw TemplateError("a list grew past the output limit", line);
      }
      std::vector<Value> items = left.items();
      items.insert(items.end(), right.items().begin(), right.items().end());
      return left.is_tuple() ? Value::tuple(std::move(items)) : Value::list(std::move(items));
    }
    throw unsupported();
  }
  if (op == "*") {
    const Value& sequence = left.is_number() ? right : left;
    const Value& count = left.is_number() ? left : right;
    if ((sequence.is_string() || (sequence.is_list() && !sequence.is_generator())) && (count.is_int() || count.is_bool())) {
      const std::int64_t n = std::max<std::int64_t>(count.as_int(), 0);
      const std::size_t unit = sequence.is_string() ? sequence.as_string().size() : sequence.items().size() * 16;
      if (unit > 0 && static_cast<std::uint64_t>(n) > evaluator.max_string_bytes() / unit) {
        throw TemplateError("a repeated sequence would pass the output limit", line);
      }
      if (sequence.is_string()) {
        std::string out;
        for (std::int64_t i = 0; i < n; ++i) out += sequence.as_string();
        return string_like(sequence, std::move(out));
      }
      std::vector<Value> items;
      for (std::int64_t i = 0; i < n; ++i) items.insert(items.end(), sequence.items().begin(), sequence.items().end());
      return sequence.is_tuple() ? Value::tuple(std::move(items)) : Value::list(std::move(items));
    }
    throw unsupported();
  }
  if (op == "%" && left.is_string()) throw TemplateError("printf-style '%' formatting is not supported; use format()", line);
  throw unsupported();
}

std::vector<Value> iterate(const Value& value, int line) {
  switch (value.kind()) {
    case Value::Kind::kUndefined: return {};
    case Value::Kind::kList:
      if (value.is_generator()) return std::exchange(value.items(), {});  // a generator runs once
      return value.items();
    case Value::Kind::kDict: {
      if (value.is_namespace()) break;
      std::vector<Value> keys;
      for (const auto& [key, item] : value.dict_entries().entries) keys.emplace_back(key);
      return keys;
    }
    case Value::Kind::kString: {
      std::vector<Value> chars;
      for (auto ch : characters(value.as_string())) chars.emplace_back(std::string(ch));
      return chars;
    }
    case Value::Kind::kNone:
    case Value::Kind::kBool:
    case Value::Kind::kInt:
    case Value::Kind::kFloat:
    case Value::Kind::kFunction: break;
  }
  throw TemplateError(fmt::format("'{}' object is not iterable", value.type_name()), line);
}

Value global_function(const std::string& name) {
  if (name == "range") {
    return Value::function("range", [](Arguments& args) {
      if (!args.keyword.empty() || args.positional.empty() || args.positional.size() > 3) {
        throw TemplateError("range expects 1 to 3 integer arguments");
      }
      std::int64_t start = 0, stop = 0, stride = 1;
      if (args.positional.size() == 1) {
        stop = require_int(args.positional[0], "range argument");
      } else {
        start = require_int(args.positional[0], "range argument");
        stop = require_int(args.positional[1], "range argument");
        if (args.positional.size() == 3) stride = require_int(args.positional[2], "range argument");
      }
      if (stride == 0) throw TemplateError("range() arg 3 must not be zero");
      constexpr std::int64_t kMaxRange = 100'000;  // jinja2's sandbox caps range() at this many items too
      std::vector<Value> out;
      for (std::int64_t i = start; stride > 0 ? i < stop : i > stop; i += stride) {
        if (static_cast<std::int64_t>(out.size()) >= kMaxRange) {
          throw TemplateError("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
        }
        out.emplace_back(i);
      }
      return Value::list(std::move(out));
    });
  }
  if (name == "namespace" || name == "dict") {
    const bool is_namespace = name == "namespace";
    return Value::function(name, [is_namespace](Arguments& args) {
      Value out = is_namespace ? Value::namespace_object() : Value::dict();
      for (const Value& initial : args.positional) {
        if (!initial.is_dict()) {
          throw TemplateError(fmt::format("{}() takes a dict or keyword arguments", is_namespace ? "namespace" : "dict"));
        }
        for (const auto& [key, value] : initial.dict_entries().entries) out.dict_entries().set_item(key, value);
      }
      for (const auto& [key, value] : args.keyword) out.dict_entries().set(key, value);
      return out;
    });
  }
  if (name == "raise_exception") {
    return Value::function("raise_exception", [](Arguments& args) -> Value {
      Params p(args, "raise_exception", {"message"});
      throw TemplateError::raised(p.get(0).str(), 0);
    });
  }
  if (name == "strftime_now") {
    return Value::function("strftime_now", [](Arguments& args) {
      Params p(args, "strftime_now", {"format"});
      const std::string format = require_string(p.get(0), "strftime_now format");
      const std::time_t now = std::time(nullptr);
      std::tm local{};
      localtime_r(&now, &local);
      char buffer[256];
      const std::size_t n = std::strftime(buffer, sizeof buffer, format.c_str(), &local);
      if (n == 0 && !format.empty()) throw TemplateError("strftime_now: the formatted date is empty or too long");
      return Value(std::string(buffer, n));
    });
  }
  return Value();
}

}  // namespace pagedllm::jinja
