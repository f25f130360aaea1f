#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "pagedllm/sdk/cpp/suggest.hpp"

using pllm::closest_match;
using pllm::edit_distance;

TEST_CASE("edit distance counts single-character edits and transpositions", "[sdk][suggest]") {
  CHECK(edit_distance("", "") == 0);
  CHECK(edit_distance("abc", "") == 3);
  CHECK(edit_distance("kitten", "sitting") == 3);
  CHECK(edit_distance("max_num_seqs", "max_num_seq") == 1);
  CHECK(edit_distance("tiel", "tile") == 1);
  CHECK(edit_distance("varient", "variant") == 1);
}

TEST_CASE("closest match suggests likely typos only", "[sdk][suggest]") {
  const std::vector<std::string> keys{"block_size", "enable_prefix_caching", "swap_space"};
  CHECK(closest_match("blok_size", keys) == "block_size");
  CHECK(closest_match("enable_prefix_cache", keys) == "enable_prefix_caching");
  CHECK(closest_match("temperature", keys).empty());
}
