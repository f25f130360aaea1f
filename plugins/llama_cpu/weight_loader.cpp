#include "plugins/llama_cpu/weight_loader.h"

#include <algorithm>
#include <map>

#include "pagedllm/sdk.hpp"

namespace pagedllm::llama_cpu {

LoadedWeights load_weight_parts(const pllm::safetensors::Checkpoint& checkpoint, const std::vector<WeightPart>& parts,
                                plugins::ThreadPool& pool) {
  const llama::CheckedTensors checked = llama::check_checkpoint(checkpoint, parts);
  const std::vector<const pllm::safetensors::TensorView*>& views = checked.views;
  const uint64_t total_bytes = checked.stored_bytes;
  LoadedWeights loaded;
  loaded.unused = checked.unused;

  std::map<std::vector<float>*, int64_t> sizes;
  for (const WeightPart& part : parts) {
    int64_t& size = sizes[part.storage];
    size = std::max(size, (part.first_row + part.shape[0]) * part.width());
  }
  for (auto& [storage, size] : sizes) storage->resize(std::size_t(size));

  pllm::report_progress("loading weights", 0, total_bytes);
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const pllm::safetensors::TensorView& view = *views[i];
    float* dst = parts[i].data();
    constexpr int64_t kChunk = 1 << 18;
    const int64_t numel = view.numel();
    pool.parallel_for((numel + kChunk - 1) / kChunk, [&](int64_t chunk, int) {
      const int64_t first = chunk * kChunk;
      view.to_f32(first, std::min(kChunk, numel - first), dst + first);
    });
    loaded.stored_bytes += view.nbytes;
    pllm::report_progress("loading weights", loaded.stored_bytes, total_bytes);
  }
  return loaded;
}

}  // namespace pagedllm::llama_cpu
