#include "core/scheduler/scheduler.h"

#include <algorithm>
#include <stdexcept>
#include <vector>

#include <fmt/format.h>

#include "core/common/check.h"
#include "core/scheduler/step_batch_builder.h"

namespace pagedllm {

Scheduler::Scheduler(const SchedulerConfig& scheduler_config, const CacheConfig& cache_config,
                     int num_device_blocks, int num_host_blocks)
    : config_(scheduler_config), kv_(cache_config, num_device_blocks, num_host_blocks) {
  if (config_.max_num_seqs < 1 || config_.max_num_batched_tokens < 1 ||
      config_.num_lookahead_tokens < 0 || config_.num_draft_slots < 0 ||
      config_.max_num_partial_prefills < 1) {
    throw std::invalid_argument(fmt::format(
        "scheduler: max_num_seqs={}, max_num_batched_tokens={}, max_num_partial_prefills={} must "
        "be >= 1 and num_lookahead_tokens={}, num_draft_slots={} >= 0",
        config_.max_num_seqs, config_.max_num_batched_tokens, config_.max_num_partial_prefills,
        config_.num_lookahead_tokens, config_.num_draft_slots));
  }
  if (1 + config_.num_lookahead_tokens > config_.max_num_batched_tokens) {
    throw std::invalid_argument(fmt::format(
        "scheduler: max_num_batched_tokens={} cannot hold one decode with {} lookahead tokens",
        config_.max_num_batched_tokens, config_.num_lookahead_tokens));
  }
}

// ---- Requests in ------------------------------------------------------------

std::optional<std::string> Scheduler::admission_error(const Request& request,
                                                     const SchedulerConfig& config,
                                                     int block_size, int num_device_blocks) {
  const auto prompt_len = static_cast<std::int64_t>(request.prompt_token_ids.size());
  if (prompt_len == 0) return "the prompt is empty";
  if (request.max_tokens < 1) return fmt::format("max_tokens={} must be >= 1", request.max_tokens);
  if (request.n < 1 || request.n > config.max_num_seqs) {
    return fmt::format("n={} must be between 1 and max_num_seqs={}", request.n,
                       config.max_num_seqs);
  }
  const std::int64_t max_len = prompt_len + request.max_tokens;
  if (config.max_model_len > 0 && max_len > config.max_model_len) {
    return fmt::format("prompt ({} tokens) + max_tokens ({}) = {} exceeds max_model_len={}",
                       prompt_len, request.max_tokens, max_len, config.max_model_len);
  }
  // Worst case: every sequence at full length plus lookahead, no block shared
  // (after recompute preemption forks no longer share their prompt).
  const std::int64_t lookahead =
      request.speculative ? config.num_lookahead_tokens + config.num_draft_slots : 0;
  const std::int64_t blocks_per_sequence = (max_len + lookahead + block_size - 1) / block_size;
  if (blocks_per_sequence * request.n > num_device_blocks) {
    return fmt::format(
        "{} sequence(s) of up to {} tokens need {} KV blocks of {} tokens; the cache has {}",
        request.n, max_len + lookahead, blocks_per_sequence * request.n,
        block_size, num_device_blocks);
  }
  if (request.beam_search) {
    if (request.speculative) return "beam search requests do not speculate";
    // Its beams decode in one step, a token each.
    if (request.n > config.max_num_batched_tokens) {
      return fmt::format("a beam search of width {} decodes {} tokens a step, over max_num_batched_tokens={}",
                         request.n, request.n, config.max_num_batched_tokens);
    }
  }
  // Without chunking a (re)computed prompt is one batch row: after recompute
  // preemption it can be as long as prompt + max_tokens - 1 for each sequence.
  if (!config.enable_chunked_prefill &&
      (max_len - 1) * request.n > config.max_num_batched_tokens) {
    return fmt::format(
        "without chunked prefill, {} x (prompt {} + max_tokens {} - 1) tokens must fit "
        "max_num_batched_tokens={}",
        request.n, prompt_len, request.max_tokens, config.max_num_batched_tokens);
  }
  return std::nullopt;
}

void Scheduler::add_request(Request request) {
  const RequestId id = request.id;
  const auto reject = [&](const std::string& reason) {
    ++stats_.num_rejected;
    throw RequestRejected(id, reason);
  };
  if (requests_.contains(id)) reject("a request with this id is already in progress");
  if (auto error = admission_error(request, config_, kv_.block_size(), kv_.num_device_blocks())) {
    reject(*error);
  }

  SequenceGroup group;
  group.arrival = next_arrival_++;
  Sequence first;
  first.id = next_sequence_id_++;
  first.token_ids = request.prompt_token_ids;
  kv_.add_sequence(first.id, request.cache_key);
  sequence_owner_.emplace(first.id, id);
  group.sequences.push_back(std::move(first));
  group.request = std::move(request);
  requests_.emplace(id, std::move(group));
  waiting_.push_back(id);
}

bool Scheduler::abort(RequestId request) {
  const auto found = requests_.find(request);
  if (found == requests_.end()) return false;
  for (Sequence& sequence : found->second.sequences) {
    if (!sequence.finished()) finish_sequence_in(sequence, FinishReason::kAborted);
  }
  ++stats_.num_aborted;
  remove_if_finished(request, nullptr);
  return true;
}

void Scheduler::finish(RequestId request, FinishReason reason) {
  SequenceGroup& state = group(request);
  for (Sequence& sequence : state.sequences) {
    if (!sequence.finished()) finish_sequence_in(sequence, reason);
  }
  remove_if_finished(request, nullptr);
}

void Scheduler::finish_sequence(SequenceId sequence, FinishReason reason) {
  const auto owner = sequence_owner_.find(sequence);
  PAGEDLLM_CHECK(owner != sequence_owner_.end(), "unknown sequence {}", sequence);
  const RequestId request = owner->second;
  SequenceGroup& state = group(request);
  Sequence* found = state.find_sequence(sequence);
  if (!found->finished()) finish_sequence_in(*found, reason);
  remove_if_finished(request, nullptr);
}

void Scheduler::set_draft_tokens(SequenceId sequence, std::span<const std::int32_t> drafts) {
  const auto owner = sequence_owner_.find(sequence);
  PAGEDLLM_CHECK(owner != sequence_owner_.end(), "unknown sequence {}", sequence);
  SequenceGroup& state = group(owner->second);
  Sequence* found = state.find_sequence(sequence);
  PAGEDLLM_CHECK(!found->finished(), "drafts for finished sequence {}", sequence);
  PAGEDLLM_CHECK(static_cast<int>(drafts.size()) <=
                     (state.request.speculative ? config_.num_lookahead_tokens : 0),
                 "sequence {}: {} drafts with num_lookahead_tokens={} (speculative: {})", sequence,
                 drafts.size(), config_.num_lookahead_tokens, state.request.speculative);
  found->draft_token_ids.assign(drafts.begin(), drafts.end());
}

void Scheduler::finish_sequence_in(Sequence& sequence, FinishReason reason) {
  sequence.finish_reason = reason;
  sequence.draft_token_ids.clear();
  // Full blocks were cached at update(); release the rest, tail first.
  kv_.remove_sequence(sequence.id);
}

void Scheduler::remove_if_finished(RequestId request, std::vector<RequestId>* finished) {
  SequenceGroup& state = group(request);
  if (!state.all_finished()) return;
  remove_from_queue(request, state.status);
  for (const Sequence& sequence : state.sequences) sequence_owner_.erase(sequence.id);
  requests_.erase(request);
  ++stats_.num_finished;
  if (finished != nullptr) finished->push_back(request);
}

void Scheduler::remove_from_queue(RequestId request, RequestStatus status) {
  switch (status) {
    case RequestStatus::kWaiting:
      waiting_.erase(std::find(waiting_.begin(), waiting_.end(), request));
      return;
    case RequestStatus::kRunning:
      running_.erase(std::find(running_.begin(), running_.end(), request));
      return;
    case RequestStatus::kSwapped:
      swapped_.erase(std::find(swapped_.begin(), swapped_.end(), request));
      return;
  }
}

// ---- Helpers ----------------------------------------------------------------

SequenceGroup& Scheduler::group(RequestId request) {
  const auto found = requests_.find(request);
  PAGEDLLM_CHECK(found != requests_.end(), "unknown request {}", request);
  return found->second;
}

bool Scheduler::goes_before(const SequenceGroup& a, const SequenceGroup& b) const {
  switch (config_.policy) {
    case SchedulingPolicy::kFcfs:
      return a.arrival < b.arrival;
    case SchedulingPolicy::kPriority:
      if (a.request.priority != b.request.priority) return a.request.priority < b.request.priority;
      return a.arrival < b.arrival;
  }
  return false;
}

void Scheduler::insert_sorted(std::vector<RequestId>& queue, RequestId request) {
  const SequenceGroup& inserted = group(request);
  const auto position = std::upper_bound(
      queue.begin(), queue.end(), request, [&](RequestId, RequestId other) {
        return goes_before(inserted, requests_.at(other));
      });
  queue.insert(position, request);
}

int Scheduler::num_reserved_running_sequences() const {
  int reserved = 0;
  for (const RequestId request : running_) {
    reserved += requests_.at(request).num_reserved_sequences();
  }
  return reserved;
}

bool Scheduler::keeps_watermark() const {
  // The watermark protects running requests' growth; with none running it
  // would only keep a request that needs nearly the whole cache out forever.
  return !running_.empty();
}

int Scheduler::effective_long_prefill_threshold() const {
  if (!config_.enable_chunked_prefill) return 0;
  if (config_.long_prefill_token_threshold > 0) return config_.long_prefill_token_threshold;
  // vLLM's default: 4% of max_model_len, only with concurrent partial prefills.
  if (config_.max_num_partial_prefills > 1 && config_.max_model_len > 0) {
    return std::max(1, config_.max_model_len * 4 / 100);
  }
  return 0;
}

std::optional<Scheduler::Plan> Scheduler::plan_rows(SequenceGroup& group, int token_budget,
                                                    const std::vector<PrefixHit>* hits) const {
  Plan plan;
  const int threshold = effective_long_prefill_threshold();
  int budget = token_budget;
  for (std::size_t index = 0; index < group.sequences.size(); ++index) {
    const Sequence& sequence = group.sequences[index];
    if (sequence.finished()) continue;
    PlannedRow row;
    row.sequence = sequence.id;
    row.hit = hits != nullptr ? &(*hits)[index] : nullptr;
    row.first_position = row.hit != nullptr ? row.hit->num_tokens : sequence.num_computed_tokens;
    const int remaining = sequence.num_tokens() - row.first_position;
    PAGEDLLM_CHECK(remaining >= 1, "sequence {} has no token to compute", sequence.id);
    const bool has_output = sequence.num_tokens() > group.prompt_len();
    if (remaining == 1 && has_output) {
      if (budget == 0) continue;
      row.is_decode = true;
      // Verifying fewer drafts is always correct; it keeps a short budget from stalling.
      row.num_drafts = std::min(static_cast<int>(sequence.draft_token_ids.size()), budget - 1);
      row.num_tokens = 1 + row.num_drafts;
      row.num_slots = 1 + (group.request.speculative
                               ? config_.num_lookahead_tokens + config_.num_draft_slots
                               : 0);
    } else {
      int chunk = remaining;
      if (config_.enable_chunked_prefill) {
        chunk = std::min(chunk, budget);
        if (threshold > 0) chunk = std::min(chunk, threshold);
      } else if (chunk > budget) {
        // A whole prompt or nothing. At admission the request waits (FCFS);
        // a running request's other sequences may still go.
        if (hits != nullptr) return std::nullopt;
        continue;
      }
      if (chunk == 0) continue;
      row.num_tokens = chunk;
      row.num_slots = chunk;
      // The prompt's last chunk starts drafting, which writes past its end.
      if (chunk == remaining && group.request.speculative) row.num_slots += config_.num_draft_slots;
      if (chunk < remaining) plan.leaves_partial_prefill = true;
      if (threshold > 0 && remaining > threshold) plan.is_long_prefill = true;
    }
    budget -= row.num_tokens;
    plan.num_tokens += row.num_tokens;
    plan.rows.push_back(row);
  }
  if (plan.rows.empty()) return std::nullopt;
  if (group.request.beam_search) return plan_beam_rows(group, std::move(plan));
  return plan;
}

std::optional<Scheduler::Plan> Scheduler::plan_beam_rows(const SequenceGroup& group, Plan plan) const {
  const auto reaches_end = [&](const PlannedRow& row) {
    return row.first_position + row.num_tokens == group.find_sequence(row.sequence)->num_tokens();
  };
  if (plan.rows.size() == group.live_sequence_ids().size() &&
      std::all_of(plan.rows.begin(), plan.rows.end(), reaches_end)) {
    return plan;
  }
  // Without chunking a row is a whole (recomputed) beam or nothing: wait until all fit.
  if (!config_.enable_chunked_prefill) return std::nullopt;
  Plan held;
  held.is_long_prefill = plan.is_long_prefill;
  for (PlannedRow row : plan.rows) {
    if (reaches_end(row)) {
      if (row.is_decode) continue;
      --row.num_tokens;
      row.num_slots = row.num_tokens;  // beams never speculate: no lookahead or draft slots
      if (row.num_tokens == 0) continue;
    }
    held.rows.push_back(row);
    held.num_tokens += row.num_tokens;
    held.leaves_partial_prefill = true;
  }
  if (held.rows.empty()) return std::nullopt;
  return held;
}

int Scheduler::num_blocks_needed(const Plan& plan) const {
  int needed = 0;
  for (const PlannedRow& row : plan.rows) {
    needed += kv_.num_blocks_to_allocate(row.sequence, row.first_position, row.num_slots, row.hit);
  }
  return needed;
}

void Scheduler::commit(SequenceGroup& group, const Plan& plan, StepState& step,
                       SchedulerOutput& output) {
  // Take every prefix hit before allocating anything: allocation pops free
  // blocks, and a free cached block in another sequence's hit must not be popped.
  for (const PlannedRow& row : plan.rows) {
    if (row.hit != nullptr) {
      kv_.allocate_slots(row.sequence, row.first_position, 0, row.hit, output.blocks_to_copy);
    }
  }
  for (const PlannedRow& row : plan.rows) {
    Sequence* sequence = group.find_sequence(row.sequence);
    kv_.allocate_slots(row.sequence, row.first_position, row.num_slots, nullptr,
                       output.blocks_to_copy);
    sequence->num_computed_tokens = row.first_position;
    ScheduledSequence scheduled;
    scheduled.request_id = group.request.id;
    scheduled.sequence_id = row.sequence;
    scheduled.num_computed_tokens = row.first_position;
    scheduled.num_new_tokens = row.num_tokens;
    scheduled.num_draft_tokens = row.num_drafts;
    scheduled.is_decode = row.is_decode;
    const bool reaches_end = row.first_position + row.num_tokens >= sequence->num_tokens();
    if (reaches_end) {
      scheduled.num_samples = (!group.forked && !row.is_decode && !group.request.beam_search) ? group.request.n : 1;
    }
    output.sequences.push_back(scheduled);
  }
  step.token_budget -= plan.num_tokens;
  output.num_batched_tokens += plan.num_tokens;
  step.scheduled.insert(group.request.id);
}

RequestId Scheduler::pick_victim(const StepState& step) const {
  for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
    if (!step.scheduled.contains(*it)) return *it;
  }
  PAGEDLLM_CHECK(false, "no preemption victim among {} running requests", running_.size());
  return -1;
}

void Scheduler::preempt(RequestId request, SchedulerOutput& output) {
  SequenceGroup& victim = group(request);
  const std::vector<SequenceId> live = victim.live_sequence_ids();
  running_.erase(std::find(running_.begin(), running_.end(), request));
  switch (config_.preemption_mode) {
    case PreemptionMode::kSwap:
      if (kv_.can_swap_out(live)) {
        kv_.swap_out(live, output.blocks_to_swap_out);
        victim.status = RequestStatus::kSwapped;
        insert_sorted(swapped_, request);
        output.preempted_by_swap.push_back(request);
        ++stats_.num_preemptions_swap;
        return;
      }
      // The host pool is full: fall back to recompute rather than stall.
      break;
    case PreemptionMode::kRecompute:
      break;
  }
  for (const SequenceId id : live) {
    kv_.free(id);
    Sequence* sequence = victim.find_sequence(id);
    sequence->num_computed_tokens = 0;
    sequence->draft_token_ids.clear();
  }
  victim.status = RequestStatus::kWaiting;
  waiting_.push_front(request);
  output.preempted_by_recompute.push_back(request);
  ++stats_.num_preemptions_recompute;
}

// ---- One step ---------------------------------------------------------------

SchedulerOutput Scheduler::schedule() {
  SchedulerOutput output;
  StepState step;
  step.token_budget = config_.max_num_batched_tokens;
  if (config_.policy == SchedulingPolicy::kPriority) {
    std::stable_sort(waiting_.begin(), waiting_.end(), [&](RequestId a, RequestId b) {
      return goes_before(requests_.at(a), requests_.at(b));
    });
  }

  schedule_running(step, output);
  count_partial_prefills(step, output);
  const bool preempted = !output.preempted_by_recompute.empty() || !output.preempted_by_swap.empty();
  if (!preempted) schedule_swapped(step, output);
  if (!preempted && swapped_.empty()) schedule_waiting(step, output);
  build_batch(output);

  PAGEDLLM_CHECK(output.num_batched_tokens <= config_.max_num_batched_tokens,
                 "scheduled {} tokens over the budget of {}", output.num_batched_tokens,
                 config_.max_num_batched_tokens);
  PAGEDLLM_CHECK(output.batch.num_seqs() <= config_.max_num_seqs,
                 "scheduled {} sequences over max_num_seqs={}", output.batch.num_seqs(),
                 config_.max_num_seqs);
  ++stats_.num_steps;
  stats_.num_batched_tokens += output.num_batched_tokens;
  return output;
}

void Scheduler::schedule_running(StepState& step, SchedulerOutput& output) {
  std::vector<RequestId> order = running_;
  std::stable_partition(order.begin(), order.end(),
                        [&](RequestId id) { return requests_.at(id).is_decoding(); });
  for (const RequestId id : order) {
    SequenceGroup& state = group(id);
    if (state.status != RequestStatus::kRunning) continue;  // preempted earlier in this loop
    const std::optional<Plan> plan = plan_rows(state, step.token_budget, nullptr);
    if (!plan.has_value()) continue;
    bool preempted_itself = false;
    while (num_blocks_needed(*plan) > kv_.num_free_device_blocks()) {
      const RequestId victim = pick_victim(step);
      preempt(victim, output);
      if (victim == id) {
        preempted_itself = true;
        break;
      }
    }
    if (!preempted_itself) commit(state, *plan, step, output);
  }
}

void Scheduler::count_partial_prefills(StepState& step, const SchedulerOutput& output) const {
  const int threshold = effective_long_prefill_threshold();
  for (const RequestId id : running_) {
    const SequenceGroup& state = requests_.at(id);
    if (state.is_decoding()) continue;
    bool partial = false;
    bool is_long = false;
    for (const Sequence& sequence : state.sequences) {
      if (sequence.finished()) continue;
      int scheduled_tokens = 0;
      for (const ScheduledSequence& row : output.sequences) {
        if (row.sequence_id == sequence.id) scheduled_tokens = row.num_new_tokens;
      }
      const int remaining = sequence.num_uncomputed_tokens();
      if (remaining > 1 && scheduled_tokens < remaining) partial = true;
      if (threshold > 0 && remaining > threshold) is_long = true;
    }
    if (partial) ++step.num_partial_prefills;
    if (partial && is_long) ++step.num_long_prefills;
  }
}

void Scheduler::schedule_swapped(StepState& step, SchedulerOutput& output) {
  while (!swapped_.empty()) {
    const RequestId id = swapped_.front();
    SequenceGroup& state = group(id);
    if (num_reserved_running_sequences() + state.num_reserved_sequences() > config_.max_num_seqs) {
      return;
    }
    const std::optional<Plan> plan = plan_rows(state, step.token_budget, nullptr);
    if (!plan.has_value()) return;
    const std::vector<SequenceId> live = state.live_sequence_ids();
    // num_blocks_to_allocate() of a swapped sequence counts as if swapped in.
    const int needed = kv_.num_distinct_blocks(live) + num_blocks_needed(*plan);
    if (kv_.can_allocate(needed, keeps_watermark()) != AllocStatus::kOk) return;
    kv_.swap_in(live, output.blocks_to_swap_in);
    swapped_.erase(swapped_.begin());
    state.status = RequestStatus::kRunning;
    insert_sorted(running_, id);
    commit(state, *plan, step, output);
    if (plan->leaves_partial_prefill) ++step.num_partial_prefills;
    if (plan->leaves_partial_prefill && plan->is_long_prefill) ++step.num_long_prefills;
  }
}

void Scheduler::schedule_waiting(StepState& step, SchedulerOutput& output) {
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    const RequestId id = *it;
    SequenceGroup& state = group(id);
    if (step.token_budget == 0) return;
    if (num_reserved_running_sequences() + state.num_reserved_sequences() > config_.max_num_seqs) {
      return;
    }
    std::vector<PrefixHit> hits;
    for (const Sequence& sequence : state.sequences) {
      hits.push_back(sequence.finished() || state.request.prompt_logprobs
                         ? PrefixHit{}
                         : kv_.find_cached_prefix(sequence.id, sequence.token_ids));
    }
    const std::optional<Plan> plan = plan_rows(state, step.token_budget, &hits);
    if (!plan.has_value()) return;  // FCFS: nothing behind it jumps a request that does not fit
    if (config_.enable_chunked_prefill && plan->leaves_partial_prefill &&
        (step.num_partial_prefills >= config_.max_num_partial_prefills ||
         (plan->is_long_prefill && step.num_long_prefills >= 1))) {
      // Partial-prefill slots are full: let shorter prompts that finish their
      // prefill in this step go ahead (vLLM's concurrent partial prefills).
      ++it;
      continue;
    }
    if (kv_.can_allocate(num_blocks_needed(*plan), keeps_watermark()) != AllocStatus::kOk) {
      return;
    }
    it = waiting_.erase(it);
    state.status = RequestStatus::kRunning;
    insert_sorted(running_, id);
    commit(state, *plan, step, output);
    if (plan->leaves_partial_prefill) ++step.num_partial_prefills;
    if (plan->leaves_partial_prefill && plan->is_long_prefill) ++step.num_long_prefills;
  }
}

void Scheduler::build_batch(SchedulerOutput& output) {
  std::stable_partition(output.sequences.begin(), output.sequences.end(),
                        [](const ScheduledSequence& row) { return row.is_decode; });
  // A decode row's new tokens are the sequence's last token and then its drafts.
  std::vector<std::vector<std::int32_t>> row_tokens(output.sequences.size());
  std::vector<BatchRow> rows;
  rows.reserve(output.sequences.size());
  // A prompt_logprobs request's prefill row that computes positions predicting prompt tokens.
  const auto scores_prompt = [&](const ScheduledSequence& row) {
    const SequenceGroup& state = group(row.request_id);
    return !row.is_decode && state.request.prompt_logprobs && row.num_computed_tokens + 1 < state.prompt_len();
  };
  for (std::size_t r = 0; r < output.sequences.size(); ++r) {
    const ScheduledSequence& row = output.sequences[r];
    const Sequence& sequence = *group(row.request_id).find_sequence(row.sequence_id);
    for (int i = 0; i < row.num_new_tokens; ++i) {
      const int position = row.num_computed_tokens + i;
      row_tokens[r].push_back(
          position < sequence.num_tokens()
              ? sequence.token_ids[static_cast<std::size_t>(position)]
              : sequence.draft_token_ids[static_cast<std::size_t>(position - sequence.num_tokens())]);
    }
    // A speculative decode row needs the logits of every token to verify the drafts,
    // a prompt_logprobs prefill row those of every token it computes.
    const int num_logits = scores_prompt(row)     ? row.num_new_tokens
                           : row.num_samples == 0 ? 0
                           : row.is_decode        ? row.num_new_tokens
                                                  : 1;
    rows.push_back(
        {row_tokens[r], row.num_computed_tokens, kv_.block_table(row.sequence_id), num_logits, row.is_decode});
  }
  BuiltBatch built = build_step_batch(rows, kv_.block_size());
  for (std::size_t r = 0; r < output.sequences.size(); ++r) {
    ScheduledSequence& row = output.sequences[r];
    row.first_logits_index = built.first_logits_index[r];
    if (!scores_prompt(row)) continue;
    const int prompt_len = group(row.request_id).prompt_len();
    const int end = std::min(row.num_computed_tokens + row.num_new_tokens, prompt_len - 1);
    row.num_prompt_logits = std::max(0, end - row.num_computed_tokens);
    row.first_prompt_logits_index = built.first_logits_index[r];
    // The sampled position is the row's last.
    row.first_logits_index = row.num_samples > 0 ? built.first_logits_index[r] + row.num_new_tokens - 1 : -1;
  }
  output.batch = std::move(built.batch);
}

// ---- Update -----------------------------------------------------------------

UpdateResult Scheduler::update(const SchedulerOutput& output, std::span<const SequenceSample> samples,
                               std::span<const BeamStep> beams) {
  std::unordered_map<SequenceId, const SequenceSample*> sample_of;
  for (const SequenceSample& sample : samples) sample_of.emplace(sample.sequence_id, &sample);

  UpdateResult result;
  std::vector<RequestId> touched;
  for (const ScheduledSequence& row : output.sequences) {
    const auto found = requests_.find(row.request_id);
    if (found == requests_.end()) continue;  // aborted or finished since schedule()
    SequenceGroup& state = found->second;
    Sequence* sequence = state.find_sequence(row.sequence_id);
    if (sequence == nullptr || sequence->finished()) continue;
    PAGEDLLM_CHECK(state.status == RequestStatus::kRunning,
                   "update for request {} that is not running", row.request_id);
    PAGEDLLM_CHECK(sequence->num_computed_tokens == row.num_computed_tokens,
                   "sequence {}: {} computed tokens, the step started at {}", row.sequence_id,
                   sequence->num_computed_tokens, row.num_computed_tokens);
    if (state.request.beam_search) {
      // The beam's KV is computed; its next token (or its end) comes with the BeamStep.
      sequence->num_computed_tokens += row.num_new_tokens;
      kv_.commit_computed_tokens(sequence->id, sequence->token_ids, sequence->num_computed_tokens);
      continue;
    }
    const auto sample_it = sample_of.find(row.sequence_id);
    const SequenceSample* sample = sample_it == sample_of.end() ? nullptr : sample_it->second;
    PAGEDLLM_CHECK((sample != nullptr) == (row.num_samples > 0),
                   "sequence {}: num_samples {} but {} sample", row.sequence_id, row.num_samples,
                   sample != nullptr ? "a" : "no");

    const int max_outputs = state.request.max_tokens;
    const auto sequence_index = static_cast<int>(sequence - state.sequences.data());
    SequenceUpdate update{row.request_id, row.sequence_id, sequence_index, {}, std::nullopt};
    std::vector<std::int32_t> fork_tokens;
    if (row.is_decode) {
      const auto accepted = static_cast<int>(sample->token_ids.size());
      PAGEDLLM_CHECK(accepted >= 1 && accepted <= 1 + row.num_draft_tokens,
                     "sequence {}: {} accepted tokens for {} drafts", row.sequence_id, accepted,
                     row.num_draft_tokens);
      const int outputs = sequence->num_tokens() - state.prompt_len();
      const int kept = std::min(accepted, max_outputs - outputs);
      // The last token and the first kept - 1 drafts now hold accepted KV.
      sequence->num_computed_tokens += kept;
      update.new_token_ids.assign(sample->token_ids.begin(), sample->token_ids.begin() + kept);
    } else {
      sequence->num_computed_tokens += row.num_new_tokens;
      if (sample != nullptr) {
        PAGEDLLM_CHECK(static_cast<int>(sample->token_ids.size()) == row.num_samples,
                       "sequence {}: {} tokens for {} samples", row.sequence_id,
                       sample->token_ids.size(), row.num_samples);
        update.new_token_ids.push_back(sample->token_ids.front());
        fork_tokens.assign(sample->token_ids.begin() + 1, sample->token_ids.end());
      }
    }
    sequence->token_ids.insert(sequence->token_ids.end(), update.new_token_ids.begin(),
                               update.new_token_ids.end());
    kv_.commit_computed_tokens(sequence->id, sequence->token_ids, sequence->num_computed_tokens);
    if (sample != nullptr) {
      PAGEDLLM_CHECK(static_cast<int>(sample->draft_token_ids.size()) <=
                         (state.request.speculative ? config_.num_lookahead_tokens : 0),
                     "sequence {}: {} drafts with num_lookahead_tokens={} (speculative: {})",
                     row.sequence_id, sample->draft_token_ids.size(), config_.num_lookahead_tokens,
                     state.request.speculative);
      sequence->draft_token_ids = sample->draft_token_ids;
    }
    if (!row.is_decode && sample != nullptr) state.forked = true;

    std::vector<SequenceUpdate> children;
    const SequenceId parent = sequence->id;
    for (const std::int32_t token : fork_tokens) {
      Sequence child;
      child.id = next_sequence_id_++;
      child.token_ids = state.request.prompt_token_ids;
      child.token_ids.push_back(token);
      child.num_computed_tokens = state.prompt_len();
      kv_.fork(parent, child.id);
      sequence_owner_.emplace(child.id, row.request_id);
      children.push_back({row.request_id, child.id, static_cast<int>(state.sequences.size()),
                          {token}, std::nullopt});
      state.sequences.push_back(std::move(child));
    }
    result.sequences.push_back(std::move(update));
    result.sequences.insert(result.sequences.end(), children.begin(), children.end());
    touched.push_back(row.request_id);
  }

  for (const BeamStep& step : beams) {
    if (!requests_.contains(step.request_id)) continue;  // aborted since schedule()
    result.beams.push_back(apply_beam_step(step));
    touched.push_back(step.request_id);
  }

  // Length limits, after forking so children are checked too.
  for (SequenceUpdate& update : result.sequences) {
    SequenceGroup& state = group(update.request_id);
    Sequence* sequence = state.find_sequence(update.sequence_id);
    const int outputs = sequence->num_tokens() - state.prompt_len();
    const bool at_model_limit =
        config_.max_model_len > 0 && sequence->num_tokens() >= config_.max_model_len;
    if (!sequence->finished() && (outputs >= state.request.max_tokens || at_model_limit)) {
      finish_sequence_in(*sequence, FinishReason::kLength);
      update.finish_reason = FinishReason::kLength;
    }
  }
  std::sort(touched.begin(), touched.end());
  touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
  for (const RequestId request : touched) remove_if_finished(request, &result.finished_requests);
  return result;
}

BeamUpdate Scheduler::apply_beam_step(const BeamStep& step) {
  SequenceGroup& state = group(step.request_id);
  PAGEDLLM_CHECK(state.request.beam_search && state.status == RequestStatus::kRunning,
                 "beam step for request {}, which is not a running beam search", step.request_id);
  PAGEDLLM_CHECK(static_cast<int>(step.continuations.size()) <= state.request.n,
                 "request {}: {} beams for a beam width of {}", step.request_id, step.continuations.size(),
                 state.request.n);
  for (const Sequence& beam : state.sequences) {
    PAGEDLLM_CHECK(beam.finished() || beam.num_uncomputed_tokens() == 0,
                   "beam {} of request {} was not sampled this step", beam.id, step.request_id);
  }
  BeamUpdate update{step.request_id, {}};
  std::vector<SequenceId> extended;
  for (const BeamContinuation& next : step.continuations) {
    const Sequence* parent = state.find_sequence(next.parent);
    PAGEDLLM_CHECK(parent != nullptr && !parent->finished(), "request {}: beam {} is not live", step.request_id,
                   next.parent);
    SequenceId id = next.parent;
    if (std::find(extended.begin(), extended.end(), next.parent) == extended.end()) {
      extended.push_back(next.parent);
    } else {
      // The parent's computed tokens (it may already carry its own next token); the KV shared copy-on-write.
      Sequence child;
      child.id = id = next_sequence_id_++;
      child.token_ids.assign(parent->token_ids.begin(), parent->token_ids.begin() + parent->num_computed_tokens);
      child.num_computed_tokens = parent->num_computed_tokens;
      kv_.fork(next.parent, child.id);
      sequence_owner_.emplace(child.id, step.request_id);
      state.sequences.push_back(std::move(child));  // invalidates `parent`
    }
    state.find_sequence(id)->token_ids.push_back(next.token);
    update.sequences.push_back(id);
  }
  // Beams not continued leave the group now, with their blocks.
  std::erase_if(state.sequences, [&](Sequence& beam) {
    if (beam.finished() || std::find(update.sequences.begin(), update.sequences.end(), beam.id) !=
                               update.sequences.end()) {
      return false;
    }
    kv_.remove_sequence(beam.id);
    sequence_owner_.erase(beam.id);
    return true;
  });
  // No beam left (the search is over): update()'s remove_if_finished() ends the request.
  return update;
}

// ---- Introspection ------------------------------------------------------------

SchedulerStats Scheduler::stats() const {
  SchedulerStats stats = stats_;
  stats.num_waiting = static_cast<int>(waiting_.size());
  stats.num_running = static_cast<int>(running_.size());
  stats.num_swapped = static_cast<int>(swapped_.size());
  stats.kv = kv_.stats();
  return stats;
}

std::optional<RequestStatus> Scheduler::status(RequestId request) const {
  const auto found = requests_.find(request);
  if (found == requests_.end()) return std::nullopt;
  return found->second.status;
}

const SequenceGroup* Scheduler::request_state(RequestId request) const {
  const auto found = requests_.find(request);
  return found == requests_.end() ? nullptr : &found->second;
}

void Scheduler::check_invariants() const {
  kv_.check_invariants();
  PAGEDLLM_CHECK(waiting_.size() + running_.size() + swapped_.size() == requests_.size(),
                 "{} waiting + {} running + {} swapped != {} requests", waiting_.size(),
                 running_.size(), swapped_.size(), requests_.size());
  const auto check_queue = [&](const auto& queue, RequestStatus status, const char* name) {
    for (const RequestId id : queue) {
      const auto found = requests_.find(id);
      PAGEDLLM_CHECK(found != requests_.end(), "{} holds unknown request {}", name, id);
      PAGEDLLM_CHECK(found->second.status == status, "request {} in {} has another status", id,
                     name);
    }
  };
  check_queue(waiting_, RequestStatus::kWaiting, "waiting");
  check_queue(running_, RequestStatus::kRunning, "running");
  check_queue(swapped_, RequestStatus::kSwapped, "swapped");
  PAGEDLLM_CHECK(num_reserved_running_sequences() <= config_.max_num_seqs,
                 "{} running sequences reserved over max_num_seqs={}",
                 num_reserved_running_sequences(), config_.max_num_seqs);

  for (const auto& [id, state] : requests_) {
    PAGEDLLM_CHECK(!state.all_finished(), "finished request {} is still held", id);
    for (const Sequence& sequence : state.sequences) {
      if (sequence.finished()) {
        PAGEDLLM_CHECK(!kv_.has_sequence(sequence.id), "finished sequence {} still has blocks",
                       sequence.id);
        continue;
      }
      const auto table = kv_.block_table(sequence.id);
      PAGEDLLM_CHECK(sequence.num_computed_tokens < sequence.num_tokens(),
                     "sequence {}: {} computed of {} tokens", sequence.id,
                     sequence.num_computed_tokens, sequence.num_tokens());
      switch (state.status) {
        case RequestStatus::kWaiting:
          PAGEDLLM_CHECK(table.empty() && sequence.num_computed_tokens == 0,
                         "waiting sequence {} holds {} blocks, {} computed", sequence.id,
                         table.size(), sequence.num_computed_tokens);
          break;
        case RequestStatus::kRunning:
        case RequestStatus::kSwapped:
          PAGEDLLM_CHECK(kv_.is_swapped(sequence.id) == (state.status == RequestStatus::kSwapped),
                         "sequence {} pool does not match its request's status", sequence.id);
          PAGEDLLM_CHECK(static_cast<int>(table.size()) >=
                             kv_.blocks_for_tokens(sequence.num_computed_tokens),
                         "sequence {}: {} blocks for {} computed tokens", sequence.id,
                         table.size(), sequence.num_computed_tokens);
          break;
      }
    }
  }
}

}  // namespace pagedllm
