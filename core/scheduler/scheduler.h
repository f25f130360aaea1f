#pragma once
// Continuous batching over a paged KV cache.
//
// Each step, in this order, under a token budget (max_num_batched_tokens) and a
// sequence cap (max_num_seqs):
//   1. running requests: decodes first, then unfinished (chunked) prefills;
//      when blocks run out, the lowest-priority / latest running request not
//      yet scheduled this step is preempted (recompute or swap);
//   2. swapped requests, swapped back in (only in steps without preemption);
//   3. waiting requests (only when nothing is swapped out and nothing was
//      preempted this step), admitted while blocks above the watermark last.
// FCFS orders by arrival; the priority policy by (priority, arrival).
// docs/kv-cache-and-scheduler.md is the full contract.
//
// The engine loop: add_request/abort → schedule() → forward + sample →
// update(output, samples) → finish() for EOS / stop strings.

#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/config/engine_config.h"
#include "core/kv/kv_cache_manager.h"
#include "core/scheduler/request.h"
#include "core/scheduler/scheduler_output.h"
#include "core/scheduler/scheduler_stats.h"
#include "core/scheduler/sequence_group.h"

namespace pagedllm {

class Scheduler {
 public:
  // Throws std::invalid_argument when the configuration cannot schedule anything
  // (for example a token budget smaller than one speculative decode).
  Scheduler(const SchedulerConfig& scheduler_config, const CacheConfig& cache_config,
            int num_device_blocks, int num_host_blocks);

  // ---- Requests in ----------------------------------------------------------
  // Queues a request, or throws RequestRejected if it could never be served
  // (empty prompt, n or lengths beyond what the config or the KV cache can
  // ever hold). Never queues a request that cannot finish.
  void add_request(Request request);
  // Why add_request() would refuse `request` under this configuration, or
  // nullopt. Depends only on its arguments, so a client thread can check a
  // request before queueing it for the scheduler's thread.
  static std::optional<std::string> admission_error(const Request& request,
                                                    const SchedulerConfig& config, int block_size,
                                                    int num_device_blocks);
  // Ends a request in any state, releasing its blocks now. False if unknown.
  bool abort(RequestId request);
  // Ends every live sequence of a request (engine-detected stop).
  void finish(RequestId request, FinishReason reason);
  // Ends one sequence (one of n); the request ends with its last sequence.
  void finish_sequence(SequenceId sequence, FinishReason reason);

  // ---- One step ---------------------------------------------------------
  SchedulerOutput schedule();
  // Applies the step's results: advances computed tokens, appends sampled /
  // accepted tokens, forks n > 1 requests at their first sample, rolls back
  // rejected lookahead slots, caches newly full blocks and finishes sequences
  // that reached max_tokens or max_model_len. `samples` has one entry per row
  // with num_samples > 0, except beam-search rows; rows of requests aborted
  // since schedule() are skipped. `beams` has one BeamStep per beam-search request
  // whose live beams were all sampled this step (the engine owns the search and
  // its length limit); they are applied after the rows.
  UpdateResult update(const SchedulerOutput& output, std::span<const SequenceSample> samples,
                      std::span<const BeamStep> beams = {});
  // Gives a live sequence the drafts to verify at its next decode, when they
  // are proposed after update() (the speculator drafts from the step's
  // accepted tokens). At most num_lookahead_tokens, for speculative requests only.
  void set_draft_tokens(SequenceId sequence, std::span<const std::int32_t> drafts);

  // ---- Introspection ------------------------------------------------------
  bool has_unfinished() const { return !requests_.empty(); }
  // Requests added and not yet finished (waiting, running or swapped).
  std::size_t num_unfinished() const { return requests_.size(); }
  SchedulerStats stats() const;
  const KvCacheManager& kv_cache() const { return kv_; }
  std::optional<RequestStatus> status(RequestId request) const;
  // The request's sequences (ids, tokens, progress); nullptr if unknown.
  const SequenceGroup* request_state(RequestId request) const;
  // Throws InternalError unless the queues, the sequences and the KV cache agree.
  void check_invariants() const;

 private:
  struct PlannedRow {
    SequenceId sequence = -1;
    int first_position = 0;  // num_computed_tokens after any prefix hit
    int num_tokens = 0;
    int num_slots = 0;
    int num_drafts = 0;
    bool is_decode = false;
    const PrefixHit* hit = nullptr;
  };
  struct Plan {
    std::vector<PlannedRow> rows;
    int num_tokens = 0;
    bool leaves_partial_prefill = false;
    bool is_long_prefill = false;
  };
  struct StepState {
    int token_budget = 0;
    int num_partial_prefills = 0;
    int num_long_prefills = 0;
    std::unordered_set<RequestId> scheduled;
  };

  SequenceGroup& group(RequestId request);
  bool goes_before(const SequenceGroup& a, const SequenceGroup& b) const;
  void insert_sorted(std::vector<RequestId>& queue, RequestId request);
  int num_reserved_running_sequences() const;
  bool keeps_watermark() const;
  int effective_long_prefill_threshold() const;

  // Rows for a request under the remaining budget, or nullopt when none fits.
  // Sequences are rows of their own: those that do not fit wait for a later
  // step. `hits` (admission only) holds one hit per sequence.
  std::optional<Plan> plan_rows(SequenceGroup& group, int token_budget,
                                const std::vector<PrefixHit>* hits) const;
  // A beam group runs all its live beams in a step or none: unless every live
  // beam's row reaches its end (and samples), rows that would reach it are held
  // back by a token (decode rows wait), so the beams become ready together.
  std::optional<Plan> plan_beam_rows(const SequenceGroup& group, Plan plan) const;
  int num_blocks_needed(const Plan& plan) const;
  void commit(SequenceGroup& group, const Plan& plan, StepState& step, SchedulerOutput& output);
  RequestId pick_victim(const StepState& step) const;
  void preempt(RequestId request, SchedulerOutput& output);
  void count_partial_prefills(StepState& step, const SchedulerOutput& output) const;

  void schedule_running(StepState& step, SchedulerOutput& output);
  void schedule_swapped(StepState& step, SchedulerOutput& output);
  void schedule_waiting(StepState& step, SchedulerOutput& output);
  void build_batch(SchedulerOutput& output);

  void finish_sequence_in(Sequence& sequence, FinishReason reason);
  // Forks, extends and drops the request's beams as `step` says.
  BeamUpdate apply_beam_step(const BeamStep& step);
  void remove_if_finished(RequestId request, std::vector<RequestId>* finished);
  void remove_from_queue(RequestId request, RequestStatus status);

  SchedulerConfig config_;
  KvCacheManager kv_;
  std::unordered_map<RequestId, SequenceGroup> requests_;
  std::unordered_map<SequenceId, RequestId> sequence_owner_;
  // Waiting in service order: FCFS keeps arrival order with recompute-preempted
  // requests pushed to the front; the priority policy re-sorts each step.
  std::deque<RequestId> waiting_;
  // Sorted by (priority, arrival): the back is the next preemption victim.
  std::vector<RequestId> running_;
  std::vector<RequestId> swapped_;
  std::uint64_t next_arrival_ = 0;
  SequenceId next_sequence_id_ = 0;
  SchedulerStats stats_;
};

}  // namespace pagedllm
