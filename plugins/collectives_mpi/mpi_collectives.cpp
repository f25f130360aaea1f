// collectives_mpi: the collectives kind (pagedllm/sdk/collectives.h) over MPI,
// for ranks that compute on the CPU. What MPI can and cannot detect, and how a
// failure ends the job: README.md.

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <string>
#include <vector>

#include "common/dtype_name.h"
#include "common/float16_rounding.h"
#include "mpi_runtime/mpi_runtime.h"
#include "pagedllm/sdk.hpp"

namespace {

using pagedllm::mpi_runtime::cat;
using pagedllm::mpi_runtime::Clock;
using pagedllm::plugins::dtype_name;

class MpiCollectives : public pllm::CollectivesPlugin {
 public:
  using Options = pagedllm::mpi_runtime::TimeoutOptions;

  MpiCollectives(const Options& options, const pllm_collectives_create_args& args)
      : timeout_(options.timeout()),
        timeout_seconds_(options.timeout_seconds) {
    if (args.device.type != PLLM_DEVICE_CPU) {
      throw pllm::Error(PLLM_ERROR_UNSUPPORTED,
                        "collectives_mpi moves host memory: it serves device 'cpu' only (collectives_nccl serves "
                        "CUDA devices)");
    }
    pagedllm::mpi_runtime::ensure_initialised("collectives_mpi");
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
    // A communicator of its own, so that nothing else in the process shares its message stream.
    MPI_Request request = MPI_REQUEST_NULL;
    check(MPI_Comm_idup(MPI_COMM_WORLD, &comm_, &request), "create (MPI_Comm_idup)");
    wait(request, "create (MPI_Comm_idup)");
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  }

  ~MpiCollectives() {
    if (comm_ == MPI_COMM_NULL) return;
    if (!failure_.empty()) {
      // A collective of ours is still pending on some rank (or a rank is gone):
      // freeing the communicator or finalising would wait for it. End the job.
      pllm::log_error("collectives_mpi rank ", rank_, ": ending the MPI job (MPI_Abort) after: ", failure_);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
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

  void all_reduce(void* buffer, int64_t count, pllm_dtype dtype, pllm_reduce_op op, void* /*stream: none on the CPU*/) {
    const std::string what = describe("all_reduce", count, dtype);
    require_usable(what);
    if (op != PLLM_REDUCE_SUM) {
      throw pllm::Error(PLLM_ERROR_UNSUPPORTED, cat(what, ": unsupported reduce op ", int(op)));
    }
    if (dtype == PLLM_DTYPE_F32) {
      all_reduce_f32(static_cast<float*>(buffer), count, what);
      return;
    }
    if (dtype != PLLM_DTYPE_F16 && dtype != PLLM_DTYPE_BF16) {
      throw pllm::Error(PLLM_ERROR_UNSUPPORTED, what + ": all_reduce sums f32, f16 or bf16");
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

  void all_gather(const void* send, void* recv, int64_t count, pllm_dtype dtype, void* /*stream*/) {
    const std::string what = describe("all_gather", count, dtype);
    require_usable(what);
    const int64_t element = pllm_dtype_size(dtype);
    if (element == 0) throw pllm::Error(PLLM_ERROR_UNSUPPORTED, what + ": unknown dtype");
    if (count > INT_MAX) {
      throw pllm::Error(PLLM_ERROR_UNSUPPORTED, cat(what, ": more than ", INT_MAX, " elements per rank"));
    }
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

  void broadcast(void* buffer, int64_t bytes, int32_t root, void* /*stream*/) {
    const std::string what = cat("broadcast #", ++sequence_, " (", bytes, " bytes from rank ", root, ")");
    require_usable(what);
    if (root < 0 || root >= world_size_) {
      throw pllm::Error(PLLM_ERROR_INVALID_ARGUMENT,
                        cat(what, ": root ", root, " is not a rank of this group of ", world_size_));
    }
    for (int64_t done = 0; done < bytes || (bytes == 0 && done == 0);) {
      const int chunk = static_cast<int>(std::min<int64_t>(bytes - done, kMaxChunk));
      MPI_Request request = MPI_REQUEST_NULL;
      check(MPI_Ibcast(static_cast<char*>(buffer) + done, chunk, MPI_BYTE, root, comm_, &request), what);
      wait(request, what);
      if (bytes == 0) break;
      done += chunk;
    }
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

  // Waits for `request`; MPI progresses it inside MPI_Test.
  void wait(MPI_Request& request, const std::string& what) {
    const bool done = pagedllm::mpi_runtime::poll_until([&] {
      int complete = 0;
      check(MPI_Test(&request, &complete, MPI_STATUS_IGNORE), what);
      return complete != 0;
    }, timeout_);
    if (!done) {
      fail(cat(what, " timed out after ", timeout_seconds_,
               " s (options.timeout_seconds): another rank did not join it — it is stopped, stuck, or making "
               "different calls"));
    }
  }

  Clock::duration timeout_;
  double timeout_seconds_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int world_size_ = 1;
  uint64_t sequence_ = 0;
  std::string failure_;
  std::vector<float> scratch_;
};

}  // namespace

PAGEDLLM_PLUGIN(MpiCollectives, "collectives_mpi", "0.1.0", "Collectives over MPI (Open MPI) for CPU ranks")
