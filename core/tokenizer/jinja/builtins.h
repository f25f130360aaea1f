#pragma once
// What a template's expressions reach besides its own syntax (internal to the
// Jinja engine): Python's operators, attribute and item access with jinja2's
// rules, the string/dict/list methods the ImmutableSandboxedEnvironment
// allows, jinja2's filters and tests, and the globals transformers provides.
// Errors are TemplateErrors with jinja2's and Python's wording.

#include <cstddef>
#include <string>
#include <vector>

#include "core/tokenizer/jinja/value.h"

namespace pagedllm::jinja {

// The renderer, as the builtins need it: every loop a filter runs counts as
// steps, and no string grows past the output limit.
class Evaluator {
 public:
  virtual void step(int line) = 0;
  virtual std::size_t max_string_bytes() const = 0;

 protected:
  ~Evaluator() = default;
};

Value call_filter(Evaluator& evaluator, const std::string& name, Value input, Arguments& args, int line);
bool call_test(Evaluator& evaluator, const std::string& name, const Value& input, Arguments& args, int line);

Value get_attribute(Evaluator& evaluator, const Value& target, const std::string& name, int line);
Value get_item(const Value& target, const Value& key, int line);
Value slice(const Value& target, const Value& start, const Value& stop, const Value& step, int line);
Value negate(const Value& operand, bool minus, int line);
Value binary_operator(Evaluator& evaluator, const std::string& op, const Value& left, const Value& right, int line);

// The items a for loop visits: a list's items, a dict's keys, a string's characters.
std::vector<Value> iterate(const Value& value, int line);

// range, namespace, dict, raise_exception, strftime_now; undefined for other names.
Value global_function(const std::string& name);

}  // namespace pagedllm::jinja
