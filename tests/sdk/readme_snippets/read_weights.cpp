// sdk/README.md's "Read HF weights" block, inside a function that gives it
// the variables it uses.
#include <cstdint>
#include <string>
#include <vector>

#include <pagedllm/sdk.hpp>
#include <pagedllm/sdk/cpp/safetensors.hpp>

std::vector<float> read_up_proj(const std::string& model_dir, std::int64_t intermediate, std::int64_t hidden) {
  // @SNIPPET@
  return f32;
}
