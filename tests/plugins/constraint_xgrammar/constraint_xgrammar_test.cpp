// constraint_xgrammar, loaded as a plugin, over a vocabulary small enough that the tokens each
// constraint allows can be listed by hand: the expected sets below are written from the
// constraint's definition, not from the plugin.

#include <catch2/catch.hpp>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/plugin/plugin_instance.h"
#include "core/plugin/plugin_registry.h"
#include "pagedllm/sdk.h"

using Catch::Matchers::Contains;

namespace {

// Raw (byte) tokens; id 9 is the stop token (EOS), id 10 a special token whose text is "a", id 11 a newline.
const std::vector<std::string> kVocab = {"a", "b", "ab", "c", "{", "}", "\"", "1", "x\"y", "</s>", "a", "\n"};
constexpr int32_t kEos = 9;
constexpr int32_t kSpecial = 10;
constexpr int32_t kVocabSize = 40;  // the model's logits are wider than the tokenizer: ids 12..39 never allowed

class Constraint {
 public:
  explicit Constraint(const std::string& options = "{}") {
    static pagedllm::PluginRegistry registry({PAGEDLLM_BINARY_DIR "/plugins"});
    std::vector<const char*> strings;
    std::vector<int32_t> lengths;
    for (const auto& t : kVocab) {
      strings.push_back(t.data());
      lengths.push_back(int32_t(t.size()));
    }
    const int32_t stop[] = {kEos};
    const int32_t special[] = {kSpecial};
    pllm_constraint_create_args args{};
    args.struct_size = sizeof args;
    args.options_json = options.c_str();
    args.vocab_size = kVocabSize;
    args.num_tokens = int32_t(kVocab.size());
    args.token_strings = strings.data();
    args.token_lengths = lengths.data();
    args.vocab_type = PLLM_VOCAB_RAW;
    args.stop_token_ids = stop;
    args.num_stop_tokens = 1;
    args.special_token_ids = special;
    args.num_special_tokens = 1;
    instance_ = pagedllm::create_plugin_instance<pllm_constraint_api, pllm_constraint_engine>(
        registry.load("constraint_xgrammar", PLLM_PLUGIN_KIND_CONSTRAINT, "constraint.plugin"), args);
  }

  // A compiled grammar, or the error's status and message.
  pllm_status compile(pllm_constraint_type type, const std::string& text, pllm_constraint_grammar** out,
                      std::string* message = nullptr) {
    const pllm_constraint_spec spec{sizeof spec, type, text.c_str()};
    pllm_error error{};
    const pllm_status status = instance_.api().compile(instance_.get(), &spec, out, &error);
    if (message) *message = error.message;
    return status;
  }

  struct Matcher {
    Constraint* owner;
    pllm_constraint_grammar* grammar;
    pllm_constraint_matcher* matcher;
    ~Matcher() {
      owner->instance_.api().destroy_matcher(owner->instance_.get(), matcher);
      owner->instance_.api().release_grammar(owner->instance_.get(), grammar);
    }
    std::set<int32_t> allowed() const {
      std::vector<uint32_t> mask((kVocabSize + 31) / 32, 0xdeadbeefu);
      pllm_error error{};
      pllm_constraint_matcher* const one[] = {matcher};
      REQUIRE(owner->instance_.api().fill_bitmask(owner->instance_.get(), one, 1, mask.data(), int32_t(mask.size()),
                                                  &error) == PLLM_OK);
      std::set<int32_t> ids;
      for (int32_t id = 0; id < kVocabSize; ++id) {
        if ((mask[std::size_t(id) / 32] >> (id % 32)) & 1u) ids.insert(id);
      }
      return ids;
    }
    bool accept(int32_t token) {
      int32_t accepted = -1;
      pllm_error error{};
      REQUIRE(owner->instance_.api().accept_token(owner->instance_.get(), matcher, token, &accepted, &error) ==
              PLLM_OK);
      return accepted == 1;
    }
    void rollback(int32_t n) { REQUIRE(rollback_status(n) == PLLM_OK); }
    pllm_status rollback_status(int32_t n) {
      pllm_error error{};
      return owner->instance_.api().rollback(owner->instance_.get(), matcher, n, &error);
    }
    bool terminated() const { return owner->instance_.api().is_terminated(owner->instance_.get(), matcher) != 0; }
  };

  std::unique_ptr<Matcher> matcher(pllm_constraint_type type, const std::string& text) {
    pllm_constraint_grammar* grammar = nullptr;
    std::string message;
    REQUIRE(compile(type, text, &grammar, &message) == PLLM_OK);
    pllm_constraint_matcher* m = nullptr;
    pllm_error error{};
    REQUIRE(instance_.api().create_matcher(instance_.get(), grammar, &m, &error) == PLLM_OK);
    return std::unique_ptr<Matcher>(new Matcher{this, grammar, m});  // in place: its destructor frees both
  }

 private:
  pagedllm::ConstraintInstance instance_;
};

}  // namespace

TEST_CASE("constraint_xgrammar: a choice allows exactly the tokens that continue a choice", "[constraint]") {
  Constraint c;
  auto m = c.matcher(PLLM_CONSTRAINT_CHOICE, R"(["ab", "c"])");
  // "a" and "ab" start "ab", "c" is "c"; the special token spelled "a" never; EOS not before the end.
  CHECK(m->allowed() == std::set<int32_t>{0, 2, 3});
  CHECK(m->accept(0));
  CHECK(m->allowed() == std::set<int32_t>{1});
  CHECK_FALSE(m->accept(3));  // refused, state unchanged
  CHECK(m->allowed() == std::set<int32_t>{1});
  CHECK(m->accept(1));
  CHECK(m->allowed() == std::set<int32_t>{kEos});
  CHECK(m->accept(kEos));
  CHECK(m->terminated());
  CHECK(m->allowed() == std::set<int32_t>{kEos});
  CHECK(m->accept(kEos));  // a request ignoring EOS keeps drawing it
  // Rollback (rejected speculative drafts) counts every accepted token, the
  // stop tokens too: two back is just after "ab", before either stop token.
  m->rollback(2);
  CHECK_FALSE(m->terminated());
  CHECK(m->allowed() == std::set<int32_t>{kEos});
  m->rollback(1);
  CHECK(m->allowed() == std::set<int32_t>{1});
  m->rollback(1);
  CHECK(m->allowed() == std::set<int32_t>{0, 2, 3});
  CHECK_FALSE(m->accept(kSpecial));
  // Past the start, or a negative count: an error status, the state unchanged.
  CHECK(m->rollback_status(1) == PLLM_ERROR_INVALID_ARGUMENT);
  CHECK(m->rollback_status(-1) == PLLM_ERROR_INVALID_ARGUMENT);
  CHECK(m->allowed() == std::set<int32_t>{0, 2, 3});
}

TEST_CASE("constraint_xgrammar: accept and rollback through speculative drafts give the states a fresh matcher has",
          "[constraint]") {
  // The engine advances a matcher through K drafts for their masks, then rolls
  // it back to the accepted ones and advances it by the next token.
  Constraint c;
  auto m = c.matcher(PLLM_CONSTRAINT_REGEX, "(ab|c)+1");
  auto fresh = c.matcher(PLLM_CONSTRAINT_REGEX, "(ab|c)+1");
  for (const int32_t t : {3, 0, 1}) CHECK(m->accept(t));  // drafts "c", "a", "b"
  CHECK(m->allowed() == std::set<int32_t>{0, 2, 3, 7});
  m->rollback(2);  // only "c" accepted by verification; the target chose "ab" instead of "a"
  CHECK(m->accept(2));
  CHECK(fresh->accept(3));
  CHECK(fresh->accept(2));
  CHECK(m->allowed() == fresh->allowed());
  CHECK(m->accept(7));
  CHECK(m->accept(kEos));
  CHECK(m->terminated());
  m->rollback(2);
  CHECK(m->allowed() == fresh->allowed());
}

TEST_CASE("constraint_xgrammar: choices with quotes, regexes and JSON schemas", "[constraint]") {
  Constraint c;
  auto quoted = c.matcher(PLLM_CONSTRAINT_CHOICE, R"(["x\"y"])");
  CHECK(quoted->allowed() == std::set<int32_t>{8});
  // A control character followed by a hex digit is that character, then the digit (not one code point).
  auto newline = c.matcher(PLLM_CONSTRAINT_CHOICE, R"(["\n1"])");
  CHECK(newline->allowed() == std::set<int32_t>{11});
  CHECK(newline->accept(11));
  CHECK(newline->allowed() == std::set<int32_t>{7});
  auto regex = c.matcher(PLLM_CONSTRAINT_REGEX, "(ab|c)+1");
  CHECK(regex->allowed() == std::set<int32_t>{0, 2, 3});
  CHECK(regex->accept(3));
  CHECK(regex->allowed() == std::set<int32_t>{0, 2, 3, 7});
  CHECK(regex->accept(7));
  CHECK(regex->allowed() == std::set<int32_t>{kEos});
  // {"type": "integer"} with compact JSON: digits only ("1"), then the end.
  Constraint compact(R"({"any_whitespace": false})");
  auto integer = compact.matcher(PLLM_CONSTRAINT_JSON_SCHEMA, R"({"type": "integer"})");
  CHECK(integer->allowed() == std::set<int32_t>{7});
  CHECK(integer->accept(7));
  CHECK(integer->allowed().count(kEos) == 1);
  auto object = compact.matcher(PLLM_CONSTRAINT_JSON_OBJECT, "");
  CHECK(object->allowed() == std::set<int32_t>{4});
  CHECK(object->accept(4));
  CHECK(object->allowed() == std::set<int32_t>{5, 6});  // "}" or a key's opening quote
}

TEST_CASE("constraint_xgrammar: bad constraints are INVALID_ARGUMENT with a message, never a crash",
          "[constraint]") {
  Constraint c;
  pllm_constraint_grammar* grammar = nullptr;
  std::string message;
  CHECK(c.compile(PLLM_CONSTRAINT_REGEX, "(ab", &grammar, &message) == PLLM_ERROR_INVALID_ARGUMENT);
  CHECK_FALSE(message.empty());
  CHECK(c.compile(PLLM_CONSTRAINT_JSON_SCHEMA, "{not json", &grammar, &message) == PLLM_ERROR_INVALID_ARGUMENT);
  CHECK(c.compile(PLLM_CONSTRAINT_JSON_SCHEMA, R"({"type": "no-such-type"})", &grammar, &message) ==
        PLLM_ERROR_INVALID_ARGUMENT);
  CHECK(c.compile(PLLM_CONSTRAINT_CHOICE, "[]", &grammar, &message) == PLLM_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(message, Contains("non-empty list"));
  CHECK(c.compile(PLLM_CONSTRAINT_CHOICE, R"(["a", 3])", &grammar, &message) == PLLM_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(message, Contains("choice 1"));
  // A schema that admits no output at all: refused when compiled (at submit), not a request whose every token
  // is masked.
  CHECK(c.compile(PLLM_CONSTRAINT_JSON_SCHEMA, R"({"$ref": "#"})", &grammar, &message) ==
        PLLM_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(message, Contains("no output can match it"));
  // Inside a structural tag (forced tool calls) the tag's fixed text comes first, so each schema is checked
  // on its own; the message names the tag it follows.
  CHECK(c.compile(PLLM_CONSTRAINT_STRUCTURAL_TAG,
                  R"({"type": "structural_tag", "format": {"type": "tag", "begin": "<call f>", )"
                  R"("content": {"type": "json_schema", "json_schema": {"$ref": "#"}}, "end": "</call>"}})",
                  &grammar, &message) == PLLM_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(message, Contains("after \"<call f>\"") && Contains("no output can match it"));
  CHECK(c.compile(PLLM_CONSTRAINT_STRUCTURAL_TAG, "{not json", &grammar, &message) == PLLM_ERROR_INVALID_ARGUMENT);
  CHECK(c.compile(pllm_constraint_type(77), "x", &grammar, &message) == PLLM_ERROR_UNSUPPORTED);
  CHECK(grammar == nullptr);
}
