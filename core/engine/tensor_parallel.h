#pragma once
// Tensor parallelism, the engine's side (vLLM's driver/worker split; docs/tensor-parallel.md):
// the group of ranks this process runs in, the step plan rank 0 (the driver: scheduler, block
// manager, sampler, server) sends to the other ranks (the workers) before every forward, and the
// messages that keep an idle group alive and stop it.
//
// Every message is one broadcast from rank 0 of 4 KiB (a header and, when it fits,
// the payload), followed by a second broadcast of the payload's rest when it does not. A worker
// waits for the next message inside a broadcast, which fails after the collectives plugin's
// timeout: rank 0 therefore sends a heartbeat whenever it has sent nothing for kHeartbeatInterval.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/config/config.h"
#include "core/engine/model_runner.h"
#include "core/kv/block_id.h"
#include "core/plugin/plugin_instance.h"
#include "core/plugin/plugin_registry.h"
#include "pagedllm/sdk/batch.h"

namespace pagedllm {

// This process's rank in the group mpirun started, through the configured collectives plugin.
// The engine's own messages (step plans, pool sizes: host memory) go over collectives_mpi on the
// CPU; the model's collectives over the configured backend on the rank's device. On the CPU with
// backend mpi, one communicator serves both.
class TensorParallelGroup {
 public:
  // Joins the group when the config has parallel.tensor_parallel_size > 1 (every rank must call
  // it); nullptr otherwise. Throws ConfigError when the group's size differs from the configured
  // one, the same on every rank, or when the rank's device cannot be used, naming the rank.
  static std::unique_ptr<TensorParallelGroup> join(const HostConfig& config, PluginRegistry& registry);

  int rank() const { return rank_; }
  int size() const { return size_; }
  // The device this rank computes on: `device:` on the CPU; on CUDA, parallel.devices[rank], or
  // cuda:(B + the rank's local rank on its machine) for `device: cuda:B`.
  const DeviceConfig& device() const { return device_; }
  // For the model's create args: its shard meets the other ranks' through this (on device()).
  const pllm_collectives_ref* ref() const { return &model_ref_; }
  // `bytes` of host memory `data` from rank 0 into every rank's `data`.
  void broadcast(void* data, std::int64_t bytes);
  // Every rank's `values` side by side (rank r's at r * values.size()).
  std::vector<std::int64_t> all_gather(std::span<const std::int64_t> values);

 private:
  TensorParallelGroup(CollectivesInstance control, std::optional<CollectivesInstance> model, DeviceConfig device,
                      int rank, int size);

  CollectivesInstance control_;                // host memory: the engine's messages
  std::optional<CollectivesInstance> model_;  // the model's, when it is not control_ (declared after: freed first)
  pllm_collectives_ref control_ref_{};
  pllm_collectives_ref model_ref_{};
  DeviceConfig device_;
  int rank_ = 0;
  int size_ = 1;
};

// The work of one step every rank does alike (a ModelStep, model_runner.h: the block copies, then
// plan() and forward() of the batch), as a worker decodes it: the plan owns its arrays; view()
// points a pllm_batch at them, step() the ModelStep.
struct StepPlan {
  pllm_batch scalars{};  // the counts and sizes; its pointers are unused
  std::vector<std::int32_t> token_ids;
  std::vector<std::int32_t> positions;
  std::vector<std::int64_t> slot_mapping;
  std::vector<std::int32_t> query_start_loc;
  std::vector<std::int32_t> seq_lens;
  std::vector<std::int32_t> block_tables;
  std::vector<std::int32_t> logits_indices;
  std::vector<std::int32_t> hidden_indices;
  // In this order, before the forward (as SchedulerOutput orders them).
  std::vector<pllm_block_copy> swap_out;
  std::vector<pllm_block_copy> swap_in;
  std::vector<pllm_block_copy> copies;

  pllm_batch view() const;
  ModelStep step() const { return {view(), swap_out, swap_in, copies}; }
};

// One draft() of the EAGLE head (speculative decoding under tensor parallelism), which every rank
// runs alike after rank 0 sampled the tokens it drafts from: the draft batch (its block tables are
// the step's, its slots the draft KV layer's), and where each row's feature comes from.
struct DraftPlan {
  StepPlan batch;  // no block copies: the step's were done before its forward
  // true: row t reads row feature_rows[t] of the hidden states the rank's last forward returned;
  // false: the draft's own predicted feature at logits row feature_rows[t] of its previous draft().
  bool target_features = false;
  std::vector<std::int32_t> feature_rows;  // [batch.scalars.num_tokens]
};

// The plan's bytes; decode_step_plan(encode_step_plan(...)) gives back the same plan.
std::vector<std::byte> encode_step_plan(const ModelStep& step);
// Throws std::runtime_error naming what does not add up (a message of another build, or cut short).
StepPlan decode_step_plan(std::span<const std::byte> bytes);
std::vector<std::byte> encode_draft_plan(const pllm_batch& batch, bool target_features,
                                         std::span<const std::int32_t> feature_rows);
// Throws as decode_step_plan(), and for feature rows that are not one per token.
DraftPlan decode_draft_plan(std::span<const std::byte> bytes);

enum class GroupMessageKind : std::uint32_t {
  kStep = 1,       // a StepPlan follows
  kHeartbeat = 2,  // nothing to do; rank 0 is alive
  kStop = 3,       // the engine stopped: workers leave their loop and exit
  kDraft = 4,      // a DraftPlan follows (EAGLE's draft() after a step's forward)
};

// Rank 0's side: the messages to the workers. Called from one thread at a time (the engine's).
class TensorParallelDriver {
 public:
  static constexpr std::chrono::milliseconds kHeartbeatInterval{500};

  explicit TensorParallelDriver(TensorParallelGroup& group) : group_(group) {}

  void send_step(const ModelStep& step);
  void send_draft(const pllm_batch& batch, bool target_features, std::span<const std::int32_t> feature_rows);
  // Sends a heartbeat when nothing was sent for kHeartbeatInterval.
  void keep_alive();
  // Sends the stop once; later calls do nothing. A failure to send it is logged (the group is
  // broken then, and destroying it ends the job), not thrown: it runs on the way out.
  void stop();

 private:
  void send(GroupMessageKind kind, std::span<const std::byte> payload);

  TensorParallelGroup& group_;
  std::uint64_t sequence_ = 0;
  std::chrono::steady_clock::time_point last_sent_ = std::chrono::steady_clock::now();
  bool stopped_ = false;
};

// A worker's side: rank 0's messages in order.
struct GroupMessage {
  GroupMessageKind kind = GroupMessageKind::kStop;
  std::vector<std::byte> payload;
};
class GroupMessageReceiver {
 public:
  explicit GroupMessageReceiver(TensorParallelGroup& group) : group_(group) {}
  // Waits for the next message (at most the collectives' timeout: rank 0 sends heartbeats);
  // throws when it fails, or is not the next of this protocol.
  GroupMessage receive();

 private:
  TensorParallelGroup& group_;
  std::uint64_t sequence_ = 0;
};

// For KvCacheSizingInputs::smallest_across_ranks: every rank's count gathered, the smallest returned.
int smallest_across_ranks(TensorParallelGroup& group, int num_device_blocks);

// Every rank must have allocated the same KV pool (rank 0's scheduler hands out its block ids
// to every rank): throws ConfigError naming each rank's counts when they differ.
void require_same_kv_pool(TensorParallelGroup& group, int num_device_blocks, int num_host_blocks);

// The worker of rank > 0: loads its shard of the model and its attention backend, allocates the
// same KV pool as rank 0, then runs rank 0's steps until the stop message. Returns the exit
// code (0); throws on any failure (the caller ends the job: see end_parallel_job()).
int run_tensor_parallel_worker(const HostConfig& config, PluginRegistry& registry, TensorParallelGroup& group);

// Ends this process at once with `exit_code`, without finalising the collectives' runtime:
// a rank that fails cannot finish a collective the others wait in, and MPI_Finalize would wait
// for them. mpirun notices the exit, ends the other ranks and names this one.
[[noreturn]] void end_parallel_job(int exit_code);

}  // namespace pagedllm
