// Reasoning output split from content (core/server/reasoning_parser.h): the same parts however the text
// arrives, and each format's rules.

#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "core/server/reasoning_parser.h"

using namespace pagedllm::server;

namespace {

struct Split {
  std::string reasoning, content;
  bool operator==(const Split&) const = default;
};

// `text` fed in `pieces` cut at the given offsets, then finished.
Split split(ReasoningFormat format, const std::string& text, const std::vector<std::size_t>& cuts) {
  ReasoningSplitter splitter(format);
  Split out;
  std::size_t from = 0;
  auto take = [&](const ReasoningSplitter::Parts& parts) {
    out.reasoning += parts.reasoning;
    out.content += parts.content;
  };
  for (std::size_t cut : cuts) {
    take(splitter.add(std::string_view(text).substr(from, cut - from)));
    from = cut;
  }
  take(splitter.add(std::string_view(text).substr(from)));
  take(splitter.finish());
  return out;
}

// Every way of cutting `text` once, and byte by byte, gives `expected`.
void check_every_cut(ReasoningFormat format, const std::string& text, const Split& expected) {
  INFO(text);
  CHECK(split(format, text, {}) == expected);
  for (std::size_t cut = 0; cut <= text.size(); ++cut) {
    INFO("cut at " << cut);
    CHECK(split(format, text, {cut}) == expected);
  }
  std::vector<std::size_t> every;
  for (std::size_t i = 1; i < text.size(); ++i) every.push_back(i);
  CHECK(split(format, text, every) == expected);
}

}  // namespace

TEST_CASE("reasoning: deepseek_r1 splits at the first </think>, with or without the opening tag",
          "[server][reasoning]") {
  const ReasoningFormat r1 = ReasoningFormat::kDeepSeekR1;
  check_every_cut(r1, "<think>Let me see.\n2 + 2 = 4</think>\n\nThe answer is 4.",
                  {"Let me see.\n2 + 2 = 4", "\n\nThe answer is 4."});
  check_every_cut(r1, "It's 4 because </thin k> is not a tag.</think>4", {"It's 4 because </thin k> is not a tag.", "4"});
  check_every_cut(r1, "still thinking <", {"still thinking <", ""});  // no </think>: all reasoning
  check_every_cut(r1, "</think>", {"", ""});
  check_every_cut(r1, "a</think>b</think>c", {"a", "b</think>c"});
}

TEST_CASE("reasoning: qwen3 has reasoning only after a leading <think>", "[server][reasoning]") {
  const ReasoningFormat qwen3 = ReasoningFormat::kQwen3;
  check_every_cut(qwen3, "<think>\nhmm\n</think>\n\nHello!", {"\nhmm\n", "\n\nHello!"});
  check_every_cut(qwen3, "Hello! <think>x</think>", {"", "Hello! <think>x</think>"});
  check_every_cut(qwen3, "<thin", {"", "<thin"});
  check_every_cut(qwen3, "<think>unfinished", {"unfinished", ""});
  check_every_cut(qwen3, "", {"", ""});
}

TEST_CASE("reasoning: none leaves everything content, and the names are vLLM's", "[server][reasoning]") {
  check_every_cut(ReasoningFormat::kNone, "<think>x</think>y", {"", "<think>x</think>y"});
  CHECK(parse_reasoning_format("deepseek_r1") == ReasoningFormat::kDeepSeekR1);
  CHECK(parse_reasoning_format("qwen3") == ReasoningFormat::kQwen3);
  CHECK(parse_reasoning_format("none") == ReasoningFormat::kNone);
  CHECK_FALSE(parse_reasoning_format("granite").has_value());
}
