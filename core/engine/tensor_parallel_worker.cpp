// The worker of a tensor-parallel rank > 0 (tensor_parallel.h): its shard of the model, its
// attention backend and KV pool, and rank 0's steps run as they arrive. No scheduler, tokenizer,
// sampler or server: rank 0 decides, every rank computes, rank 0 samples.

#include <unistd.h>

#include <csignal>

#include <fmt/format.h>

#include "core/common/logging.h"
#include "core/config/config_error.h"
#include "core/engine/kv_cache_sizing.h"
#include "core/engine/plugin_args.h"
#include "core/engine/tensor_parallel.h"
#include "core/plugin/configured_plugins.h"

namespace pagedllm {
namespace {

class Worker {
 public:
  Worker(const HostConfig& config, PluginRegistry& registry, TensorParallelGroup& group)
      : group_(group), log_(logger("worker")) {
    const auto library_of = [&](const PluginSlot& slot, pllm_plugin_kind kind) {
      return std::shared_ptr<const PluginLibrary>(registry.load(slot.plugin, kind, slot.key_path + ".plugin"));
    };
    const pllm_device device = to_plugin_device(config.device);
    const std::string model_options = config.model.plugin.options.dump();
    const std::string model_path = config.model.path.string();
    const pllm_model_create_args model_args{sizeof(pllm_model_create_args), model_options.c_str(),
                                            model_path.c_str(), device, to_plugin_dtype(config.model.dtype),
                                            group.ref()};
    log_->info("loading rank {}'s shard of model {} with {}", group.rank(), model_path, config.model.plugin.plugin);
    model_ = create_plugin_instance<pllm_model_api, pllm_model>(
        library_of(config.model.plugin, PLLM_PLUGIN_KIND_MODEL), model_args);
    pllm_model_info info{};
    info.struct_size = sizeof info;
    pllm_error error{};
    check_plugin_call(model_.api().get_info(model_.get(), &info, &error), error, model_.library(), "get_info");

    const std::string attention_options = config.attention.options.dump();
    const pllm_attention_create_args attention_args{sizeof(pllm_attention_create_args), attention_options.c_str(),
                                                    device};
    attention_ = create_plugin_instance<pllm_attention_api, pllm_attention_backend>(
        library_of(config.attention, PLLM_PLUGIN_KIND_ATTENTION), attention_args);

    // Sized exactly as rank 0 sizes its pool (speculation is refused under tensor parallelism,
    // so the pool holds the model's layers only), then checked against every rank's.
    const KvCacheSizing sizing = size_and_allocate_kv_cache(
        {config, attention_, model_,
         pllm_kv_cache_spec{sizeof(pllm_kv_cache_spec), info.num_layers, info.num_kv_heads, info.head_dim,
                            config.cache.block_size, info.dtype},
         resolve_max_model_len(config, info), 0});
    require_same_kv_pool(group, sizing.num_device_blocks, sizing.num_host_blocks);
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    log_->info("rank {} of {} ready (pid {} on {}): {}", group.rank(), group.size(), getpid(), host,
               describe_kv_cache_sizing(sizing, config.cache.block_size, config.device.str()));
  }

  void run() {
    GroupMessageReceiver receiver(group_);
    std::uint64_t steps = 0;
    for (;;) {
      const GroupMessage message = receiver.receive();
      if (message.kind == GroupMessageKind::kStop) break;
      if (message.kind == GroupMessageKind::kHeartbeat) continue;
      run_step(decode_step_plan(message.payload));
      ++steps;
    }
    log_->info("stopped by rank 0 after {} steps", steps);
  }

 private:
  // What rank 0's step does, without the sampling: its logits are rank 0's to use.
  void run_step(const StepPlan& plan) {
    pllm_error error{};
    const auto copy = [&](auto fn, const std::vector<pllm_block_copy>& copies, const char* what) {
      if (copies.empty()) return;
      check_plugin_call(fn(attention_.get(), copies.data(), static_cast<std::int64_t>(copies.size()), &error), error,
                        attention_.library(), what);
    };
    copy(attention_.api().swap_out, plan.swap_out, "swap_out");
    copy(attention_.api().swap_in, plan.swap_in, "swap_in");
    copy(attention_.api().copy_blocks, plan.copies, "copy_blocks");
    const pllm_batch batch = plan.view();
    check_plugin_call(attention_.api().plan(attention_.get(), &batch, &error), error, attention_.library(), "plan");
    pllm_tensor logits{}, hidden{};
    logits.struct_size = hidden.struct_size = sizeof(pllm_tensor);
    pllm_forward_output forward{sizeof(pllm_forward_output), &logits, &hidden};
    const pllm_attention_ref attention = attention_ref(attention_);
    check_plugin_call(model_.api().forward(model_.get(), &batch, &attention, &forward, &error), error,
                      model_.library(), "forward");
  }

  TensorParallelGroup& group_;
  std::shared_ptr<spdlog::logger> log_;
  AttentionInstance attention_;
  ModelInstance model_;
};

}  // namespace

int run_tensor_parallel_worker(const HostConfig& config, PluginRegistry& registry, TensorParallelGroup& group) {
  // A worker ends on rank 0's stop, after rank 0's drain. mpirun passes SIGINT/SIGTERM to every rank
  // (Ctrl-C, or a supervisor stopping the job): were a worker to die of it, rank 0's drain would wait
  // in a collective for it. If rank 0 itself dies, mpirun ends the workers with SIGKILL.
  std::signal(SIGINT, SIG_IGN);
  std::signal(SIGTERM, SIG_IGN);
  Worker worker(config, registry, group);
  worker.run();
  return 0;
}

}  // namespace pagedllm
