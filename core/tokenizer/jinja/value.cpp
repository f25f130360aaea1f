#include "core/tokenizer/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/tokenizer/jinja/template.h"
#include "core/tokenizer/utf8.h"

namespace pagedllm::jinja {

const Value* Dict::find(std::string_view name) const {
  for (const auto& [key, value] : entries) {
    if (key.is_string() && key.as_string() == name) return &value;
  }
  return nullptr;
}

void Dict::set(std::string name, Value value) { set_item(Value(std::move(name)), std::move(value)); }

void Dict::set(const char* name, Value value) { set_item(Value(name), std::move(value)); }

const Value* Dict::find_item(const Value& key) const {
  if (!key.hashable()) return nullptr;
  for (const auto& [existing, value] : entries) {
    if (existing == key) return &value;
  }
  return nullptr;
}

void Dict::set_item(Value key, Value value) {
  if (!key.hashable()) throw TemplateError(fmt::format("unhashable type: '{}'", key.type_name()));
  for (auto& [existing, slot] : entries) {
    if (existing == key) {
      slot = std::move(value);
      return;
    }
  }
  entries.emplace_back(std::move(key), std::move(value));
}

Value Value::undefined(std::string name) {
  Value v;
  v.string_ = std::move(name);
  return v;
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value::Value(bool b) : kind_(Kind::kBool), bool_(b) {}
Value::Value(std::int64_t i) : kind_(Kind::kInt), int_(i) {}
Value::Value(double f) : kind_(Kind::kFloat), float_(f) {}
Value::Value(std::string s) : kind_(Kind::kString), string_(std::move(s)) {}

Value Value::markup(std::string s) {
  Value v(std::move(s));
  v.markup_ = true;
  return v;
}

Value Value::list(std::vector<Value> items) {
  Value v;
  v.kind_ = Kind::kList;
  v.list_ = std::make_shared<std::vector<Value>>(std::move(items));
  return v;
}

Value Value::tuple(std::vector<Value> items) {
  Value v = list(std::move(items));
  v.tuple_ = true;
  return v;
}

Value Value::generator(std::vector<Value> items) {
  Value v = list(std::move(items));
  v.generator_ = true;
  return v;
}

Value Value::dict() {
  Value v;
  v.kind_ = Kind::kDict;
  v.dict_ = std::make_shared<Dict>();
  return v;
}

Value Value::namespace_object() {
  Value v = dict();
  v.namespace_ = true;
  return v;
}

Value Value::function(std::string name, Function function) {
  Value v;
  v.kind_ = Kind::kFunction;
  v.string_ = std::move(name);
  v.function_ = std::make_shared<Function>(std::move(function));
  return v;
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return bool_;
    case Kind::kInt: return int_ != 0;
    case Kind::kFloat: return float_ != 0;
    case Kind::kString: return !string_.empty();
    case Kind::kList: return generator_ || !list_->empty();
    case Kind::kDict: return namespace_ || !dict_->entries.empty();
    case Kind::kFunction: return true;
  }
  return false;
}

bool Value::hashable() const {
  if (kind_ == Kind::kDict) return namespace_;  // a namespace hashes by identity, as any object
  if (kind_ != Kind::kList || generator_) return true;
  if (!tuple_) return false;
  return std::all_of(list_->begin(), list_->end(), [](const Value& item) { return item.hashable(); });
}

double Value::as_double() const {
  if (kind_ == Kind::kFloat) return float_;
  return static_cast<double>(as_int());
}

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return markup_ ? "Markup" : "str";
    case Kind::kList: return generator_ ? "generator" : tuple_ ? "tuple" : "list";
    case Kind::kDict: return namespace_ ? "Namespace" : "dict";
    case Kind::kFunction: return "function";
  }
  return "object";
}

std::string python_float_repr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  // The shortest round-trip digits, then Python's choice of notation.
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, value, std::chars_format::scientific);
  std::string scientific(buffer, result.ptr);
  const std::size_t e = scientific.find('e');
  std::string mantissa = scientific.substr(0, e);
  const int exponent = std::stoi(scientific.substr(e + 1));
  const bool negative = mantissa[0] == '-';
  if (negative) mantissa.erase(0, 1);
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits += c;
  }
  std::string out = negative ? "-" : "";
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) {
      out += "0." + std::string(static_cast<std::size_t>(-exponent - 1), '0') + digits;
    } else if (static_cast<std::size_t>(exponent) + 1 >= digits.size()) {
      out += digits + std::string(static_cast<std::size_t>(exponent) + 1 - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, static_cast<std::size_t>(exponent) + 1) + "." +
             digits.substr(static_cast<std::size_t>(exponent) + 1);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  out += fmt::format("e{}{:02d}", exponent < 0 ? '-' : '+', std::abs(exponent));
  return out;
}

namespace {

std::string python_string_repr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    if (c == quote || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  out += quote;
  return out;
}

void append_json_string(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          out += fmt::format("\\u{:04x}", c);
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

// The string json.dumps writes for a dict key: numbers, booleans and None become their JSON text.
std::string json_key(const Value& key) {
  switch (key.kind()) {
    case Value::Kind::kString: return key.as_string();
    case Value::Kind::kNone: return "null";
    case Value::Kind::kBool: return key.as_bool() ? "true" : "false";
    case Value::Kind::kInt: return std::to_string(key.as_int());
    case Value::Kind::kFloat: {
      const double f = key.as_double();
      if (std::isnan(f)) return "NaN";
      if (std::isinf(f)) return f > 0 ? "Infinity" : "-Infinity";
      return python_float_repr(f);
    }
    case Value::Kind::kUndefined:
    case Value::Kind::kList:
    case Value::Kind::kDict:
    case Value::Kind::kFunction: break;
  }
  throw TemplateError(fmt::format("keys must be str, int, float, bool or None, not {}", key.type_name()));
}

bool json_key_less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() < b.as_double();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();
  throw TemplateError(fmt::format("'<' not supported between instances of '{}' and '{}'", b.type_name(), a.type_name()));
}

void append_json(std::string& out, const Value& value, const Value::JsonStyle& style, int depth) {
  if (depth > 512) throw TemplateError("tojson: a value nested deeper than 512 levels");
  const bool indented = style.indent >= 0;
  const std::string item_separator = !style.item_separator.empty() ? style.item_separator : indented ? "," : ", ";
  const std::string key_separator = !style.key_separator.empty() ? style.key_separator : ": ";
  auto newline = [&](int level) {
    if (!indented) return;
    out += '\n';
    out.append(static_cast<std::size_t>(style.indent) * static_cast<std::size_t>(level), ' ');
  };
  switch (value.kind()) {
    case Value::Kind::kNone: out += "null"; return;
    case Value::Kind::kBool: out += value.as_bool() ? "true" : "false"; return;
    case Value::Kind::kInt: out += std::to_string(value.as_int()); return;
    case Value::Kind::kFloat: {
      const double f = value.as_double();
      if (std::isnan(f)) {
        out += "NaN";
      } else if (std::isinf(f)) {
        out += f > 0 ? "Infinity" : "-Infinity";
      } else {
        out += python_float_repr(f);
      }
      return;
    }
    case Value::Kind::kString: append_json_string(out, value.as_string()); return;
    case Value::Kind::kList: {
      if (value.is_generator()) throw TemplateError("Object of type generator is not JSON serializable");
      const auto& items = value.items();
      if (items.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (std::size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out += item_separator;
        newline(depth + 1);
        append_json(out, items[i], style, depth + 1);
      }
      newline(depth);
      out += ']';
      return;
    }
    case Value::Kind::kDict: {
      std::vector<const std::pair<Value, Value>*> entries;
      for (const auto& entry : value.dict_entries().entries) entries.push_back(&entry);
      if (style.sort_keys) {
        // Python sorts the keys as they are (numbers as numbers) before making them strings,
        // and cannot order a str and an int.
        std::stable_sort(entries.begin(), entries.end(), [](auto* a, auto* b) { return json_key_less(a->first, b->first); });
      }
      if (entries.empty()) {
        out += "{}";
        return;
      }
      out += '{';
      for (std::size_t i = 0; i < entries.size(); ++i) {
        if (i > 0) out += item_separator;
        newline(depth + 1);
        append_json_string(out, json_key(entries[i]->first));
        out += key_separator;
        append_json(out, entries[i]->second, style, depth + 1);
      }
      newline(depth);
      out += '}';
      return;
    }
    case Value::Kind::kUndefined:
    case Value::Kind::kFunction:
      throw TemplateError(fmt::format("Object of type {} is not JSON serializable", value.type_name()));
  }
}

}  // namespace

std::string Value::str() const {
  if (kind_ == Kind::kUndefined) return "";
  if (kind_ == Kind::kString) return string_;
  return repr();
}

std::string Value::repr() const {
  switch (kind_) {
    case Kind::kUndefined: return "";
    case Kind::kNone: return "None";
    case Kind::kBool: return bool_ ? "True" : "False";
    case Kind::kInt: return std::to_string(int_);
    case Kind::kFloat: return python_float_repr(float_);
    case Kind::kString: return markup_ ? "Markup(" + python_string_repr(string_) + ")" : python_string_repr(string_);
    case Kind::kList: {
      if (generator_) return "<generator object>";
      std::string out = tuple_ ? "(" : "[";
      for (std::size_t i = 0; i < list_->size(); ++i) {
        if (i > 0) out += ", ";
        out += (*list_)[i].repr();
      }
      if (tuple_ && list_->size() == 1) out += ',';
      out += tuple_ ? ")" : "]";
      return out;
    }
    case Kind::kDict: {
      if (namespace_) return "<Namespace>";
      std::string out = "{";
      bool first = true;
      for (const auto& [key, value] : dict_->entries) {
        if (!first) out += ", ";
        first = false;
        out += key.repr() + ": " + value.repr();
      }
      return out + "}";
    }
    case Kind::kFunction: return "<function " + string_ + ">";
  }
  return "";
}

std::string Value::to_json(const JsonStyle& style) const {
  std::string out;
  append_json(out, *this, style, 0);
  return out;
}

Value Value::from_json(const nlohmann::ordered_json& json) {
  switch (json.type()) {
    case nlohmann::ordered_json::value_t::null: return none();
    case nlohmann::ordered_json::value_t::boolean: return Value(json.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value(json.get<std::int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const auto u = json.get<std::uint64_t>();
      if (u > static_cast<std::uint64_t>(INT64_MAX)) return Value(static_cast<double>(u));
      return Value(static_cast<std::int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value(json.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value(json.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(json.size());
      for (const auto& item : json) items.push_back(from_json(item));
      return list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Value v = dict();
      for (const auto& [key, item] : json.items()) v.dict_->set(key, from_json(item));
      return v;
    }
    case nlohmann::ordered_json::value_t::binary:
    case nlohmann::ordered_json::value_t::discarded: break;
  }
  throw TemplateError("a JSON value of an unsupported type (binary) for a template");
}

bool operator==(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind_ != b.kind_) return false;
  switch (a.kind_) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return true;
    case Value::Kind::kString: return a.string_ == b.string_;
    case Value::Kind::kList: {
      if (a.generator_ || b.generator_) return a.list_ == b.list_;
      if (a.tuple_ != b.tuple_ || a.list_->size() != b.list_->size()) return false;
      for (std::size_t i = 0; i < a.list_->size(); ++i) {
        if (!((*a.list_)[i] == (*b.list_)[i])) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      if (a.namespace_ || b.namespace_) return a.dict_ == b.dict_;
      if (a.dict_->entries.size() != b.dict_->entries.size()) return false;
      for (const auto& [key, value] : a.dict_->entries) {
        const Value* other = b.dict_->find_item(key);
        if (!other || !(value == *other)) return false;
      }
      return true;
    }
    case Value::Kind::kFunction: return a.function_ == b.function_;
    case Value::Kind::kBool:
    case Value::Kind::kInt:
    case Value::Kind::kFloat: break;  // numbers compared above
  }
  return false;
}

}  // namespace pagedllm::jinja
