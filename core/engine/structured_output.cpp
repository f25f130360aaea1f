#include "core/engine/structured_output.h"

#include <algorithm>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "core/scheduler/request.h"

namespace pagedllm {
namespace {

pllm_vocab_type vocab_type_of(tokenizer::Tokenizer::TokenEncoding encoding) {
  switch (encoding) {
    case tokenizer::Tokenizer::TokenEncoding::kByteLevel: return PLLM_VOCAB_BYTE_LEVEL;
    case tokenizer::Tokenizer::TokenEncoding::kByteFallback: return PLLM_VOCAB_BYTE_FALLBACK;
    case tokenizer::Tokenizer::TokenEncoding::kRaw: break;
  }
  return PLLM_VOCAB_RAW;
}

pllm_constraint_type type_of(OutputConstraint::Type type) {
  switch (type) {
    case OutputConstraint::Type::kJsonObject: return PLLM_CONSTRAINT_JSON_OBJECT;
    case OutputConstraint::Type::kJsonSchema: return PLLM_CONSTRAINT_JSON_SCHEMA;
    case OutputConstraint::Type::kRegex: return PLLM_CONSTRAINT_REGEX;
    case OutputConstraint::Type::kChoice: return PLLM_CONSTRAINT_CHOICE;
    case OutputConstraint::Type::kStructuralTag: return PLLM_CONSTRAINT_STRUCTURAL_TAG;
  }
  return PLLM_CONSTRAINT_INVALID;
}

}  // namespace

ConstraintMatcher::~ConstraintMatcher() {
  if (matcher_) engine_->api().destroy_matcher(engine_->get(), matcher_);
}

StructuredOutput::StructuredOutput(std::shared_ptr<const PluginLibrary> library, const std::string& options_json,
                                   const tokenizer::Tokenizer& tokenizer, int vocab_size,
                                   std::span<const std::int32_t> stop_tokens)
    : vocab_size_(vocab_size) {
  const int num_tokens = std::min<int>(vocab_size, static_cast<int>(tokenizer.vocab_size()));
  std::vector<std::string> strings(static_cast<std::size_t>(num_tokens));
  std::vector<const char*> pointers(strings.size());
  std::vector<std::int32_t> lengths(strings.size());
  std::vector<std::int32_t> special;
  for (int id = 0; id < num_tokens; ++id) {
    const auto i = static_cast<std::size_t>(id);
    if (auto token = tokenizer.id_to_token(id)) strings[i] = std::move(*token);
    pointers[i] = strings[i].data();
    lengths[i] = static_cast<std::int32_t>(strings[i].size());
    if (tokenizer.is_special(id) && std::find(stop_tokens.begin(), stop_tokens.end(), id) == stop_tokens.end()) {
      special.push_back(id);
    }
  }
  pllm_constraint_create_args args{};
  args.struct_size = sizeof args;
  args.options_json = options_json.c_str();
  args.vocab_size = vocab_size;
  args.num_tokens = num_tokens;
  args.token_strings = pointers.data();
  args.token_lengths = lengths.data();
  args.vocab_type = vocab_type_of(tokenizer.token_encoding());
  args.stop_token_ids = stop_tokens.data();
  args.num_stop_tokens = static_cast<std::int32_t>(stop_tokens.size());
  args.special_token_ids = special.data();
  args.num_special_tokens = static_cast<std::int32_t>(special.size());
  instance_ = create_plugin_instance<pllm_constraint_api, pllm_constraint_engine>(std::move(library), args);
}

ConstraintGrammar StructuredOutput::compile(const OutputConstraint& constraint) const {
  const pllm_constraint_spec spec{sizeof(pllm_constraint_spec), type_of(constraint.type), constraint.text.c_str()};
  pllm_error error{};
  pllm_constraint_grammar* grammar = nullptr;
  const pllm_status status = instance_.api().compile(instance_.get(), &spec, &grammar, &error);
  if (status == PLLM_ERROR_INVALID_ARGUMENT) {
    throw RequestRejected(-1, fmt::format("{}: {}", constraint.field, error.message), constraint.field);
  }
  if (status == PLLM_ERROR_UNSUPPORTED && constraint.type == OutputConstraint::Type::kStructuralTag) {
    // A constraint plugin of SDK 2.3 or older: it cannot force tool calls, which is the request's to learn.
    throw RequestRejected(-1, fmt::format("{}: the server's constraint plugin cannot constrain output to tool calls "
                                          "(structural tags, SDK 2.4): {}",
                                          constraint.field, error.message),
                          constraint.field);
  }
  check_plugin_call(status, error, instance_.library(), "compile");
  const ConstraintInstance* instance = &instance_;
  return ConstraintGrammar(grammar, [instance](pllm_constraint_grammar* g) {
    if (g) instance->api().release_grammar(instance->get(), g);
  });
}

std::unique_ptr<ConstraintMatcher> StructuredOutput::make_matcher(const ConstraintGrammar& grammar) const {
  pllm_error error{};
  pllm_constraint_matcher* matcher = nullptr;
  check_plugin_call(instance_.api().create_matcher(instance_.get(), grammar.get(), &matcher, &error), error,
                    instance_.library(), "create_matcher");
  return std::make_unique<ConstraintMatcher>(&instance_, matcher);
}

void StructuredOutput::fill_bitmask(std::span<pllm_constraint_matcher* const> matchers,
                                    std::uint32_t* bitmask) const {
  pllm_error error{};
  check_plugin_call(instance_.api().fill_bitmask(instance_.get(), matchers.data(),
                                                 static_cast<std::int32_t>(matchers.size()), bitmask, words(), &error),
                    error, instance_.library(), "fill_bitmask");
}

bool StructuredOutput::accept(pllm_constraint_matcher* matcher, std::int32_t token) const {
  pllm_error error{};
  std::int32_t accepted = 0;
  check_plugin_call(instance_.api().accept_token(instance_.get(), matcher, token, &accepted, &error), error,
                    instance_.library(), "accept_token");
  return accepted != 0;
}

void StructuredOutput::rollback(pllm_constraint_matcher* matcher, int num_tokens) const {
  if (num_tokens == 0) return;
  pllm_error error{};
  check_plugin_call(instance_.api().rollback(instance_.get(), matcher, num_tokens, &error), error,
                    instance_.library(), "rollback");
}

}  // namespace pagedllm
