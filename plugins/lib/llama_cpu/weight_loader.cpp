#include "llama_cpu/weight_loader.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>
#include <set>

#include "pagedllm/sdk.hpp"
#include "common/float16_rounding.h"

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

// Rows [first_row, first_row + rows) of `part`'s block of `view` (rows of k)
// into the part's int8 storage: a pre-quantized checkpoint's values and scales
// as stored (a column block of a row keeps the row's scale), anything else
// quantized.
void int8_rows(const llama::SourceTensor& view, const WeightPart& part, int64_t first_row, int64_t rows) {
  const int64_t k = part.width();
  WeightStorage& storage = *part.storage;
  thread_local std::vector<float> wide;
  wide.resize(std::size_t(k));
  auto* q = static_cast<int8_t*>(storage.data());
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t dst = part.first_row + first_row + r;
    if (view.int8) {
      int8_t* row = q + dst * k;
      view.int8->read(part.source_offset(first_row + r), k, row);
      storage.scales()[dst] = view.int8->row_scales[std::size_t(part.source_first_row + first_row + r)];
      storage.row_sums()[dst] = std::accumulate(row, row + k, int32_t(0));
    } else {
      view.to_f32(part.source_offset(first_row + r), k, wide.data());
      quantize_row_int8(wide.data(), k, q + dst * k, storage.scales()[dst], storage.row_sums()[dst]);
    }
  }
}

// Rows [first_row, first_row + rows) of `part`'s block of `view` into the
// part's block storage, as stored.
void block_rows(const llama::SourceTensor& view, const WeightPart& part, int64_t first_row, int64_t rows) {
  const int64_t k = part.width();
  const std::size_t row_bytes = weight_bytes_of(part.storage->dtype(), part.storage->blocks(), k);
  auto* dst = static_cast<std::byte*>(part.data());
  for (int64_t r = first_row; r < first_row + rows; ++r) {
    view.read_blocks(part.source_first_row + r, part.source_first_col, k, dst + std::size_t(r) * row_bytes);
  }
}

}  // namespace

std::string keep_gguf_blocks(const llama::WeightSource& checkpoint, const std::vector<WeightPart>& parts,
                             std::string& kept) {
  struct Matrix {
    std::vector<std::string> names;
    std::set<BlockType> types;
    std::string unheld;  // why it is not held as stored ("" when it can be)
  };
  std::map<WeightStorage*, Matrix> matrices;
  for (const WeightPart& part : parts) {
    if (part.shape.size() != 2) continue;
    Matrix& m = matrices[part.storage];
    m.names.push_back(part.name);
    const llama::SourceTensor* t = checkpoint.find(part.name);
    const BlockType type = t && t->read_blocks ? block_type_of(pllm::gguf::GgmlType(t->ggml_type)) : BlockType::kNone;
    m.types.insert(type);
    if (type == BlockType::kNone) {
      if (t && t->read_blocks) {
        m.unheld = "stored in a block type linear() has no kernels for (" +
                   std::string(pllm::gguf::type_traits(t->ggml_type)->name) + ")";
      }
      continue;
    }
    const int64_t elems = block_format(type).elems;
    if (part.source_first_col % elems != 0 || part.width() % elems != 0) {
      m.unheld = "a tensor-parallel column block of " + std::to_string(part.width()) + " columns from column " +
                 std::to_string(part.source_first_col) + " is not whole " + block_format(type).name + " blocks of " +
                 std::to_string(elems);
    }
  }
  std::map<std::string, std::vector<std::string>> unheld;  // by reason
  std::map<std::string, int> held;                         // by block type
  for (auto& [storage, m] : matrices) {
    if (m.types.count(BlockType::kNone)) {
      if (!m.unheld.empty()) unheld[m.unheld].insert(unheld[m.unheld].end(), m.names.begin(), m.names.end());
      continue;
    }
    if (m.types.size() > 1) {
      std::string types;
      for (BlockType t : m.types) types += std::string(types.empty() ? "" : " and ") + block_format(t).name;
      m.unheld = "a fused matrix of " + types + " tensors (a matrix is held in one block type)";
    }
    if (!m.unheld.empty()) {
      unheld[m.unheld].insert(unheld[m.unheld].end(), m.names.begin(), m.names.end());
      continue;
    }
    storage->set_blocks(*m.types.begin());
    ++held[block_format(*m.types.begin()).name];
  }
  kept.clear();
  for (const auto& [name, count] : held) {
    kept += (kept.empty() ? "" : ", ") + std::to_string(count) + " " + name;
  }
  std::string reasons;
  for (const auto& [reason, names] : unheld) {
    reasons += (reasons.empty() ? "" : "; ") + llama::join_names(names) + ": " + reason;
  }
  return reasons;
}

void quantize_row_int8(const float* w, int64_t k, int8_t* q, float& scale, int32_t& sum) {
  double amax = 0.0;
  for (int64_t i = 0; i < k; ++i) amax = std::max(amax, std::abs(double(w[i])));
  const double s = amax / 127.0;
  sum = 0;
  for (int64_t i = 0; i < k; ++i) {
    const double v = s > 0.0 ? std::nearbyint(double(w[i]) / s) : 0.0;
    q[i] = int8_t(std::clamp(v, -127.0, 127.0));
    sum += q[i];
  }
  scale = float(s);
}

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
  std::map<WeightStorage*, int64_t> widths;
  for (const WeightPart& part : parts) widths[part.storage] = part.width();
  for (auto& [storage, size] : sizes) storage->resize(std::size_t(size), std::size_t(widths[storage]));

  pllm::report_progress("loading weights", 0, total_bytes);
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const llama::SourceTensor& view = *views[i];
    const WeightPart& part = parts[i];
    auto* dst = static_cast<std::byte*>(part.data());
    const pllm_dtype dtype = part.storage->dtype();
    const std::size_t size = weight_dtype_size(dtype);
    constexpr int64_t kChunk = 1 << 18;
    const int64_t k = part.width(), rows = part.shape[0];
    const int64_t chunk_rows = std::max<int64_t>(1, kChunk / k);
    const int64_t chunks = (rows + chunk_rows - 1) / chunk_rows;
    if (part.storage->blocks() != BlockType::kNone) {
      pool.parallel_for(chunks, [&](int64_t chunk, int) {
        const int64_t first = chunk * chunk_rows;
        block_rows(view, part, first, std::min(chunk_rows, rows - first));
      });
    } else if (dtype == PLLM_DTYPE_I8) {
      pool.parallel_for(chunks, [&](int64_t chunk, int) {
        const int64_t first = chunk * chunk_rows;
        int8_rows(view, part, first, std::min(chunk_rows, rows - first));
      });
    } else if (part.source_width() == k) {
      // Whole rows: one contiguous range of the checkpoint.
      const int64_t numel = rows * k, start = part.source_offset(0);
      pool.parallel_for((numel + kChunk - 1) / kChunk, [&](int64_t chunk, int) {
        const int64_t first = chunk * kChunk;
        convert(view, start + first, std::min(kChunk, numel - first), dtype, dst + std::size_t(first) * size);
      });
    } else {
      // A block of columns (a row-parallel shard): each row's piece.
      pool.parallel_for(chunks, [&](int64_t chunk, int) {
        const int64_t first = chunk * chunk_rows;
        for (int64_t r = first; r < std::min(rows, first + chunk_rows); ++r) {
          convert(view, part.source_offset(r), k, dtype, dst + std::size_t(r * k) * size);
        }
      });
    }
    // A block's share of the tensor's stored bytes (a whole tensor: all of them).
    const int64_t whole = view.numel();
    loaded.stored_bytes +=
        whole == rows * k ? view.nbytes : uint64_t(double(view.nbytes) * double(rows * k) / double(whole));
    pllm::report_progress("loading weights", loaded.stored_bytes, total_bytes);
  }
  return loaded;
}

}  // namespace pagedllm::llama_cpu
