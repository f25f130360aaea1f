// Startup: the configured plugins, the model, its tokenizer and generation
// defaults, the request limits, the KV cache and the scheduler; Engine::create.

#include "core/engine/llm_engine.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <span>

#include <fmt/format.h>

#include "core/common/strings.h"
#include "core/config/config_error.h"
#include "core/engine/generation_config.h"
#include "core/engine/kv_cache_sizing.h"
#include "core/engine/model_check.h"
#include "core/engine/plugin_args.h"
#include "core/engine/tensor_parallel.h"
#include "core/tokenizer/tokenizer_error.h"
#include "core/plugin/configured_plugins.h"

namespace pagedllm {

LlmEngine::LlmEngine(const HostConfig& config, PluginRegistry& registry, TensorParallelGroup* group)
    : config_(config),
      log_(logger("engine")),
      tokenizer_((require_model_path(config), tokenizer::Tokenizer::from_model(config.model.path.string()))) {
  if (config.parallel && config.parallel->tensor_parallel_size > 1 && group == nullptr) {
    throw ConfigError(fmt::format("{}: parallel.tensor_parallel_size: {}: the engine was created outside its group "
                                  "of ranks (TensorParallelGroup::join)",
                                  config.sources.locate("parallel.tensor_parallel_size"),
                                  config.parallel->tensor_parallel_size));
  }
  const ConfiguredPlugins configured = load_configured_plugins(config, registry);
  if (!configured.ok()) throw ConfigError(join(configured.errors, "\n"));
  const auto library_of = [&](pllm_plugin_kind kind) {
    for (const ConfiguredPlugin& plugin : configured.plugins) {
      if (plugin.kind == kind) return std::shared_ptr<const PluginLibrary>(plugin.library);
    }
    throw ConfigError("no plugin configured for a required slot");
  };
  const pllm_device device = to_plugin_device(config.device);

  const auto started = Clock::now();
  const std::string model_options = config.model.plugin.options.dump();
  const std::string model_path = config.model.path.string();
  pllm_model_create_args model_args{sizeof(pllm_model_create_args), model_options.c_str(),
                                    model_path.c_str(), device, to_plugin_dtype(config.model.dtype),
                                    group ? group->ref() : nullptr};
  log_->info("loading model {} with {}{}", model_path, config.model.plugin.plugin,
             group ? fmt::format(" (rank 0's shard of {})", group->size()) : "");
  model_instance_ = create_plugin_instance<pllm_model_api, pllm_model>(
      library_of(PLLM_PLUGIN_KIND_MODEL), model_args);
  log_->info("model loaded in {:.2f} s", seconds_between(started, Clock::now()));

  pllm_error error{};
  model_info_.struct_size = sizeof(pllm_model_info);
  check_plugin_call(model_instance_.api().get_info(model_instance_.get(), &model_info_, &error), error,
                    model_instance_.library(), "get_info");

  const std::string attention_options = config.attention.options.dump();
  pllm_attention_create_args attention_args{sizeof(pllm_attention_create_args),
                                            attention_options.c_str(), device};
  attention_ = create_plugin_instance<pllm_attention_api, pllm_attention_backend>(
      library_of(PLLM_PLUGIN_KIND_ATTENTION), attention_args);
  runner_ = std::make_unique<ModelRunner>(attention_, model_instance_, model_info_);
  const std::string sampler_options = config.sampler.options.dump();
  // Models leave their logits on their device (SDK 2.0): the sampler samples
  // there, and only ids and requested logprobs cross to the host.
  pllm_sampler_create_args sampler_args{sizeof(pllm_sampler_create_args), sampler_options.c_str(), device};
  sampler_ = create_plugin_instance<pllm_sampler_api, pllm_sampler>(
      library_of(PLLM_PLUGIN_KIND_SAMPLER), sampler_args);
  if (config.speculative) {
    const SpeculativeConfig& spec = *config.speculative;
    const std::string spec_options = spec.plugin.options.dump();
    const std::string draft_path = spec.draft.string();
    const pllm_speculator_target target{sizeof(pllm_speculator_target), &model_instance_.api(),
                                        model_instance_.get(), &model_info_};
    // Under tensor parallelism the draft is split like the target, and every rank runs it.
    pllm_speculator_create_args spec_args{sizeof(pllm_speculator_create_args), spec_options.c_str(),
                                          draft_path.c_str(), device, &target, spec.num_speculative_tokens,
                                          group ? group->ref() : nullptr};
    const std::shared_ptr<const PluginLibrary> spec_library = library_of(PLLM_PLUGIN_KIND_SPECULATOR);
    // The collectives are a field SDK 2.2 appended: an older speculator would take the rank's shard of
    // the target's weights for the whole.
    if (const SdkVersion v = spec_library->sdk_version(); group && v.major == 2 && v.minor < 2) {
      throw ConfigError(fmt::format("{}: speculative: under tensor parallelism the speculator must be built "
                                    "against SDK 2.2 or newer (it is given the ranks' group); '{}' was built "
                                    "against {}",
                                    config.sources.locate("speculative.plugin"), spec_library->name(), v.str()));
    }
    log_->info("loading draft {} with {} (K={})", draft_path, spec.plugin.plugin, spec.num_speculative_tokens);
    speculative_ = std::make_unique<SpeculativeDecoder>(
        spec, create_plugin_instance<pllm_speculator_api, pllm_speculator>(spec_library, spec_args),
        model_info_, *runner_, sampler_, config.cache.block_size, device);
  }

  // ---- the model and its tokenizer must agree ----
  if (static_cast<int>(tokenizer_.vocab_size()) > model_info_.vocab_size) {
    throw ConfigError(fmt::format("{}: the tokenizer has {} tokens but the model's vocabulary has {}",
                                  tokenizer_.source(), tokenizer_.vocab_size(), model_info_.vocab_size));
  }
  const std::optional<tokenizer::ChatFormat> chat_format =
      config.model.chat_template ? tokenizer::parse_chat_format(*config.model.chat_template) : std::nullopt;
  if (config.model.chat_template && !chat_format) {
    // model.chat_template names a Jinja file (the config checked that it is one).
    std::ifstream file(*config.model.chat_template, std::ios::binary);
    std::stringstream text;
    text << file.rdbuf();
    if (!file) throw ConfigError(fmt::format("model.chat_template: cannot read {}", *config.model.chat_template));
    try {
      chat_template_.emplace(text.str(), *config.model.chat_template, tokenizer_.config());
    } catch (const tokenizer::TokenizerError& template_error) {
      throw ConfigError(fmt::format("model.chat_template: {}", template_error.what()));
    }
  } else if (chat_format || tokenizer_.config().chat_template) {
    chat_template_ = tokenizer::ChatTemplate::from_config(tokenizer_.config(), chat_format);
  }
  defaults_ = read_generation_defaults(
      config.model.path,
      std::span<const std::int32_t>(model_info_.eos_token_ids,
                                    static_cast<std::size_t>(std::max(0, model_info_.num_eos_token_ids))),
      tokenizer_.eos_id());
  if (config.constraint) {
    // The token masks are fields SDK 2.1 appended to the sample batch: an older sampler would ignore them.
    if (const SdkVersion v = sampler_.library().sdk_version(); v.major == 2 && v.minor < 1) {
      throw ConfigError(fmt::format("{}: constraint: structured output needs a sampler built against SDK 2.1 or "
                                    "newer (it applies the token masks); sampler '{}' was built against {}",
                                    config.sources.locate("constraint.plugin"), sampler_.library().name(), v.str()));
    }
    structured_output_ = std::make_unique<StructuredOutput>(library_of(PLLM_PLUGIN_KIND_CONSTRAINT),
                                                            config.constraint->options.dump(), tokenizer_,
                                                            model_info_.vocab_size, defaults_.eos_token_ids);
    if (speculative_) speculative_->set_structured_output(structured_output_.get());
    log_->info("structured output by {}", config.constraint->plugin);
  }

  // ---- limits ----
  const int max_model_len = resolve_max_model_len(config, model_info_);
  // A GGUF file is served under its name without ".gguf" (SmolLM2-135M-Instruct.Q4_1).
  model_.served_name = (config.model.path.extension() == ".gguf" ? config.model.path.stem()
                                                                  : config.model.path.filename()).string();
  if (model_.served_name.empty()) model_.served_name = config.model.path.parent_path().filename().string();
  model_.architecture = model_info_.architecture ? model_info_.architecture : "";
  model_.vocab_size = model_info_.vocab_size;
  model_.max_model_len = max_model_len;
  model_.num_layers = model_info_.num_layers;
  model_.hidden_size = model_info_.hidden_size;

  // ---- the KV cache: bytes per block from the backend, blocks from the budget ----
  const int num_speculative_tokens = speculative_ ? speculative_->num_speculative_tokens() : 0;
  const KvCacheSizing sizing = size_and_allocate_kv_cache(
      {config, attention_, *runner_,
       make_kv_cache_spec(config, model_info_, speculative_ ? speculative_->num_draft_layers() : 0), max_model_len,
       num_speculative_tokens,
       group ? [group](int blocks) { return smallest_across_ranks(*group, blocks); } : std::function<int(int)>()});
  const int num_device_blocks = sizing.num_device_blocks;
  num_host_blocks_ = sizing.num_host_blocks;
  if (group) {
    // The workers allocated theirs alike (tensor_parallel_worker.cpp); from here rank 0 drives them.
    require_same_kv_pool(*group, num_device_blocks, num_host_blocks_);
    tensor_parallel_ = std::make_unique<TensorParallelDriver>(*group);
    if (speculative_) speculative_->set_tensor_parallel(tensor_parallel_.get());
  }

  SchedulerConfig scheduler_config = config.scheduler;
  scheduler_config.max_model_len = max_model_len;
  scheduler_config.num_lookahead_tokens = num_speculative_tokens;
  scheduler_config.num_draft_slots = std::max(0, num_speculative_tokens - 1);
  try {
    scheduler_ = std::make_unique<Scheduler>(scheduler_config, config.cache, num_device_blocks,
                                             num_host_blocks_);
  } catch (const std::invalid_argument& e) {
    throw ConfigError(fmt::format("{}: {}", config.sources.locate("scheduler"), e.what()));
  }

  limits_.vocab_size = model_info_.vocab_size;
  limits_.max_logprobs = config.model.max_logprobs < 0 ? model_info_.vocab_size : config.model.max_logprobs;
  limits_.max_model_len = max_model_len;
  limits_.max_n = scheduler_config.max_num_seqs;
  limits_.scheduler = scheduler_config;
  limits_.block_size = config.cache.block_size;
  limits_.num_device_blocks = num_device_blocks;
  limits_.speculative_decoding = speculative_ != nullptr;
  limits_.sampler_has_logit_adjustments = sampler_.library().sdk_version().minor >= 1;
  metrics_.scheduler = scheduler_->stats();
  metrics_.speculative_decoding_enabled = speculative_ != nullptr;

  log_->info("{}; max_model_len={}", describe_kv_cache_sizing(sizing, config.cache.block_size, config.device.str()),
             max_model_len);
}

std::unique_ptr<Engine> Engine::create(const HostConfig& config, PluginRegistry& registry,
                                       TensorParallelGroup* group) {
  return std::make_unique<LlmEngine>(config, registry, group);
}

}  // namespace pagedllm
