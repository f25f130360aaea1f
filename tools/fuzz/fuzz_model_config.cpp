// A model's config.json (and generation_config.json) as models_llama and the
// host read them: the input up to its first NUL byte is written to
// config.json, the rest (when there is a NUL) to generation_config.json, in a
// scratch directory; then LlamaConfig::load, and on success what the plugin
// derives from it (RoPE inverse frequencies, the fused weight layout) and the
// host's read_generation_defaults.
// Properties: a bad file is a pllm::Error (plugin) or a std::runtime_error
// naming the file (host); an accepted config has consistent sizes.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <vector>

#include "core/engine/generation_config.h"
#include "pagedllm/sdk.hpp"
#include "llama_common/llama_config.h"
#include "llama_common/rope_freq.h"
#include "llama_common/weight_layout.h"
#include "tools/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::filesystem::path dir = [] {
    auto d = pagedllm::fuzz::scratch_dir() / "model";
    std::filesystem::create_directories(d);
    return d;
  }();
  const auto [config_json, generation_json] = pagedllm::fuzz::split_at_nul(data, size);
  pagedllm::fuzz::write_file(dir / "config.json", config_json);
  std::error_code ignored;
  std::filesystem::remove(dir / "generation_config.json", ignored);
  if (generation_json) pagedllm::fuzz::write_file(dir / "generation_config.json", *generation_json);

  std::vector<std::int32_t> eos_ids;
  try {
    const auto c = pagedllm::llama::LlamaConfig::load(dir, "fuzz");
    if (c.vocab_size < 1 || c.hidden_size < 1 || c.num_heads < 1 || c.num_kv_heads < 1 || c.head_dim < 2 ||
        c.num_heads % c.num_kv_heads != 0 || c.head_dim % 2 != 0 || c.bos_token_id >= c.vocab_size) {
      __builtin_trap();
    }
    for (const std::int32_t id : c.eos_token_ids) {
      if (id < 0 || id >= c.vocab_size) __builtin_trap();
    }
    const std::vector<double> inv_freq = pagedllm::llama::rope_inv_freq(c);
    if (inv_freq.size() != static_cast<std::size_t>(c.head_dim / 2)) __builtin_trap();
    (void)pagedllm::llama::model_slots(c);
    eos_ids = c.eos_token_ids;
  } catch (const pllm::Error&) {
  }
  try {
    (void)pagedllm::read_generation_defaults(dir, eos_ids, std::nullopt);
  } catch (const std::runtime_error&) {
  }
  return 0;
}
