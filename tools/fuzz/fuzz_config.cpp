// The YAML config with --set overrides, as pagedllm-host reads it
// (parse_config: YAML -> HostConfig, every key checked). Lines of the input
// that start with "#--set " are also passed as --set overrides (YAML reads
// them as comments). Property: anything but a ConfigError is a bug.

#include <cstdint>
#include <string>
#include <vector>

#include "core/config/config.h"
#include "core/config/config_error.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> overrides;
  for (std::size_t begin = 0; begin < text.size();) {
    std::size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    constexpr std::string_view kSet = "#--set ";
    if (text.compare(begin, kSet.size(), kSet) == 0) overrides.push_back(text.substr(begin + kSet.size(), end - begin - kSet.size()));
    begin = end + 1;
  }
  try {
    const pagedllm::HostConfig config = pagedllm::parse_config(text, "/fuzz/configs/serve.yaml", overrides);
    // What --check and the engine read back from a valid config.
    (void)config.device.str();
    for (const auto* slot : {&config.model.plugin, &config.attention, &config.sampler}) (void)slot->options.dump();
  } catch (const pagedllm::ConfigError&) {
  }
  return 0;
}
