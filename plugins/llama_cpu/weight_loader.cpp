#include "plugins/llama_cpu/weight_loader.h"

#include <algorithm>
#include <cstring>
#include <map>

#include "pagedllm/sdk.hpp"
#include "plugins/common/float16_rounding.h"

namespace pagedllm::llama_cpu {
namespace {

// Elements [first, first + count) of `view` into dst, in dst_dtype.
void convert(const llama::SourceTensor& view, int64_t first, int64_t count, pllm_dtype dst_dtype, void* dst) {
  if (view.dtype == dst_dtype && view.data) {
    const std::size_t size = weight_dtype_size(dst_dtype);
    std::memcpy(dst, view.data + std::size_t(first) * size, std::size_t(count) * size);
    return;
  }
  if (dst_dtype == PLLM_DTYPE_F32) {
    view.to_f32(first, count, static_cast<float*>(dst));
    return;
  }
  constexpr int64_t kPiece = 4096;
  float wide[kPiece];
  auto* out = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < count; i += kPiece) {
    const int64_t n = std::min(kPiece, count - i);
    view.to_f32(first + i, n, wide);
    for (int64_t j = 0; j < n; ++j) {
      out[i + j] = dst_dtype == PLLM_DTYPE_BF16 ? plugins::f32_to_bf16(wide[j]) : plugins::f32_to_f16(wide[j]);
    }
  }
}

}  // namespace

LoadedWeights load_weight_parts(const llama::WeightSource& checkpoint, const std::vector<WeightPart>& parts,
                                plugins::ThreadPool& pool) {
  const llama::CheckedTensors checked = llama::check_checkpoint(checkpoint, parts);
  const std::vector<const llama::SourceTensor*>& views = checked.views;
  const uint64_t total_bytes = checked.stored_bytes;
  LoadedWeights loaded;
  loaded.unused = checked.unused;

  std::map<WeightStorage*, int64_t> sizes;
  for (const WeightPart& part : parts) {
    int64_t& size = sizes[part.storage];
    size = std::max(size, (part.first_row + part.shape[0]) * part.width());
  }
  for (auto& [storage, size] : sizes) storage->resize(std::size_t(size));

  pllm::report_progress("loading weights", 0, total_bytes);
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const llama::SourceTensor& view = *views[i];
    auto* dst = static_cast<std::byte*>(parts[i].data());
    const pllm_dtype dtype = parts[i].storage->dtype();
    const std::size_t size = weight_dtype_size(dtype);
    constexpr int64_t kChunk = 1 << 18;
    const int64_t numel = view.numel();
    pool.parallel_for((numel + kChunk - 1) / kChunk, [&](int64_t chunk, int) {
      const int64_t first = chunk * kChunk;
      convert(view, first, std::min(kChunk, numel - first), dtype, dst + std::size_t(first) * size);
    });
    loaded.stored_bytes += view.nbytes;
    pllm::report_progress("loading weights", loaded.stored_bytes, total_bytes);
  }
  return loaded;
}

}  // namespace pagedllm::llama_cpu
