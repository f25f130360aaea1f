// collectives_mpi: the collectives kind (pagedllm/sdk/collectives.h) over MPI,
// for ranks that compute on the CPU, and for CUDA ranks through pinned host
// memory (device_staging.h). What MPI can and cannot detect, and how a failure
// ends the job: README.md.

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <vector>

#include "common/dtype_name.h"
#include "common/float16_rounding.h"
#include "mpi_runtime/mpi_runtime.h"
#include "pagedllm/sdk.hpp"
#ifdef PAGEDLLM_HAVE_CUDA
#include "device_staging.h"
#endif

namespace {

using pagedllm::mpi_runtime::cat;
using pagedllm::mpi_runtime::Clock;
using pagedllm::plugins::dtype_name;
#ifdef PAGEDLLM_HAVE_CUDA
using pagedllm::collectives_mpi::DeviceStaging;
#endif

std::string one_decimal(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f", value);
  return text;
}

class MpiCollectives : public pllm::CollectivesPlugin {
 public:
  using Options = pagedllm::mpi_runtime::TimeoutOptions;

  MpiCollectives(const Options& options, const pllm_collectives_create_args& args)
      : timeout_(options.timeout()),
        timeout_seconds_(options.timeout_seconds) {
    if (args.device.type == PLLM_DEVICE_CUDA) {
#ifdef PAGEDLLM_HAVE_CUDA
      staging_.emplace(args.device.index);
#else
      throw pllm::Error(PLLM_ERROR_UNSUPPORTED, "collectives_mpi: cuda:" + std::to_string(args.device.index) +
                                                    " asked for, but this build has no CUDA: it serves device 'cpu'");
#endif
    } else if (args.device.type != PLLM_DEVICE_CPU) {
      throw pllm::Error(PLLM_ERROR_UNSUPPORTED,
                        cat("collectives_mpi serves device 'cpu' and CUDA devices (device type ", int(args.device.type),
                            ")"));
    }
    pagedllm::mpi_runtime::ensure_initialised("collectives_mpi");
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
    // A communicator of its own, so that nothing else in the process shares its message stream.
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Comm_idup(MPI_COMM_WORLD, &comm_, &request), "create (MPI_Comm_idup)");
    wait(request, "create (MPI_Comm_idup)");
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    // And one for the presence reports (below), so that they never meet a collective's messages.
    // (A handle MPI_Comm_idup returns is valid once the request completes: wait() must not use it before.)
    MPI_Comm presence = MPI_COMM_NULL;
    check(MPI_Comm_idup(MPI_COMM_WORLD, &presence, &request), "create (MPI_Comm_idup)");
    wait(request, "create (MPI_Comm_idup)");
    MPI_Comm_set_errhandler(presence, MPI_ERRORS_RETURN);
    presence_comm_ = presence;
    const auto now = Clock::now();
    last_call_.assign(static_cast<std::size_t>(world_size_), 0);
    last_heard_.assign(static_cast<std::size_t>(world_size_), now);
  }

  ~MpiCollectives() {
    if (comm_ == MPI_COMM_NULL) return;
    if (!failure_.empty()) {
      // A collective of ours is still pending on some rank (or a rank is gone):
      // freeing the communicator or finalising would wait for it. End the job.
      pllm::log_error("collectives_mpi rank ", rank_, ": ending the MPI job (MPI_Abort) after: ", failure_);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    // Reports sent are eager (16 bytes): complete locally, whether or not rank 0 still reads them.
    for (Report& report : reports_) MPI_Wait(&report.request, MPI_STATUS_IGNORE);
    if (rank_ == 0) hear();
    MPI_Comm_free(&presence_comm_);
    MPI_Comm_free(&comm_);
  }

  MpiCollectives(const MpiCollectives&) = delete;
  MpiCollectives& operator=(const MpiCollectives&) = delete;

  pllm_communicator_info info() const {
    pllm_communicator_info out{};
    out.struct_size = sizeof out;
    out.rank = rank_;
    out.world_size = world_size_;
    return out;
  }

  void all_reduce(void* buffer, int64_t count, pllm_dtype dtype, pllm_reduce_op op, void* stream) {
    const std::string what = describe("all_reduce", count, dtype);
    require_usable(what);
    if (op != PLLM_REDUCE_SUM) {
      throw pllm::Error(PLLM_ERROR_UNSUPPORTED, cat(what, ": unsupported reduce op ", int(op)));
    }
    if (dtype != PLLM_DTYPE_F32 && dtype != PLLM_DTYPE_F16 && dtype != PLLM_DTYPE_BF16) {
      throw pllm::Error(PLLM_ERROR_UNSUPPORTED, what + ": all_reduce sums f32, f16 or bf16");
    }
#ifdef PAGEDLLM_HAVE_CUDA
    if (staging_) {
      const std::size_t bytes = std::size_t(count * pllm_dtype_size(dtype));
      void* host = staging_->to_host(buffer, bytes, stream, what);
      all_reduce_host(host, count, dtype, what);
      staging_->to_device(buffer, host, bytes, stream, what);
      return;
    }
#endif
    (void)stream;  // none on the CPU
    all_reduce_host(buffer, count, dtype, what);
  }

  void all_gather(const void* send, void* recv, int64_t count, pllm_dtype dtype, void* stream) {
    const std::string what = describe("all_gather", count, dtype);
    require_usable(what);
    const int64_t element = pllm_dtype_size(dtype);
    if (element == 0) throw pllm::Error(PLLM_ERROR_UNSUPPORTED, what + ": unknown dtype");
    if (count > INT_MAX) {
      throw pllm::Error(PLLM_ERROR_UNSUPPORTED, cat(what, ": more than ", INT_MAX, " elements per rank"));
    }
#ifdef PAGEDLLM_HAVE_CUDA
    if (staging_) {
      // This rank's part staged into its slot of the host copy of recv, gathered in place there.
      const std::size_t part = std::size_t(count * element);
      auto* host = static_cast<char*>(staging_->host(part * std::size_t(world_size_), what));
      staging_->copy_to_host(host + std::size_t(rank_) * part, send, part, stream, what);
      all_gather_host(host + std::size_t(rank_) * part, host, count, element, what);
      staging_->to_device(recv, host, part * std::size_t(world_size_), stream, what);
      return;
    }
#endif
    (void)stream;
    all_gather_host(send, recv, count, element, what);
  }

  void broadcast(void* buffer, int64_t bytes, int32_t root, void* stream) {
    const std::string what = cat("broadcast #", ++sequence_, " (", bytes, " bytes from rank ", root, ")");
    require_usable(what);
    if (root < 0 || root >= world_size_) {
      throw pllm::Error(PLLM_ERROR_INVALID_ARGUMENT,
                        cat(what, ": root ", root, " is not a rank of this group of ", world_size_));
    }
#ifdef PAGEDLLM_HAVE_CUDA
    if (staging_) {
      const auto size = std::size_t(bytes);
      void* host = rank_ == root ? staging_->to_host(buffer, size, stream, what) : staging_->host(size, what);
      broadcast_host(host, bytes, root, what);
      if (rank_ != root) staging_->to_device(buffer, host, size, stream, what);
      return;
    }
#endif
    (void)stream;
    broadcast_host(buffer, bytes, root, what);
  }

  void barrier() {
    const std::string what = cat("barrier #", ++sequence_);
    require_usable(what);
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Ibarrier(comm_, &request), what);
    wait(request, what);
  }

  static void plugin_shutdown() { pagedllm::mpi_runtime::finalise(); }

 private:
  static constexpr int64_t kMaxChunk = int64_t(1) << 30;

  std::string describe(const char* operation, int64_t count, pllm_dtype dtype) {
    return cat(operation, " #", ++sequence_, " (", count, " ", dtype_name(dtype), ")");
  }

  // ---- the collectives on host memory ----

  void all_reduce_host(void* buffer, int64_t count, pllm_dtype dtype, const std::string& what) {
    if (dtype == PLLM_DTYPE_F32) {
      all_reduce_f32(static_cast<float*>(buffer), count, what);
      return;
    }
    // MPI has no 16-bit float type: sum in f32 and round once, the same on every rank.
    auto* bits = static_cast<std::uint16_t*>(buffer);
    scratch_.resize(static_cast<std::size_t>(count));
    pllm::to_f32(buffer, dtype, scratch_.data(), count);
    all_reduce_f32(scratch_.data(), count, what);
    for (int64_t i = 0; i < count; ++i) {
      bits[i] = dtype == PLLM_DTYPE_F16 ? pagedllm::plugins::f32_to_f16(scratch_[i])
                                        : pagedllm::plugins::f32_to_bf16(scratch_[i]);
    }
  }

  // `send` may be recv's slot of this rank (in place).
  void all_gather_host(const void* send, void* recv, int64_t count, int64_t element, const std::string& what) {
    MPI_Datatype type = MPI_DATATYPE_NULL;
    check(MPI_Type_contiguous(static_cast<int>(element), MPI_BYTE, &type), what);
    MPI_Type_commit(&type);
    const auto* in_place = static_cast<const char*>(recv) + rank_ * count * element;
    const void* source = send == in_place ? MPI_IN_PLACE : send;
    MPI_Request request = MPI_REQUEST_NULL;
    const int rc = MPI_Iallgather(source, static_cast<int>(count), type, recv, static_cast<int>(count), type, comm_,
                                  &request);
    MPI_Type_free(&type);
    check(rc, what);
    wait(request, what);
  }

  void broadcast_host(void* buffer, int64_t bytes, int32_t root, const std::string& what) {
    for (int64_t done = 0; done < bytes || (bytes == 0 && done == 0);) {
      const int chunk = static_cast<int>(std::min<int64_t>(bytes - done, kMaxChunk));
      MPI_Request request = MPI_REQUEST_NULL;
      check(MPI_Ibcast(static_cast<char*>(buffer) + done, chunk, MPI_BYTE, root, comm_, &request), what);
      wait(request, what);
      if (bytes == 0) break;
      done += chunk;
    }
  }

  void all_reduce_f32(float* data, int64_t count, const std::string& what) {
    for (int64_t done = 0; done < count; done += kMaxChunk) {
      const int chunk = static_cast<int>(std::min<int64_t>(count - done, kMaxChunk));
      MPI_Request request = MPI_REQUEST_NULL;
      check(MPI_Iallreduce(MPI_IN_PLACE, data + done, chunk, MPI_FLOAT, MPI_SUM, comm_, &request), what);
      wait(request, what);
    }
  }

  void require_usable(const std::string& what) const {
    if (!failure_.empty()) {
      throw pllm::Error(PLLM_ERROR_COMMUNICATION,
                        cat("collectives_mpi rank ", rank_, " of ", world_size_, ": ", what,
                            ": the communicator is broken since ", failure_));
    }
  }

  [[noreturn]] void fail(const std::string& message) {
    failure_ = message;
    throw pllm::Error(PLLM_ERROR_COMMUNICATION,
                      cat("collectives_mpi rank ", rank_, " of ", world_size_, ": ", message));
  }

  void check(int rc, const std::string& what) {
    if (rc != MPI_SUCCESS) fail(cat(what, " failed: ", pagedllm::mpi_runtime::error_text(rc)));
  }

  // Waits for `request`; MPI progresses it inside MPI_Test. Meanwhile a rank > 0 reports to rank 0
  // that it is in this call, on entering and every kPresenceInterval; rank 0 reads the reports.
  void wait(MPI_Request& request, const std::string& what) {
    // (Not while the communicators themselves are being made.)
    const bool presence = presence_comm_ != MPI_COMM_NULL && world_size_ > 1;
    auto reported = Clock::now();
    if (presence && rank_ != 0) report();
    // Rank 0 reads the reports at every call too, not only while one waits: none pile up unread.
    if (presence && rank_ == 0) hear();
    const bool done = pagedllm::mpi_runtime::poll_until([&] {
      int complete = 0;
      check(MPI_Test(&request, &complete, MPI_STATUS_IGNORE), what);
      if (complete != 0) return true;
      if (!presence) return false;
      if (rank_ == 0) {
        hear();
      } else if (Clock::now() - reported >= kPresenceInterval) {
        report();
        reported = Clock::now();
      }
      return false;
    }, timeout_);
    if (!done) {
      const std::string cause = rank_ == 0 && presence ? missing_ranks()
                                                       : "another rank did not join it — it is stopped, stuck, or "
                                                         "making different calls (rank 0's error names the ranks it "
                                                         "waits for)";
      fail(cat(what, " timed out after ", timeout_seconds_, " s (options.timeout_seconds): ", cause));
    }
  }

  // ---- presence: which rank a timed-out call waits for ----
  // Every rank > 0 sends rank 0 the sequence number of the call it is in (point to point, on its own
  // communicator), so that rank 0, when a call times out, can name the ranks that never joined it and
  // those that joined but fell silent inside it (a stopped process reports nothing).

  static constexpr auto kPresenceInterval = std::chrono::milliseconds(200);
  static constexpr int kPresenceTag = 1;

  struct Report {
    uint64_t sequence = 0;
    MPI_Request request = MPI_REQUEST_NULL;
  };

  void report() {
    while (!reports_.empty()) {  // the completed ones (all, in practice: eager sends)
      int complete = 0;
      MPI_Test(&reports_.front().request, &complete, MPI_STATUS_IGNORE);
      if (complete == 0) break;
      reports_.pop_front();
    }
    Report& report = reports_.emplace_back();
    report.sequence = sequence_;
    // A failure to report is not the call's failure: rank 0 then just knows less.
    if (MPI_Isend(&report.sequence, 1, MPI_UINT64_T, 0, kPresenceTag, presence_comm_, &report.request) !=
        MPI_SUCCESS) {
      reports_.pop_back();
    }
  }

  // Rank 0: reads every report that arrived.
  void hear() {
    for (;;) {
      int arrived = 0;
      MPI_Status status{};
      if (MPI_Iprobe(MPI_ANY_SOURCE, kPresenceTag, presence_comm_, &arrived, &status) != MPI_SUCCESS || !arrived) {
        return;
      }
      uint64_t sequence = 0;
      if (MPI_Recv(&sequence, 1, MPI_UINT64_T, status.MPI_SOURCE, kPresenceTag, presence_comm_, MPI_STATUS_IGNORE) !=
          MPI_SUCCESS) {
        return;
      }
      const auto r = static_cast<std::size_t>(status.MPI_SOURCE);
      last_call_[r] = std::max(last_call_[r], sequence);
      last_heard_[r] = Clock::now();
    }
  }

  // Rank 0, after its call #sequence_ timed out: the ranks it waits for, from their reports.
  std::string missing_ranks() {
    hear();
    const auto now = Clock::now();
    const auto seconds = [&](int r) {
      return std::chrono::duration<double>(now - last_heard_[static_cast<std::size_t>(r)]).count();
    };
    std::string absent, silent;
    for (int r = 1; r < world_size_; ++r) {
      const uint64_t call = last_call_[static_cast<std::size_t>(r)];
      if (call < sequence_) {
        absent += cat(absent.empty() ? "" : ", ", "rank ", r, " (",
                      call == 0 ? std::string("no call yet")
                                : cat("last in call #", call, ", heard from ", one_decimal(seconds(r)), " s ago"),
                      ")");
      } else if (now - last_heard_[static_cast<std::size_t>(r)] > 2 * kPresenceInterval) {
        silent += cat(silent.empty() ? "" : ", ", "rank ", r, " (silent for ", one_decimal(seconds(r)),
                      " s)");
      }
    }
    if (!absent.empty()) {
      return cat("waiting for ", absent, ", which did not join it — stopped, stuck, or making different calls");
    }
    if (!silent.empty()) {
      return cat("waiting for ", silent, ", which joined it but stopped reporting — stopped or stuck inside it");
    }
    return "every rank joined it and still reports: the transport did not complete it";
  }

  Clock::duration timeout_;
  double timeout_seconds_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Comm presence_comm_ = MPI_COMM_NULL;
  std::deque<Report> reports_;  // a rank > 0's sends to rank 0, their buffers kept until complete
  // Rank 0: each rank's latest call and when it last reported (rank 0's own entries unused).
  std::vector<uint64_t> last_call_;
  std::vector<Clock::time_point> last_heard_;
  int rank_ = 0;
  int world_size_ = 1;
  uint64_t sequence_ = 0;
  std::string failure_;
  std::vector<float> scratch_;
#ifdef PAGEDLLM_HAVE_CUDA
  std::optional<DeviceStaging> staging_;  // on a CUDA device: where its buffers pass through host memory
#endif
};

}  // namespace

PAGEDLLM_PLUGIN(MpiCollectives, "collectives_mpi", "0.1.0", "Collectives over MPI (Open MPI) for CPU ranks")
