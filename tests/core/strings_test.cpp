#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "core/common/strings.h"

using pagedllm::closest_match;
using pagedllm::edit_distance;

TEST_CASE("edit distance counts single-character edits", "[strings]") {
  CHECK(edit_distance("", "") == 0);
  CHECK(edit_distance("abc", "") == 3);
  CHECK(edit_distance("kitten", "sitting") == 3);
  CHECK(edit_distance("max_num_seqs", "max_num_seq") == 1);
}

TEST_CASE("closest match suggests likely typos only", "[strings]") {
  const std::vector<std::string> keys{"block_size", "enable_prefix_caching", "swap_space"};
  CHECK(closest_match("blok_size", keys) == std::optional<std::string>("block_size"));
  CHECK(closest_match("enable_prefix_cache", keys) == std::optional<std::string>("enable_prefix_caching"));
  CHECK_FALSE(closest_match("temperature", keys).has_value());
}
