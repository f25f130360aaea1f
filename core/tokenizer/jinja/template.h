#pragma once
// A Jinja engine for chat templates: it runs a model's own `chat_template` as
// transformers' apply_chat_template does (jinja2's ImmutableSandboxedEnvironment
// with trim_blocks, lstrip_blocks and loop controls; its tojson, raise_exception
// and strftime_now), so the rendered prompt is byte-equal to transformers'.
//
// Supported: {{ }}, {% %}, {# #} with -/+ whitespace control; if/elif/else,
// for (loop.*, else, an if filter, unpacking, break/continue), set (names,
// tuples, namespace attributes, blocks), macro, filter blocks, generation
// blocks; Python's operators, literals, slicing and the string/dict methods
// templates call; jinja2's filters and tests. Templates run sandboxed and
// bounded: no file or attribute of the host is reachable, lists and dicts are
// immutable (as in the ImmutableSandboxedEnvironment), and RenderLimits caps
// the work, the output and the nesting, so a template that loops or recurses
// without end fails with a TemplateError instead of hanging the server.

#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

#include "core/tokenizer/jinja/value.h"

namespace pagedllm::jinja {

// A template that cannot be parsed or rendered, and raise_exception's message.
// what() reads "line N: ..." when the line is known.
class TemplateError : public std::runtime_error {
 public:
  explicit TemplateError(const std::string& message, int line = 0);
  int line() const { return line_; }
  // The message without the line ("... is undefined").
  const std::string& message() const { return message_; }
  // raise_exception("...") in the template, as opposed to an error of the engine.
  bool raised_by_template() const { return raised_by_template_; }
  static TemplateError raised(const std::string& message, int line);

 private:
  std::string message_;
  int line_;
  bool raised_by_template_ = false;
};

struct RenderLimits {
  std::size_t max_steps = 1'000'000;           // statements and expressions evaluated
  std::size_t max_output_bytes = 64u << 20;    // also bounds any one string built
  int max_call_depth = 100;                    // macro calls within macro calls
};

struct Node;

class Template {
 public:
  // TemplateError (with its line) when `source` is not a template this engine runs.
  explicit Template(std::string_view source);
  ~Template();
  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;

  // `variables` must be a dict (the template's globals besides the builtins).
  std::string render(const Value& variables, const RenderLimits& limits = {}) const;

 private:
  std::shared_ptr<const Node> root_;
};

}  // namespace pagedllm::jinja
