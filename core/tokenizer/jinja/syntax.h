#pragma once
// The syntax tree of a template (internal to the Jinja engine): the parser
// builds it once per template, the renderer walks it for every render.

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/tokenizer/jinja/value.h"

namespace pagedllm::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Type {
    kLiteral,    // literal
    kName,       // name
    kList,       // operands
    kTuple,      // operands
    kDict,       // operands: key, value, key, value...
    kAttribute,  // operands[0].name
    kItem,       // operands[0][operands[1]]
    kSlice,      // operands[0][operands[1]:operands[2]:operands[3]], any of the three null
    kCall,       // operands[0](operands[1:]..., keywords)
    kFilter,     // operands[0] | name(operands[1:]..., keywords); operands[0] null in a filter block
    kTest,       // operands[0] is [not] name(operands[1:]...)
    kUnary,      // op operands[0]: "-", "+", "not"
    kBinary,     // operands[0] op operands[1]: arithmetic, comparisons, "in", "not in", "~", "and", "or"
    kCondition,  // operands[0] if operands[1] else operands[2] (null: undefined)
  };
  Type type;
  int line = 0;
  Value literal;
  std::string name;  // a name, attribute, filter or test; the operator of kUnary/kBinary
  bool negated = false;  // "is not"
  std::vector<ExprPtr> operands;
  std::vector<std::pair<std::string, ExprPtr>> keywords;
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Node {
  enum class Type {
    kTemplate,     // body
    kText,         // text
    kOutput,       // {{ value }}
    kIf,           // branches (condition, body)..., else_body
    kFor,          // for targets in value [if condition]: body, else_body
    kSet,          // set targets (or attribute_owner.attribute) = value
    kSetBlock,     // set targets[0] %} body {% endset
    kMacro,        // name(parameters with defaults): body
    kBreak,
    kContinue,
    kFilterBlock,  // filter (value: a kFilter chain over a null input): body
  };
  Type type;
  int line = 0;
  std::string text;
  ExprPtr value;
  ExprPtr condition;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
  std::vector<std::string> targets;
  std::string attribute_owner;  // set ns.attribute = ...
  std::string attribute;
  std::string name;
  std::vector<std::pair<std::string, ExprPtr>> parameters;  // a macro's, default null when none
};

// Throws TemplateError naming the line.
NodePtr parse_template(std::string_view source);

}  // namespace pagedllm::jinja
