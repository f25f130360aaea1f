#include "step_metadata.h"

#include <algorithm>
#include <cstring>

namespace pagedllm::attention_cuda {
namespace {

// 16-byte aligned offsets: each array starts where its widest element (and a
// vector load, were one ever used) may begin.
std::size_t align16(std::size_t n) { return (n + 15) & ~std::size_t(15); }

}  // namespace

void WorkList::build(const pllm_batch& b, const SplitPolicy& policy) {
  work.clear();
  combine.clear();
  num_partials = 0;
  max_tile_rows = 0;
  for (int32_t s = 0; s < b.num_seqs; ++s) {
    const int32_t query_len = b.query_start_loc[s + 1] - b.query_start_loc[s];
    const int32_t context_len = b.seq_lens[s] - query_len;
    for (int32_t row = 0; row < query_len; row += kTileRows) {
      const int32_t rows = std::min(kTileRows, query_len - row);
      max_tile_rows = std::max(max_tile_rows, rows);
      // The tile's last row sits at position context_len + row + rows - 1 and sees everything up to it.
      const int32_t kv_limit = context_len + row + rows;
      if (kv_limit <= policy.split_min_context || kv_limit <= policy.partition_size) {
        work.push_back({s, row, rows, 0, kv_limit, -1});
        continue;
      }
      const int32_t parts = (kv_limit + policy.partition_size - 1) / policy.partition_size;
      combine.push_back({s, row, rows, num_partials, parts});
      for (int32_t p = 0; p < parts; ++p) {
        const int32_t begin = p * policy.partition_size;
        work.push_back({s, row, rows, begin, std::min(kv_limit, begin + policy.partition_size), num_partials++});
      }
    }
  }
}

void StepMetadata::upload(const pllm_batch& b, const SplitPolicy& policy, cudaEvent_t previous_compute) {
  work_.build(b, policy);

  const std::size_t num_seqs = std::size_t(b.num_seqs);
  const std::size_t qsl_bytes = b.num_seqs > 0 ? (num_seqs + 1) * sizeof(int32_t) : 0;
  const std::size_t lens_bytes = num_seqs * sizeof(int32_t);
  const std::size_t table_bytes = num_seqs * std::size_t(std::max(b.max_blocks_per_seq, 0)) * sizeof(int32_t);
  const std::size_t slot_bytes = std::size_t(b.num_tokens) * sizeof(int64_t);
  const std::size_t work_bytes = work_.work.size() * sizeof(WorkItem);
  const std::size_t combine_bytes = work_.combine.size() * sizeof(CombineItem);
  const std::size_t qsl_at = 0;
  const std::size_t lens_at = align16(qsl_at + qsl_bytes);
  const std::size_t table_at = align16(lens_at + lens_bytes);
  const std::size_t slot_at = align16(table_at + table_bytes);
  const std::size_t work_at = align16(slot_at + slot_bytes);
  const std::size_t combine_at = align16(work_at + work_bytes);
  const std::size_t total = align16(combine_at + combine_bytes);

  // Reusing the staging buffer: the previous upload from it must be complete.
  // In the engine's flow it certainly is: the previous step's run() calls made
  // the compute stream wait for ready_, and the model copied that step's
  // logits to host memory (SDK: model outputs are host memory) before core
  // could call plan() again, which synchronised the compute stream past those
  // waits. So this returns at once; it only blocks for a caller that plans
  // twice without running a layer in between.
  PAGEDLLM_CUDA_CHECK(cudaEventSynchronize(ready_.get()));
  staging_.reserve(total);
  std::byte* host = staging_.data();
  if (qsl_bytes) std::memcpy(host + qsl_at, b.query_start_loc, qsl_bytes);
  if (lens_bytes) std::memcpy(host + lens_at, b.seq_lens, lens_bytes);
  if (table_bytes) std::memcpy(host + table_at, b.block_tables, table_bytes);
  if (slot_bytes) std::memcpy(host + slot_at, b.slot_mapping, slot_bytes);
  if (work_bytes) std::memcpy(host + work_at, work_.work.data(), work_bytes);
  if (combine_bytes) std::memcpy(host + combine_at, work_.combine.data(), combine_bytes);

  // The previous step's kernels read the device buffer; wait for them on the
  // device (an event never recorded counts as complete).
  PAGEDLLM_CUDA_CHECK(cudaStreamWaitEvent(stream_.get(), previous_compute, 0));
  device_.reserve(total, stream_.get());
  std::byte* dev = device_.data();
  if (total > 0) PAGEDLLM_CUDA_CHECK(cudaMemcpyAsync(dev, host, total, cudaMemcpyHostToDevice, stream_.get()));
  PAGEDLLM_CUDA_CHECK(cudaEventRecord(ready_.get(), stream_.get()));

  device_step_.query_start_loc = reinterpret_cast<const int32_t*>(dev + qsl_at);
  device_step_.seq_lens = reinterpret_cast<const int32_t*>(dev + lens_at);
  device_step_.block_tables = reinterpret_cast<const int32_t*>(dev + table_at);
  device_step_.slot_mapping = reinterpret_cast<const int64_t*>(dev + slot_at);
  device_step_.work = reinterpret_cast<const WorkItem*>(dev + work_at);
  device_step_.combine = reinterpret_cast<const CombineItem*>(dev + combine_at);
  device_step_.num_tokens = b.num_tokens;
  device_step_.num_work = int32_t(work_.work.size());
  device_step_.num_combine = int32_t(work_.combine.size());
  device_step_.max_blocks_per_seq = b.max_blocks_per_seq;
  device_step_.max_tile_rows = work_.max_tile_rows;
}

}  // namespace pagedllm::attention_cuda
