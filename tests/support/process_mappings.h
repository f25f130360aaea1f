#pragma once
// The number of memory mappings this process holds (lines of /proc/self/maps): what a
// test counts to see that refusing a mapped file left none behind.

#include <cstddef>
#include <fstream>
#include <string>

namespace pagedllm::testing {

inline std::size_t process_mappings() {
  std::ifstream maps("/proc/self/maps");
  std::size_t n = 0;
  for (std::string line; std::getline(maps, line);) ++n;
  return n;
}

}  // namespace pagedllm::testing
