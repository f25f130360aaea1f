// The renderer: walks the syntax tree with jinja2's scoping (a for loop's
// body has its own scope, so templates carry state out of loops in a
// namespace; a macro sees its arguments and the template's globals), counts
// every step against RenderLimits, and evaluates expressions with Python's
// semantics (value.h). Filters, tests, methods and globals are in builtins.cpp.

#include <algorithm>
#include <memory>

#include <fmt/format.h>

#include "core/tokenizer/jinja/builtins.h"
#include "core/tokenizer/jinja/syntax.h"
#include "core/tokenizer/jinja/template.h"

namespace pagedllm::jinja {

TemplateError::TemplateError(const std::string& message, int line)
    : std::runtime_error(line > 0 ? fmt::format("line {}: {}", line, message) : message),
      message_(message),
      line_(line) {}

TemplateError TemplateError::raised(const std::string& message, int line) {
  TemplateError error(message, line);
  error.raised_by_template_ = true;
  return error;
}

namespace {

struct Scope {
  Scope* parent = nullptr;
  std::vector<std::pair<std::string, Value>> variables;

  const Value* find(std::string_view name) const {
    for (const Scope* s = this; s; s = s->parent) {
      for (const auto& [key, value] : s->variables) {
        if (key == name) return &value;
      }
    }
    return nullptr;
  }
  void set(const std::string& name, Value value) {
    for (auto& [key, existing] : variables) {
      if (key == name) {
        existing = std::move(value);
        return;
      }
    }
    variables.emplace_back(name, std::move(value));
  }
};

enum class Flow { kNormal, kBreak, kContinue };

class Renderer final : public Evaluator {
 public:
  Renderer(const Value& variables, const RenderLimits& limits) : limits_(limits) {
    for (const auto& [key, value] : variables.dict_entries().entries) {
      if (!key.is_string()) throw TemplateError("a template's variable names must be strings, not " + key.type_name());
      globals_.set(key.as_string(), value);
    }
  }

  std::string run(const Node& root) {
    std::string out;
    out_ = &out;
    Flow flow = execute(root.body, globals_);
    if (flow != Flow::kNormal) throw TemplateError("break or continue outside a loop");
    return out;
  }

  void step(int line) override {
    if (++steps_ > limits_.max_steps) {
      throw TemplateError(fmt::format("the template ran past {} steps (a loop without end?)", limits_.max_steps), line);
    }
  }
  std::size_t max_string_bytes() const override { return limits_.max_output_bytes; }

 private:
  void write(std::string_view text, int line) {
    if (out_->size() + text.size() > limits_.max_output_bytes) {
      throw TemplateError(fmt::format("the template's output passed {} bytes", limits_.max_output_bytes), line);
    }
    out_->append(text);
  }

  // Renders `body` into a string of its own (macro calls, block sets, filter blocks).
  std::string capture(const Body& body, Scope& scope, int line) {
    std::string text;
    std::string* saved = out_;
    out_ = &text;
    Flow flow;
    try {
      flow = execute(body, scope);
    } catch (...) {
      out_ = saved;
      throw;
    }
    out_ = saved;
    if (flow != Flow::kNormal) throw TemplateError("break or continue outside a loop", line);
    return text;
  }

  Flow execute(const Body& body, Scope& scope) {
    for (const auto& node : body) {
      const Flow flow = execute(*node, scope);
      if (flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

  Flow execute(const Node& node, Scope& scope) {
    step(node.line);
    switch (node.type) {
      case Node::Type::kTemplate: return execute(node.body, scope);
      case Node::Type::kText: write(node.text, node.line); return Flow::kNormal;
      case Node::Type::kOutput: write(evaluate(*node.value, scope).str(), node.line); return Flow::kNormal;
      case Node::Type::kIf:
        for (const auto& [condition, body] : node.branches) {
          if (evaluate(*condition, scope).truthy()) return execute(body, scope);
        }
        return execute(node.else_body, scope);
      case Node::Type::kFor: return loop(node, scope);
      case Node::Type::kSet: {
        Value value = evaluate(*node.value, scope);
        if (!node.attribute_owner.empty()) {
          const Value* owner = scope.find(node.attribute_owner);
          if (!owner || !owner->is_namespace()) {
            throw TemplateError(fmt::format("cannot assign attribute on non-namespace object '{}'", node.attribute_owner),
                                node.line);
          }
          owner->dict_entries().set(node.attribute, std::move(value));
        } else {
          assign(node.targets, std::move(value), scope, node.line);
        }
        return Flow::kNormal;
      }
      case Node::Type::kSetBlock: {
        Value text(capture(node.body, scope, node.line));
        if (node.value) text = apply_filters(*node.value, std::move(text), scope);
        scope.set(node.targets[0], std::move(text));
        return Flow::kNormal;
      }
      case Node::Type::kMacro: scope.set(node.name, macro(node)); return Flow::kNormal;
      case Node::Type::kBreak: return Flow::kBreak;
      case Node::Type::kContinue: return Flow::kContinue;
      case Node::Type::kFilterBlock: {
        Value text(capture(node.body, scope, node.line));
        write(apply_filters(*node.value, std::move(text), scope).str(), node.line);
        return Flow::kNormal;
      }
    }
    return Flow::kNormal;
  }

  void assign(const std::vector<std::string>& targets, Value value, Scope& scope, int line) {
    if (targets.size() == 1) {
      scope.set(targets[0], std::move(value));
      return;
    }
    std::vector<Value> items = iterate(value, line);
    if (items.size() != targets.size()) {
      throw TemplateError(fmt::format("cannot unpack {} values into {} names", items.size(), targets.size()), line);
    }
    for (std::size_t i = 0; i < targets.size(); ++i) scope.set(targets[i], std::move(items[i]));
  }

  Flow loop(const Node& node, Scope& scope) {
    std::vector<Value> items = iterate(evaluate(*node.value, scope), node.line);
    if (node.condition) {
      std::vector<Value> kept;
      for (auto& item : items) {
        Scope filter_scope{&scope, {}};
        assign(node.targets, item, filter_scope, node.line);
        if (evaluate(*node.condition, filter_scope).truthy()) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    if (items.empty()) return execute(node.else_body, scope);
    const auto length = static_cast<std::int64_t>(items.size());
    // One loop object for the whole loop, its fields updated in place each iteration (as
    // jinja2's LoopContext is one object).
    Value loop_object = Value::dict();
    Dict& loop_state = loop_object.dict_entries();
    auto index = std::make_shared<std::int64_t>(0);
    for (const char* field : {"index", "index0", "revindex", "revindex0", "first", "last", "previtem", "nextitem"}) {
      loop_state.set(field, Value());
    }
    loop_state.set("length", Value(length));
    loop_state.set("depth", Value(1));
    loop_state.set("depth0", Value(0));
    loop_state.set("cycle", Value::function("loop.cycle", [index](Arguments& args) {
      if (args.positional.empty()) throw TemplateError("no items for cycling given");
      return args.positional[static_cast<std::size_t>(*index) % args.positional.size()];
    }));
    Scope body_scope{&scope, {}};
    for (std::int64_t i = 0; i < length; ++i) {
      step(node.line);  // an empty body still counts
      *index = i;
      auto& fields = loop_state.entries;
      fields[0].second = Value(i + 1);
      fields[1].second = Value(i);
      fields[2].second = Value(length - i);
      fields[3].second = Value(length - i - 1);
      fields[4].second = Value(i == 0);
      fields[5].second = Value(i == length - 1);
      fields[6].second = i > 0 ? items[static_cast<std::size_t>(i - 1)] : Value::undefined("there is no previous item");
      fields[7].second = i + 1 < length ? items[static_cast<std::size_t>(i + 1)] : Value::undefined("there is no next item");
      body_scope.variables.clear();
      body_scope.set("loop", loop_object);
      assign(node.targets, items[static_cast<std::size_t>(i)], body_scope, node.line);
      if (execute(node.body, body_scope) == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  Value macro(const Node& node) {
    const Node* definition = &node;
    return Value::function(node.name, [this, definition](Arguments& args) {
      if (++call_depth_ > limits_.max_call_depth) {
        --call_depth_;
        throw TemplateError(fmt::format("macro calls nested deeper than {} (recursion without end?)",
                                        limits_.max_call_depth),
                            definition->line);
      }
      const auto& parameters = definition->parameters;
      if (args.positional.size() > parameters.size()) {
        --call_depth_;
        throw TemplateError(fmt::format("macro '{}' takes not more than {} argument(s)", definition->name,
                                        parameters.size()),
                            definition->line);
      }
      Scope call_scope{&globals_, {}};
      std::string result;
      try {
        for (std::size_t p = 0; p < parameters.size(); ++p) {
          const std::string& name = parameters[p].first;
          Value value = Value::undefined(fmt::format("'{}' is undefined", name));
          if (p < args.positional.size()) {
            value = args.positional[p];
          } else if (auto k = std::find_if(args.keyword.begin(), args.keyword.end(),
                                           [&](const auto& kw) { return kw.first == name; });
                     k != args.keyword.end()) {
            value = k->second;
          } else if (parameters[p].second) {
            value = evaluate(*parameters[p].second, call_scope);
          }
          call_scope.set(name, std::move(value));
        }
        for (const auto& keyword : args.keyword) {  // not a structured binding: clang 14 cannot capture one
          const std::string& name = keyword.first;
          if (std::none_of(parameters.begin(), parameters.end(), [&](const auto& p) { return p.first == name; })) {
            throw TemplateError(fmt::format("macro '{}' takes no keyword argument '{}'", definition->name, name),
                                definition->line);
          }
        }
        result = capture(definition->body, call_scope, definition->line);
      } catch (...) {
        --call_depth_;
        throw;
      }
      --call_depth_;
      return Value(std::move(result));
    });
  }

  Value lookup(const std::string& name, const Scope& scope) const {
    if (const Value* v = scope.find(name)) return *v;
    if (Value builtin = global_function(name); !builtin.is_undefined()) return builtin;
    return Value::undefined(fmt::format("'{}' is undefined", name));
  }

  // The filters of a kFilter chain whose innermost input is null, applied to `input`.
  Value apply_filters(const Expr& chain, Value input, Scope& scope) {
    if (!chain.operands[0]) return filter(chain, std::move(input), scope);
    Value inner = apply_filters(*chain.operands[0], std::move(input), scope);
    return filter(chain, std::move(inner), scope);
  }

  Arguments arguments(const Expr& e, std::size_t first, Scope& scope) {
    Arguments args;
    for (std::size_t i = first; i < e.operands.size(); ++i) args.positional.push_back(evaluate(*e.operands[i], scope));
    for (const auto& [name, value] : e.keywords) args.keyword.emplace_back(name, evaluate(*value, scope));
    return args;
  }

  Value filter(const Expr& e, Value input, Scope& scope) {
    Arguments args = arguments(e, 1, scope);
    return call_filter(*this, e.name, std::move(input), args, e.line);
  }

  Value evaluate(const Expr& e, Scope& scope) {
    step(e.line);
    switch (e.type) {
      case Expr::Type::kLiteral: return e.literal;
      case Expr::Type::kName: return lookup(e.name, scope);
      case Expr::Type::kList:
      case Expr::Type::kTuple: {
        std::vector<Value> items;
        items.reserve(e.operands.size());
        for (const auto& operand : e.operands) items.push_back(evaluate(*operand, scope));
        return e.type == Expr::Type::kList ? Value::list(std::move(items)) : Value::tuple(std::move(items));
      }
      case Expr::Type::kDict: {
        Value dict = Value::dict();
        for (std::size_t i = 0; i + 1 < e.operands.size(); i += 2) {
          Value key = evaluate(*e.operands[i], scope);
          if (!key.hashable()) throw TemplateError(fmt::format("unhashable type: '{}'", key.type_name()), e.line);
          dict.dict_entries().set_item(std::move(key), evaluate(*e.operands[i + 1], scope));
        }
        return dict;
      }
      case Expr::Type::kAttribute: return get_attribute(*this, evaluate(*e.operands[0], scope), e.name, e.line);
      case Expr::Type::kItem: return get_item(evaluate(*e.operands[0], scope), evaluate(*e.operands[1], scope), e.line);
      case Expr::Type::kSlice: {
        Value target = evaluate(*e.operands[0], scope);
        Value bounds[3];
        for (int i = 0; i < 3; ++i) {
          if (e.operands[static_cast<std::size_t>(i) + 1]) bounds[i] = evaluate(*e.operands[static_cast<std::size_t>(i) + 1], scope);
        }
        return slice(target, bounds[0], bounds[1], bounds[2], e.line);
      }
      case Expr::Type::kCall: {
        Value callee = evaluate(*e.operands[0], scope);
        Arguments args = arguments(e, 1, scope);
        if (callee.is_undefined()) throw TemplateError(callee.undefined_name(), e.line);
        if (!callee.is_function()) throw TemplateError(fmt::format("'{}' object is not callable", callee.type_name()), e.line);
        try {
          return callee.call(args);
        } catch (TemplateError& error) {
          if (error.line() > 0) throw;
          if (error.raised_by_template()) throw TemplateError::raised(error.message(), e.line);
          throw TemplateError(error.message(), e.line);
        }
      }
      case Expr::Type::kFilter: return filter(e, evaluate(*e.operands[0], scope), scope);
      case Expr::Type::kTest: {
        Value input = evaluate(*e.operands[0], scope);
        Arguments args = arguments(e, 1, scope);
        const bool result = call_test(*this, e.name, input, args, e.line);
        return Value(result != e.negated);
      }
      case Expr::Type::kUnary: {
        Value operand = evaluate(*e.operands[0], scope);
        if (e.name == "not") return Value(!operand.truthy());
        return negate(operand, e.name == "-", e.line);
      }
      case Expr::Type::kBinary: {
        if (e.name == "and") {
          Value left = evaluate(*e.operands[0], scope);
          return left.truthy() ? evaluate(*e.operands[1], scope) : left;
        }
        if (e.name == "or") {
          Value left = evaluate(*e.operands[0], scope);
          return left.truthy() ? left : evaluate(*e.operands[1], scope);
        }
        Value left = evaluate(*e.operands[0], scope);
        Value right = evaluate(*e.operands[1], scope);
        return binary_operator(*this, e.name, left, right, e.line);
      }
      case Expr::Type::kCondition: {
        if (evaluate(*e.operands[1], scope).truthy()) return evaluate(*e.operands[0], scope);
        if (e.operands[2]) return evaluate(*e.operands[2], scope);
        return Value::undefined("the condition was false and there is no else");
      }
    }
    return Value();
  }

  const RenderLimits& limits_;
  Scope globals_;
  std::string* out_ = nullptr;
  std::size_t steps_ = 0;
  int call_depth_ = 0;
};

}  // namespace

Template::Template(std::string_view source) : root_(parse_template(source)) {}
Template::~Template() = default;
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;

std::string Template::render(const Value& variables, const RenderLimits& limits) const {
  if (!variables.is_dict()) throw TemplateError("a template's variables must be a dict");
  Renderer renderer(variables, limits);
  return renderer.run(*root_);
}

}  // namespace pagedllm::jinja
