// The worker of a tensor-parallel rank > 0 (tensor_parallel.h): its shard of the model, its
// attention backend and KV pool (and its split of the EAGLE head), and rank 0's steps and drafts run
// as they arrive. No scheduler, tokenizer, sampler or server: rank 0 decides, every rank computes,
// rank 0 samples.

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
    runner_ = std::make_unique<ModelRunner>(attention_, model_, info);

    int num_draft_layers = 0, num_speculative_tokens = 0;
    if (config.speculative) {
      // The rank's split of the draft head, which rank 0 drives as it drives the forward.
      const SpeculativeConfig& spec = *config.speculative;
      const std::string spec_options = spec.plugin.options.dump();
      const std::string draft_path = spec.draft.string();
      const pllm_speculator_target target{sizeof(pllm_speculator_target), &model_.api(), model_.get(), &info};
      const pllm_speculator_create_args spec_args{sizeof(pllm_speculator_create_args), spec_options.c_str(),
                                                  draft_path.c_str(), device, &target,
                                                  spec.num_speculative_tokens, group.ref()};
      log_->info("loading rank {}'s part of draft {} with {}", group.rank(), draft_path, spec.plugin.plugin);
      speculator_ = create_plugin_instance<pllm_speculator_api, pllm_speculator>(
          library_of(spec.plugin, PLLM_PLUGIN_KIND_SPECULATOR), spec_args);
      pllm_speculator_info spec_info{};
      spec_info.struct_size = sizeof spec_info;
      check_plugin_call(speculator_.api().get_info(speculator_.get(), &spec_info, &error), error,
                        speculator_.library(), "get_info");
      num_draft_layers = spec_info.num_draft_layers;
      num_speculative_tokens = spec.num_speculative_tokens;
    }

    // Sized exactly as rank 0 sizes its pool (the draft's layers after the model's; a pool measured
    // on the device: the smallest rank's), then checked against every rank's.
    const KvCacheSizing sizing = size_and_allocate_kv_cache(
        {config, attention_, *runner_, make_kv_cache_spec(config, info, num_draft_layers),
         resolve_max_model_len(config, info), num_speculative_tokens,
         [&group](int blocks) { return smallest_across_ranks(group, blocks); }});
    require_same_kv_pool(group, sizing.num_device_blocks, sizing.num_host_blocks);
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    log_->info("rank {} of {} ready (pid {} on {}): {}", group.rank(), group.size(), getpid(), host,
               describe_kv_cache_sizing(sizing, config.cache.block_size, config.device.str()));
  }

  void run() {
    GroupMessageReceiver receiver(group_);
    std::uint64_t steps = 0, drafts = 0;
    for (;;) {
      const GroupMessage message = receiver.receive();
      if (message.kind == GroupMessageKind::kStop) break;
      if (message.kind == GroupMessageKind::kHeartbeat) continue;
      if (message.kind == GroupMessageKind::kDraft) {
        run_draft(decode_draft_plan(message.payload));
        ++drafts;
        continue;
      }
      run_step(decode_step_plan(message.payload));
      ++steps;
    }
    log_->info("stopped by rank 0 after {} steps{}", steps,
               speculator_ ? fmt::format(" and {} draft forwards", drafts) : "");
  }

 private:
  // What rank 0's step does, without the sampling: its logits are rank 0's to use.
  void run_step(const StepPlan& plan) { hidden_ = runner_->execute(plan.step()).hidden; }

  // rank 0's draft() (SpeculativeDecoder::run_draft) on this rank's split of the head.
  void run_draft(const DraftPlan& plan) {
    if (!speculator_) {
      throw std::runtime_error(fmt::format("rank {}: rank 0 sent a draft, but this rank's config has no speculative: "
                                           "every rank must run the same config",
                                           group_.rank()));
    }
    if (plan.target_features && hidden_.data == nullptr) {
      throw std::runtime_error(fmt::format("rank {}: rank 0 sent a draft reading the target's hidden states, but the "
                                           "last forward returned none",
                                           group_.rank()));
    }
    runner_->draft(speculator_, plan.batch.view(), plan.target_features ? &hidden_ : nullptr,
                   plan.feature_rows.data());
  }

  TensorParallelGroup& group_;
  std::shared_ptr<spdlog::logger> log_;
  AttentionInstance attention_;
  ModelInstance model_;
  std::unique_ptr<ModelRunner> runner_;  // over attention_ and model_
  SpeculatorInstance speculator_;  // with speculative: in the config
  // The hidden states the last forward returned (the model's memory, until its next forward): the
  // features of a draft that reads the target's.
  pllm_tensor hidden_{};
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
