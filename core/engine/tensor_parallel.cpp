// Tensor parallelism's group, step plan and driver (tensor_parallel.h); the worker's loop is in
// tensor_parallel_worker.cpp.

#include "core/engine/tensor_parallel.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <type_traits>

#include <fmt/format.h>

#include "core/common/logging.h"
#include "core/config/config_error.h"
#include "core/engine/plugin_args.h"

namespace pagedllm {
namespace {

// "PTP1": a message of this protocol, version 1. A rank built from other sources is refused.
constexpr std::uint32_t kMessageMagic = 0x31505450;
// What each message's first broadcast carries: its header and up to the rest of the block of
// payload (a decode step of a few dozen sequences fits, so a step costs one broadcast).
constexpr std::size_t kMessageBlockBytes = 4096;

struct MessageHeader {
  std::uint32_t magic = kMessageMagic;
  std::uint32_t kind = 0;
  std::uint64_t sequence = 0;  // 1, 2, ... on rank 0; a worker expects each in turn
  std::uint64_t payload_bytes = 0;
};
constexpr std::size_t kInlinePayloadBytes = kMessageBlockBytes - sizeof(MessageHeader);
// Far above any plan (a step of 2^20 tokens over 2^16 sequences of 2^12 blocks is about 1 GiB): a
// header claiming more is corrupt, and is refused before anything is allocated for it.
constexpr std::uint64_t kMaxPayloadBytes = std::uint64_t{4} << 30;

class ByteWriter {
 public:
  template <class T>
  void scalar(T value) {
    static_assert(std::is_trivially_copyable_v<T>);
    const auto* bytes = reinterpret_cast<const std::byte*>(&value);
    out_.insert(out_.end(), bytes, bytes + sizeof(T));
  }
  // A count, then the elements.
  template <class T>
  void array(const T* data, std::int64_t count) {
    scalar<std::int64_t>(count);
    const auto* bytes = reinterpret_cast<const std::byte*>(data);
    if (count > 0) out_.insert(out_.end(), bytes, bytes + static_cast<std::size_t>(count) * sizeof(T));
  }
  void block_copies(std::span<const pllm_block_copy> pairs) {
    scalar<std::int64_t>(static_cast<std::int64_t>(pairs.size()));
    for (const pllm_block_copy& m : pairs) {
      scalar<std::int64_t>(m.src);
      scalar<std::int64_t>(m.dst);
    }
  }
  std::vector<std::byte> take() { return std::move(out_); }

 private:
  std::vector<std::byte> out_;
};

class ByteReader {
 public:
  explicit ByteReader(std::span<const std::byte> in) : in_(in) {}

  template <class T>
  T scalar(const char* what) {
    T value{};
    take(&value, sizeof(T), what);
    return value;
  }
  // An array of exactly `expected` elements (the batch's counts say how many).
  template <class T>
  std::vector<T> array(std::int64_t expected, const char* what) {
    const auto count = scalar<std::int64_t>(what);
    if (count != expected) {
      throw std::runtime_error(fmt::format("step plan: {} has {} entries, its counts say {}", what, count, expected));
    }
    if (static_cast<std::uint64_t>(count) > (in_.size() - at_) / sizeof(T)) {
      throw std::runtime_error(fmt::format("step plan: {}: {} entries do not fit in the message", what, count));
    }
    std::vector<T> out(static_cast<std::size_t>(count));
    take(out.data(), out.size() * sizeof(T), what);
    return out;
  }
  std::vector<pllm_block_copy> block_copies(const char* what) {
    const auto count = scalar<std::int64_t>(what);
    if (count < 0 || static_cast<std::uint64_t>(count) > (in_.size() - at_) / sizeof(pllm_block_copy)) {
      throw std::runtime_error(fmt::format("step plan: {}: {} block copies do not fit in the message", what, count));
    }
    std::vector<pllm_block_copy> out(static_cast<std::size_t>(count));
    for (pllm_block_copy& copy : out) {
      copy.src = scalar<std::int64_t>(what);
      copy.dst = scalar<std::int64_t>(what);
    }
    return out;
  }
  // The next `bytes` bytes as they are.
  std::span<const std::byte> bytes(std::uint64_t bytes, const char* what) {
    if (bytes > in_.size() - at_) {
      throw std::runtime_error(fmt::format("step plan: cut short in {} ({} bytes wanted, {} left)", what, bytes,
                                           in_.size() - at_));
    }
    const std::span<const std::byte> out = in_.subspan(at_, static_cast<std::size_t>(bytes));
    at_ += static_cast<std::size_t>(bytes);
    return out;
  }
  void finish() const {
    if (at_ != in_.size()) {
      throw std::runtime_error(fmt::format("step plan: {} bytes left over after the plan", in_.size() - at_));
    }
  }

 private:
  void take(void* out, std::size_t bytes, const char* what) {
    if (bytes > in_.size() - at_) {
      throw std::runtime_error(fmt::format("step plan: cut short in {} ({} bytes wanted, {} left)", what, bytes,
                                           in_.size() - at_));
    }
    if (bytes > 0) std::memcpy(out, in_.data() + at_, bytes);
    at_ += bytes;
  }

  std::span<const std::byte> in_;
  std::size_t at_ = 0;
};

void require_non_negative(std::int64_t value, const char* what) {
  if (value < 0) throw std::runtime_error(fmt::format("step plan: {} is {}", what, value));
}

}  // namespace

// ---- the group ----

namespace {

pllm_collectives_ref make_ref(const CollectivesInstance& instance) {
  pllm_collectives_ref ref{};
  ref.struct_size = sizeof ref;
  ref.api = &instance.api();
  ref.comm = instance.get();
  return ref;
}

pllm_communicator_info group_info(const CollectivesInstance& instance) {
  pllm_communicator_info info{};
  info.struct_size = sizeof info;
  pllm_error error{};
  check_plugin_call(instance.api().get_info(instance.get(), &info, &error), error, instance.library(), "get_info");
  return info;
}

// Open MPI's rank among the ranks on this machine; the world rank where the launcher does not say.
int local_rank(int rank) {
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  return local && *local ? std::atoi(local) : rank;
}

}  // namespace

TensorParallelGroup::TensorParallelGroup(CollectivesInstance control, std::optional<CollectivesInstance> model,
                                         DeviceConfig device, int rank, int size)
    : control_(std::move(control)), model_(std::move(model)), device_(device), rank_(rank), size_(size) {
  control_ref_ = make_ref(control_);
  model_ref_ = model_ ? make_ref(*model_) : control_ref_;
}

std::unique_ptr<TensorParallelGroup> TensorParallelGroup::join(const HostConfig& config, PluginRegistry& registry) {
  if (!config.parallel || config.parallel->tensor_parallel_size <= 1) return nullptr;
  const ParallelConfig& parallel = *config.parallel;
  const std::string where = config.sources.locate("parallel.tensor_parallel_size");
  const std::string options = parallel.collectives.options.dump();
  const auto create = [&](const std::string& plugin, const DeviceConfig& device) {
    const std::shared_ptr<const PluginLibrary> library =
        registry.load(plugin, PLLM_PLUGIN_KIND_COLLECTIVES, "parallel.backend");
    const pllm_collectives_create_args args{sizeof(pllm_collectives_create_args), options.c_str(),
                                            to_plugin_device(device)};
    return create_plugin_instance<pllm_collectives_api, pllm_communicator>(library, args);
  };
  const bool on_cpu = config.device.type == DeviceType::kCpu;
  CollectivesInstance control = create(on_cpu ? parallel.collectives.plugin : "collectives_mpi", DeviceConfig{});
  const pllm_communicator_info info = group_info(control);
  if (info.world_size != parallel.tensor_parallel_size) {
    throw ConfigError(fmt::format(
        "{}: parallel.tensor_parallel_size is {} but this process runs in a group of {} (rank {}): start one process "
        "per rank, `mpirun -np {} pagedllm-host --config ...` (docs/tensor-parallel.md)",
        where, parallel.tensor_parallel_size, info.world_size, info.rank, parallel.tensor_parallel_size));
  }
  DeviceConfig device = config.device;
  std::optional<CollectivesInstance> model;
  if (!on_cpu) {
    device = parallel.devices.empty()
                 ? DeviceConfig{DeviceType::kCuda, config.device.index + local_rank(info.rank)}
                 : parallel.devices[static_cast<std::size_t>(info.rank)];
    try {
      model.emplace(create(parallel.collectives.plugin, device));
    } catch (const std::exception& e) {
      throw ConfigError(fmt::format("{}: rank {} of {} on {} (parallel.devices, or device: plus the local rank): {}",
                                    where, info.rank, info.world_size, device.str(), e.what()));
    }
  }
  return std::unique_ptr<TensorParallelGroup>(
      new TensorParallelGroup(std::move(control), std::move(model), device, info.rank, info.world_size));
}

void TensorParallelGroup::broadcast(void* data, std::int64_t bytes) {
  pllm_error error{};
  check_plugin_call(control_ref_.api->broadcast(control_ref_.comm, data, bytes, 0, nullptr, &error), error,
                    control_.library(), "broadcast");
}

std::vector<std::int64_t> TensorParallelGroup::all_gather(std::span<const std::int64_t> values) {
  std::vector<std::int64_t> all(values.size() * static_cast<std::size_t>(size_));
  pllm_error error{};
  check_plugin_call(control_ref_.api->all_gather(control_ref_.comm, values.data(), all.data(),
                                                 static_cast<std::int64_t>(values.size()), PLLM_DTYPE_I64, nullptr,
                                                 &error),
                    error, control_.library(), "all_gather");
  return all;
}

// ---- the step plan ----

pllm_batch StepPlan::view() const {
  pllm_batch batch = scalars;
  batch.struct_size = sizeof(pllm_batch);
  batch.token_ids = token_ids.data();
  batch.positions = positions.data();
  batch.slot_mapping = slot_mapping.data();
  batch.query_start_loc = query_start_loc.data();
  batch.seq_lens = seq_lens.data();
  batch.block_tables = block_tables.data();
  batch.logits_indices = logits_indices.empty() ? nullptr : logits_indices.data();
  batch.hidden_indices = hidden_indices.empty() ? nullptr : hidden_indices.data();
  return batch;
}

std::vector<std::byte> encode_step_plan(const ModelStep& step) {
  const pllm_batch& b = step.batch;
  ByteWriter out;
  for (const std::int32_t value : {b.num_seqs, b.num_tokens, b.num_decode_seqs, b.max_query_len, b.max_seq_len,
                                   b.block_size, b.max_blocks_per_seq, b.num_logits, b.num_hidden}) {
    out.scalar(value);
  }
  out.array(b.token_ids, b.num_tokens);
  out.array(b.positions, b.num_tokens);
  out.array(b.slot_mapping, b.num_tokens);
  out.array(b.query_start_loc, b.num_seqs + 1);
  out.array(b.seq_lens, b.num_seqs);
  out.array(b.block_tables, static_cast<std::int64_t>(b.num_seqs) * b.max_blocks_per_seq);
  out.array(b.logits_indices, b.num_logits);
  out.array(b.hidden_indices, b.num_hidden);
  out.block_copies(step.swap_out);
  out.block_copies(step.swap_in);
  out.block_copies(step.copies);
  return out.take();
}

StepPlan decode_step_plan(std::span<const std::byte> bytes) {
  ByteReader in(bytes);
  StepPlan plan;
  pllm_batch& b = plan.scalars;
  b.struct_size = sizeof(pllm_batch);
  for (std::int32_t* field : {&b.num_seqs, &b.num_tokens, &b.num_decode_seqs, &b.max_query_len, &b.max_seq_len,
                              &b.block_size, &b.max_blocks_per_seq, &b.num_logits, &b.num_hidden}) {
    *field = in.scalar<std::int32_t>("the batch's counts");
    require_non_negative(*field, "a batch count");
  }
  plan.token_ids = in.array<std::int32_t>(b.num_tokens, "token_ids");
  plan.positions = in.array<std::int32_t>(b.num_tokens, "positions");
  plan.slot_mapping = in.array<std::int64_t>(b.num_tokens, "slot_mapping");
  plan.query_start_loc = in.array<std::int32_t>(std::int64_t{b.num_seqs} + 1, "query_start_loc");
  plan.seq_lens = in.array<std::int32_t>(b.num_seqs, "seq_lens");
  plan.block_tables =
      in.array<std::int32_t>(static_cast<std::int64_t>(b.num_seqs) * b.max_blocks_per_seq, "block_tables");
  plan.logits_indices = in.array<std::int32_t>(b.num_logits, "logits_indices");
  plan.hidden_indices = in.array<std::int32_t>(b.num_hidden, "hidden_indices");
  plan.swap_out = in.block_copies("swap_out");
  plan.swap_in = in.block_copies("swap_in");
  plan.copies = in.block_copies("copy_blocks");
  in.finish();
  return plan;
}

std::vector<std::byte> encode_draft_plan(const pllm_batch& batch, bool target_features,
                                         std::span<const std::int32_t> feature_rows) {
  const std::vector<std::byte> step = encode_step_plan(ModelStep{batch, {}, {}, {}});
  ByteWriter out;
  out.scalar<std::int32_t>(target_features ? 1 : 0);
  out.array(feature_rows.data(), static_cast<std::int64_t>(feature_rows.size()));
  out.array(step.data(), static_cast<std::int64_t>(step.size()));
  return out.take();
}

DraftPlan decode_draft_plan(std::span<const std::byte> bytes) {
  ByteReader in(bytes);
  DraftPlan plan;
  const auto target_features = in.scalar<std::int32_t>("the draft's feature source");
  if (target_features != 0 && target_features != 1) {
    throw std::runtime_error(fmt::format("step plan: the draft's feature source is {}", target_features));
  }
  plan.target_features = target_features == 1;
  const auto rows = in.scalar<std::int64_t>("feature_rows");
  require_non_negative(rows, "the draft's feature row count");
  if (static_cast<std::uint64_t>(rows) > bytes.size() / sizeof(std::int32_t)) {
    throw std::runtime_error(fmt::format("step plan: feature_rows: {} entries do not fit in the message", rows));
  }
  plan.feature_rows.resize(static_cast<std::size_t>(rows));
  const std::span<const std::byte> row_bytes = in.bytes(static_cast<std::uint64_t>(rows) * sizeof(std::int32_t),
                                                        "feature_rows");
  if (!row_bytes.empty()) std::memcpy(plan.feature_rows.data(), row_bytes.data(), row_bytes.size());
  const auto step_bytes = in.scalar<std::int64_t>("the draft batch");
  require_non_negative(step_bytes, "the draft batch's size");
  plan.batch = decode_step_plan(in.bytes(static_cast<std::uint64_t>(step_bytes), "the draft batch"));
  in.finish();
  if (rows != plan.batch.scalars.num_tokens) {
    throw std::runtime_error(fmt::format("step plan: the draft has {} feature rows for {} tokens", rows,
                                         plan.batch.scalars.num_tokens));
  }
  if (!plan.batch.swap_out.empty() || !plan.batch.swap_in.empty() || !plan.batch.copies.empty()) {
    throw std::runtime_error("step plan: a draft batch with block copies");
  }
  return plan;
}

// ---- rank 0's messages ----

void TensorParallelDriver::send(GroupMessageKind kind, std::span<const std::byte> payload) {
  MessageHeader header;
  header.kind = static_cast<std::uint32_t>(kind);
  header.sequence = ++sequence_;
  header.payload_bytes = payload.size();
  std::vector<std::byte> block(kMessageBlockBytes);
  std::memcpy(block.data(), &header, sizeof header);
  const std::size_t inline_bytes = std::min(payload.size(), kInlinePayloadBytes);
  if (inline_bytes > 0) std::memcpy(block.data() + sizeof header, payload.data(), inline_bytes);
  group_.broadcast(block.data(), static_cast<std::int64_t>(block.size()));
  if (payload.size() > inline_bytes) {
    std::vector<std::byte> rest(payload.begin() + static_cast<std::ptrdiff_t>(inline_bytes), payload.end());
    group_.broadcast(rest.data(), static_cast<std::int64_t>(rest.size()));
  }
  last_sent_ = std::chrono::steady_clock::now();
}

void TensorParallelDriver::send_step(const ModelStep& step) {
  send(GroupMessageKind::kStep, encode_step_plan(step));
}

void TensorParallelDriver::send_draft(const pllm_batch& batch, bool target_features,
                                      std::span<const std::int32_t> feature_rows) {
  send(GroupMessageKind::kDraft, encode_draft_plan(batch, target_features, feature_rows));
}

void TensorParallelDriver::keep_alive() {
  if (stopped_ || std::chrono::steady_clock::now() - last_sent_ < kHeartbeatInterval) return;
  send(GroupMessageKind::kHeartbeat, {});
}

void TensorParallelDriver::stop() {
  if (stopped_) return;
  stopped_ = true;
  try {
    send(GroupMessageKind::kStop, {});
  } catch (const std::exception& e) {
    host_log().error("could not tell the other ranks to stop: {}", e.what());
  }
}

// ---- a worker's messages ----

GroupMessage GroupMessageReceiver::receive() {
  std::vector<std::byte> block(kMessageBlockBytes);
  group_.broadcast(block.data(), static_cast<std::int64_t>(block.size()));
  MessageHeader header;
  std::memcpy(&header, block.data(), sizeof header);
  if (header.magic != kMessageMagic) {
    throw std::runtime_error(fmt::format("rank {}: rank 0 sent a message this build does not know (magic {:#x}, "
                                         "expected {:#x}): every rank must run the same pagedllm-host",
                                         group_.rank(), header.magic, kMessageMagic));
  }
  if (header.sequence != ++sequence_) {
    throw std::runtime_error(fmt::format("rank {}: message {} from rank 0 arrived when {} was due", group_.rank(),
                                         header.sequence, sequence_));
  }
  if (header.payload_bytes > kMaxPayloadBytes) {
    throw std::runtime_error(fmt::format("rank {}: message {} from rank 0 claims {} bytes, more than a step plan "
                                         "can hold ({})",
                                         group_.rank(), header.sequence, header.payload_bytes, kMaxPayloadBytes));
  }
  const auto kind = static_cast<GroupMessageKind>(header.kind);
  if (kind != GroupMessageKind::kStep && kind != GroupMessageKind::kHeartbeat && kind != GroupMessageKind::kStop &&
      kind != GroupMessageKind::kDraft) {
    throw std::runtime_error(fmt::format("rank {}: message {} from rank 0 is of unknown kind {}", group_.rank(),
                                         header.sequence, header.kind));
  }
  GroupMessage message{kind, std::vector<std::byte>(header.payload_bytes)};
  const std::size_t inline_bytes = std::min<std::size_t>(header.payload_bytes, kInlinePayloadBytes);
  if (inline_bytes > 0) std::memcpy(message.payload.data(), block.data() + sizeof header, inline_bytes);
  if (header.payload_bytes > inline_bytes) {
    group_.broadcast(message.payload.data() + inline_bytes,
                     static_cast<std::int64_t>(header.payload_bytes - inline_bytes));
  }
  return message;
}

// ---- startup agreement ----

int smallest_across_ranks(TensorParallelGroup& group, int num_device_blocks) {
  const std::int64_t mine[] = {num_device_blocks};
  const std::vector<std::int64_t> all = group.all_gather(mine);
  return static_cast<int>(*std::min_element(all.begin(), all.end()));
}

void require_same_kv_pool(TensorParallelGroup& group, int num_device_blocks, int num_host_blocks) {
  const std::int64_t mine[] = {num_device_blocks, num_host_blocks};
  const std::vector<std::int64_t> all = group.all_gather(mine);
  bool same = true;
  std::string pools;
  for (int r = 0; r < group.size(); ++r) {
    const std::int64_t device = all[static_cast<std::size_t>(2 * r)], host = all[static_cast<std::size_t>(2 * r + 1)];
    same = same && device == all[0] && host == all[1];
    pools += fmt::format("{}rank {}: {} device + {} swap blocks", r == 0 ? "" : ", ", r, device, host);
  }
  if (!same) {
    throw ConfigError(fmt::format("cache: the ranks sized different KV pools ({}); rank 0's scheduler hands out block "
                                  "ids every rank must hold: give every rank the same cache settings and devices",
                                  pools));
  }
}

// ---- ending a job ----

void end_parallel_job(int exit_code) {
  spdlog::apply_all([](const std::shared_ptr<spdlog::logger>& l) { l->flush(); });
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(exit_code);
}

}  // namespace pagedllm
