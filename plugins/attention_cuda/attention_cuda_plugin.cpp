// attention_cuda: paged attention with the KV cache in CUDA device memory.
// The plugin class validates every call, owns the cache (device_kv_cache.h),
// the step metadata (step_metadata.h) and the streams and events that order
// its work against the model's compute stream, and launches the kernels
// (kernels.h). README.md describes the layout, the kernels and the ordering.
//
// Stream ordering, per step N (no host synchronisation in plan() or run()):
//   swap_out / swap_in / copy_blocks: the copy stream waits for last_compute_
//     (recorded after step N-1's last kernel), enqueues the copies and records
//     copies_done_;
//   plan(): the metadata stream waits for last_compute_ too (step N-1's
//     kernels read the metadata buffer), uploads, records metadata ready();
//   run(): the first call on a stream makes it wait for ready() and
//     copies_done_, then queues the KV write and attention, and records
//     last_compute_.

#include <cuda_runtime_api.h>

#include <memory>
#include <optional>
#include <string>

#include "pagedllm/sdk.hpp"
#include "cuda_handles.h"
#include "device_kv_cache.h"
#include "kernels.h"
#include "step_metadata.h"
#include "common/dtype_name.h"
#include "pagedllm/sdk/cpp/paged_batch_check.hpp"
#include "cuda_common/cuda_check.h"

namespace pagedllm::attention_cuda {
namespace {

const pllm::PagedInputCheck kCheck("attention_cuda");

std::string str(int64_t v) { return std::to_string(v); }

std::string device_name(const pllm_device& device) {
  switch (device.type) {
    case PLLM_DEVICE_CPU: return "cpu";
    case PLLM_DEVICE_CUDA: return "cuda:" + str(device.index);
    case PLLM_DEVICE_FORCE_32BIT:
    case PLLM_DEVICE_INVALID: break;
  }
  return "invalid";
}

// Checks that `device` is a CUDA device this process can use and makes it
// current; returns its ordinal.
int32_t select_device(const pllm_device& device) {
  if (device.type != PLLM_DEVICE_CUDA) {
    throw pllm::Error(PLLM_ERROR_UNSUPPORTED, "attention_cuda runs on CUDA devices only (device: " +
                                                  device_name(device) + "); use attention_cpu for the CPU");
  }
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    throw pllm::Error(PLLM_ERROR_DEVICE, "attention_cuda: no usable CUDA device for " + device_name(device) +
                                             ": cudaGetDeviceCount failed: " + cudaGetErrorName(status) + " (" +
                                             cudaGetErrorString(status) + ")");
  }
  if (device.index < 0 || device.index >= count) {
    throw pllm::Error(PLLM_ERROR_DEVICE, "attention_cuda: " + device_name(device) + " does not exist (this machine has " +
                                             str(count) + " CUDA device" + (count == 1 ? "" : "s") + ")");
  }
  PAGEDLLM_CUDA_CHECK(cudaSetDevice(device.index));
  return device.index;
}

class AttentionCuda : public pllm::AttentionPlugin {
 public:
  static constexpr uint32_t kFeatures = PLLM_ATTENTION_SLIDING_WINDOW;
  struct Options {
    SplitPolicy split;
    static Options parse(pllm::OptionReader& reader) {
      Options o;
      o.split.partition_size = reader.get_in_range<int32_t>("partition_size", 512, 16, 1 << 20);
      o.split.split_min_context = reader.get_in_range<int32_t>("split_min_context", 1024, 0, 1 << 30);
      return o;
    }
  };

  AttentionCuda(const Options& options, const pllm_attention_create_args& args)
      : options_(options), device_(select_device(args.device)) {
    pllm::log_debug("attention_cuda: cuda:", device_, ", partition_size=", options_.split.partition_size,
                    ", split_min_context=", options_.split.split_min_context);
  }

  ~AttentionCuda() {
    // Nothing may be freed under a kernel or copy still using it; errors cannot be reported here.
    (void)cudaSetDevice(device_);
    (void)cudaEventSynchronize(last_compute_.get());
    (void)cudaStreamSynchronize(copy_stream_.get());
    metadata_.synchronize_quietly();
  }

  uint64_t bytes_per_block(const pllm_kv_cache_spec& spec) { return geometry_of(spec).bytes_per_block(); }

  pllm_device_memory memory_info() {
    activate();
    size_t free_bytes = 0, total_bytes = 0;
    PAGEDLLM_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    pllm_device_memory info{};
    info.struct_size = sizeof info;
    info.free_bytes = free_bytes;
    info.total_bytes = total_bytes;
    return info;
  }

  // A second call (core's profiling step, SDK 1.1) frees the first cache and
  // its host pool before allocating: outside plan/run, so it may wait.
  void allocate_cache(const pllm_kv_cache_spec& spec, int64_t num_device_blocks, int64_t num_host_blocks) {
    const CacheGeometry geometry = geometry_of(spec);
    activate();
    if (cache_) {
      synchronize_all();
      cache_.reset();
    }
    planned_ = false;
    cache_.emplace(geometry, num_device_blocks, num_host_blocks);
  }

  void plan(const pllm_batch& batch) {
    // A plan that fails part-way (a CUDA error in the upload) has already
    // rebuilt the host work list but not the device metadata: run() must not
    // launch with the two out of step (partials sized for one list, indexed by
    // the other), so until this plan completes there is none.
    planned_ = false;
    activate();
    const DeviceKvCache& cache = allocated();
    kCheck.batch(batch, cache.geometry().block_size, cache.num_device_blocks());
    metadata_.upload(batch, options_.split, last_compute_.get());
    planned_ = true;
    waited_stream_.reset();
  }

  void run(int32_t layer, const pllm_attention_layer_args& args) {
    if (!planned_) kCheck.invalid("run() before plan()");
    activate();
    const CacheGeometry& g = cache_->geometry();
    if (layer < 0 || layer >= g.num_layers) {
      kCheck.invalid("layer " + str(layer) + " is out of range [0, " + str(g.num_layers) + ")");
    }
    // The wrapper checked that args has its 2.0 fields; each tensor is checked here.
    const pllm_tensor& query = pllm::require(args.query, "attention_cuda: layer args: query");
    const pllm_tensor& key = pllm::require(args.key, "attention_cuda: layer args: key");
    const pllm_tensor& value = pllm::require(args.value, "attention_cuda: layer args: value");
    const pllm_tensor& output = pllm::require(args.output, "attention_cuda: layer args: output");
    const DeviceStep& step = metadata_.device_step();
    const int64_t num_tokens = step.num_tokens;
    check_tensor("query", query, num_tokens, -1, g);
    const int64_t num_heads = query.shape[1];
    check_tensor("key", key, num_tokens, g.num_kv_heads, g);
    check_tensor("value", value, num_tokens, g.num_kv_heads, g);
    check_tensor("output", output, num_tokens, num_heads, g);
    if (num_heads <= 0 || num_heads % g.num_kv_heads != 0) {
      kCheck.invalid("query has " + str(num_heads) + " heads, not a positive multiple of the cache's " +
                     str(g.num_kv_heads) + " kv heads");
    }
    if (num_tokens == 0) return;

    // NULL is the legacy default stream, which the waits and records below handle like any other.
    const auto stream = static_cast<cudaStream_t>(args.stream);
    if (!waited_stream_ || *waited_stream_ != stream) {
      PAGEDLLM_CUDA_CHECK(cudaStreamWaitEvent(stream, metadata_.ready(), 0));
      PAGEDLLM_CUDA_CHECK(cudaStreamWaitEvent(stream, copies_done_.get(), 0));
      waited_stream_ = stream;
    }

    LayerCache layer_cache;
    layer_cache.keys = cache_->keys(layer);
    layer_cache.values = cache_->values(layer);
    layer_cache.num_kv_heads = g.num_kv_heads;
    layer_cache.head_dim = g.head_dim;
    layer_cache.block_size = g.block_size;
    layer_cache.dtype = g.dtype;
    AttentionLaunch launch;
    launch.cache = layer_cache;
    launch.step = step;
    launch.query = rows_of(query);
    launch.output = rows_of(output);
    launch.num_heads = int32_t(num_heads);
    launch.scale = args.scale;
    if (PLLM_HAS_FIELD(pllm_attention_layer_args, &args, sliding_window)) {
      if (args.sliding_window < 0) kCheck.invalid("sliding_window " + str(args.sliding_window) + " is negative");
      launch.sliding_window = args.sliding_window;
    }
    // Everything that can refuse the layer (grid limits, the split-K scratch
    // running out of memory) before the first kernel: a failed run() must not
    // leave a K/V write in flight that last_compute_ does not cover (the next
    // plan() would overwrite the metadata it reads) or a half-done layer.
    (void)query_vector_chunks(launch);
    launch.partials = partials_for(metadata_.num_partials(), launch.num_heads, g.head_dim, stream);
    launch_write_kv(layer_cache, step, rows_of(key), rows_of(value), stream);
    launch_paged_attention(launch, stream);
    PAGEDLLM_CUDA_CHECK(cudaEventRecord(last_compute_.get(), stream));
  }

  void copy_blocks(std::span<const pllm_block_copy> pairs) {
    block_operation(pairs, [&](cudaStream_t s) { allocated().copy_blocks(pairs, s); });
  }
  void swap_out(std::span<const pllm_block_copy> pairs) {
    block_operation(pairs, [&](cudaStream_t s) { allocated().swap_out(pairs, s); });
  }
  void swap_in(std::span<const pllm_block_copy> pairs) {
    block_operation(pairs, [&](cudaStream_t s) { allocated().swap_in(pairs, s); });
  }

 private:
  static CacheGeometry geometry_of(const pllm_kv_cache_spec& spec) {
    const CacheGeometry g = CacheGeometry::from_spec(spec, "attention_cuda");
    if (g.head_dim != 32 && g.head_dim != 64 && g.head_dim != 128) {
      throw pllm::Error(PLLM_ERROR_UNSUPPORTED, "attention_cuda: head_dim " + str(g.head_dim) +
                                                    " is not supported (kernels exist for 32, 64 and 128)");
    }
    return g;
  }

  void activate() const { PAGEDLLM_CUDA_CHECK(cudaSetDevice(device_)); }

  DeviceKvCache& allocated() {
    if (!cache_) kCheck.invalid("the KV cache is not allocated yet (allocate_cache first)");
    return *cache_;
  }

  // Swaps and copies wait for the previous step's kernels (they may read or
  // overwrite blocks those kernels use); the next step's run() waits for them.
  template <class Enqueue>
  void block_operation(std::span<const pllm_block_copy> pairs, Enqueue&& enqueue) {
    activate();
    allocated();
    if (pairs.empty()) return;
    PAGEDLLM_CUDA_CHECK(cudaStreamWaitEvent(copy_stream_.get(), last_compute_.get(), 0));
    enqueue(copy_stream_.get());
    PAGEDLLM_CUDA_CHECK(cudaEventRecord(copies_done_.get(), copy_stream_.get()));
    waited_stream_.reset();
  }

  void synchronize_all() {
    PAGEDLLM_CUDA_CHECK(cudaEventSynchronize(last_compute_.get()));
    PAGEDLLM_CUDA_CHECK(cudaStreamSynchronize(copy_stream_.get()));
    metadata_.synchronize();
  }

  // The split-K scratch for this step, grown on the compute stream (the only
  // stream that touches it; a later step's stream is ordered after this one
  // through the metadata upload's wait for last_compute_).
  Partials partials_for(int32_t slots, int32_t num_heads, int32_t head_dim, cudaStream_t stream) {
    Partials p;
    if (slots == 0) return p;
    const int64_t floats = partial_floats(slots, num_heads, head_dim);
    partials_.reserve(std::size_t(floats) * sizeof(float), stream);
    const int64_t vectors = int64_t(slots) * kTileRows * num_heads;
    p.out = reinterpret_cast<float*>(partials_.data());
    p.max = p.out + vectors * head_dim;
    p.sum = p.max + vectors;
    return p;
  }

  void check_tensor(const char* name, const pllm_tensor& t, int64_t tokens, int64_t heads,
                    const CacheGeometry& g) const {
    const std::string what = std::string(name) + ": ";
    if (t.device.type != PLLM_DEVICE_CUDA || t.device.index != device_) {
      kCheck.invalid(what + "must be in the memory of cuda:" + str(device_) + ", not " + device_name(t.device));
    }
    if (t.dtype != g.dtype) {
      throw pllm::Error(PLLM_ERROR_UNSUPPORTED, "attention_cuda: " + what + "dtype " + plugins::dtype_name(t.dtype) +
                                                    " differs from the KV cache's " + plugins::dtype_name(g.dtype) +
                                                    " (activations and cache share one dtype)");
    }
    kCheck.rows(name, t, tokens, heads, g.head_dim);
  }

  static DeviceRows rows_of(const pllm_tensor& t) { return DeviceRows{t.data, t.strides[0], t.strides[1]}; }

  Options options_;
  int32_t device_;  // first: the members below are created on this device
  Stream copy_stream_;
  Event copies_done_;
  Event last_compute_;  // after the last kernel run() queued
  StepMetadata metadata_;
  DeviceBuffer partials_;
  std::optional<DeviceKvCache> cache_;
  bool planned_ = false;
  // The stream the current step's waits were queued on; reset by plan() and block operations.
  std::optional<cudaStream_t> waited_stream_;
};

}  // namespace
}  // namespace pagedllm::attention_cuda

PAGEDLLM_PLUGIN(pagedllm::attention_cuda::AttentionCuda, "attention_cuda", "0.1.0",
                "Paged attention on CUDA (split-K decode, varlen prefill over paged context, GQA)")
