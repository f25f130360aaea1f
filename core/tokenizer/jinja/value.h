#pragma once
// The values a chat template computes with, with Python's semantics where the
// output depends on them: jinja2 runs on Python objects, so `{{ 1 / 2 }}`
// prints 0.5, `{{ [1, 'a'] }}` prints [1, 'a'], `True == 1` holds, and a
// string's length counts code points. Lists and dicts are shared by
// reference, as Python's are; namespaces are dicts whose attributes `set`
// may assign. A string may be jinja2's Markup (what `|safe` and `|escape`
// return): concatenating it with a plain string HTML-escapes the plain one.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace pagedllm::jinja {

class Value;

// A call's arguments as written: positional first, then name=value pairs.
struct Arguments {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

using Function = std::function<Value(Arguments&)>;

// A dict's entries in insertion order (Python 3.7+). A key is any hashable value (a string,
// number, None or tuple of those) and keys match with Python's ==, so 1, 1.0 and True are one
// key and the first one written stays, as in Python.
struct Dict {
  std::vector<std::pair<Value, Value>> entries;

  // The entry whose key is the string `name` (attributes, variables, JSON keys).
  const Value* find(std::string_view name) const;
  void set(std::string name, Value value);
  void set(const char* name, Value value);
  // dict[key]: nullptr for a key that is absent or unhashable.
  const Value* find_item(const Value& key) const;
  // dict[key] = value: a TemplateError ("unhashable type: 'list'") for a list or dict key.
  void set_item(Value key, Value value);
};

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kFunction };

  Value() = default;  // undefined, unnamed
  static Value undefined(std::string name);
  static Value none();
  Value(bool b);  // NOLINT(google-explicit-constructor): values are written as literals
  Value(int i) : Value(static_cast<std::int64_t>(i)) {}
  Value(std::int64_t i);
  Value(double f);
  Value(std::string s);
  Value(const char* s) : Value(std::string(s)) {}
  // jinja2's Markup: a string that is already HTML-safe.
  static Value markup(std::string s);
  static Value list(std::vector<Value> items = {});
  static Value tuple(std::vector<Value> items);
  // What jinja2's map/select/reject filters return: a Python generator, always
  // true, without a length or JSON form, and empty once iterated.
  static Value generator(std::vector<Value> items);
  static Value dict();
  static Value namespace_object();
  static Value function(std::string name, Function function);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_markup() const { return kind_ == Kind::kString && markup_; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_tuple() const { return kind_ == Kind::kList && tuple_; }
  bool is_generator() const { return kind_ == Kind::kList && generator_; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_namespace() const { return kind_ == Kind::kDict && namespace_; }
  bool is_function() const { return kind_ == Kind::kFunction; }

  bool truthy() const;  // Python's bool(); undefined is false
  // Whether Python can hash it (be a dict key): not a list or dict, nor a tuple holding one.
  bool hashable() const;
  bool as_bool() const { return bool_; }
  std::int64_t as_int() const { return kind_ == Kind::kBool ? (bool_ ? 1 : 0) : int_; }
  double as_double() const;  // any number
  const std::string& as_string() const { return string_; }
  // Undefined: the name it was looked up by (for "'x' is undefined").
  const std::string& undefined_name() const { return string_; }
  std::vector<Value>& items() const { return *list_; }
  Dict& dict_entries() const { return *dict_; }
  const std::string& function_name() const { return string_; }
  Value call(Arguments& arguments) const { return (*function_)(arguments); }

  // Python's type name, for error messages ("'int' object is not iterable").
  std::string type_name() const;

  // str(): what {{ value }} prints (undefined prints nothing).
  std::string str() const;
  // repr(): how a value prints inside a list or dict.
  std::string repr() const;

  // json.dumps(value, ensure_ascii=False, indent=..., separators=..., sort_keys=...).
  struct JsonStyle {
    int indent = -1;  // < 0: None
    std::string item_separator;  // empty: Python's default for the indent
    std::string key_separator;
    bool sort_keys = false;
  };
  std::string to_json(const JsonStyle& style) const;

  static Value from_json(const nlohmann::ordered_json& json);  // keeps the keys in their order

  // Python's ==, where True == 1 and 1 == 1.0; undefined equals only undefined.
  friend bool operator==(const Value& a, const Value& b);

 private:
  Kind kind_ = Kind::kUndefined;
  bool bool_ = false;
  bool tuple_ = false;
  bool generator_ = false;
  bool namespace_ = false;
  bool markup_ = false;
  std::int64_t int_ = 0;
  double float_ = 0;
  std::string string_;
  std::shared_ptr<std::vector<Value>> list_;
  std::shared_ptr<Dict> dict_;
  std::shared_ptr<Function> function_;
};

// Python's repr() of a float: the shortest text that reads back the same, in
// fixed notation from 1e-4 up to 1e16 ("0.5", "1.0", "1e+16", "inf", "nan").
std::string python_float_repr(double value);

}  // namespace pagedllm::jinja
