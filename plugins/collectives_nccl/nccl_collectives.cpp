// collectives_nccl: the collectives kind (pagedllm/sdk/collectives.h) over
// NCCL, for ranks that compute on CUDA devices. Ranks are MPI's (mpirun
// launches them): rank 0 makes the NCCL unique id and broadcasts it over MPI,
// the bootstrap NCCL leaves to its user. Every NCCL call is non-blocking
// (ncclConfig_t.blocking = 0), so a rank that never joins is met by the
// timeout and ncclCommAbort instead of a hang. README.md says what is and is
// not detected; this plugin has not yet run on a GPU.

#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>

#include <chrono>
#include <cstdint>
#include <string>

#include "mpi_runtime/mpi_runtime.h"
#include "pagedllm/sdk.hpp"

namespace {

using pagedllm::mpi_runtime::cat;
using pagedllm::mpi_runtime::Clock;

class NcclCollectives : public pllm::CollectivesPlugin {
 public:
  using Options = pagedllm::mpi_runtime::TimeoutOptions;

  NcclCollectives(const Options& options, const pllm_collectives_create_args& args)
      : timeout_(options.timeout()),
        timeout_seconds_(options.timeout_seconds),
        device_(args.device.index) {
    if (args.device.type != PLLM_DEVICE_CUDA) {
      throw pllm::Error(PLLM_ERROR_UNSUPPORTED,
                        "collectives_nccl moves CUDA device memory: it serves cuda:N devices only "
                        "(collectives_mpi serves the CPU)");
    }
    check_cuda(cudaSetDevice(device_), "create (cudaSetDevice)");
    pagedllm::mpi_runtime::ensure_initialised("collectives_nccl");
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &world_size_);

    // The bootstrap: rank 0's unique id to every rank, over MPI, with the timeout.
    ncclUniqueId id{};
    if (rank_ == 0) check_nccl(ncclGetUniqueId(&id), "create (ncclGetUniqueId)");
    MPI_Request request = MPI_REQUEST_NULL;
    int rc = MPI_Ibcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD, &request);
    bool done = rc == MPI_SUCCESS && pagedllm::mpi_runtime::poll_until([&] {
      int complete = 0;
      rc = MPI_Test(&request, &complete, MPI_STATUS_IGNORE);
      return rc != MPI_SUCCESS || complete != 0;
    }, timeout_);
    if (rc != MPI_SUCCESS) fail(cat("create: broadcasting the NCCL id over MPI failed: ",
                                    pagedllm::mpi_runtime::error_text(rc)));
    if (!done) fail(cat("create: the NCCL id broadcast over MPI timed out after ", timeout_seconds_, " s"));

    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    check_nccl(ncclCommInitRankConfig(&comm_, world_size_, id, rank_, &config), "create (ncclCommInitRankConfig)");
    wait_comm("create (ncclCommInitRankConfig)");
    check_cuda(cudaMalloc(&barrier_scratch_, sizeof(float)), "create (cudaMalloc)");
  }

  ~NcclCollectives() {
    (void)cudaSetDevice(device_);
    if (barrier_scratch_) (void)cudaFree(barrier_scratch_);
    if (comm_) {
      // A healthy communicator is finalised (pending work flushed) and destroyed;
      // one whose finalise fails or times out is aborted, never waited on.
      ncclResult_t state = ncclCommFinalize(comm_);
      const bool finalised = (state == ncclSuccess || state == ncclInProgress) &&
                             pagedllm::mpi_runtime::poll_until([&] {
                               if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) state = ncclInternalError;
                               return state != ncclInProgress;
                             }, timeout_) && state == ncclSuccess;
      (void)(finalised ? ncclCommDestroy(comm_) : ncclCommAbort(comm_));
    }
    if (!failure_.empty()) {
      // Other ranks may wait in a collective of ours, and MPI_Finalize would wait
      // for them: end the job, as collectives_mpi does.
      pllm::log_error("collectives_nccl rank ", rank_, ": ending the MPI job (MPI_Abort) after: ", failure_);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }

  NcclCollectives(const NcclCollectives&) = delete;
  NcclCollectives& operator=(const NcclCollectives&) = delete;

  pllm_communicator_info info() const {
    pllm_communicator_info out{};
    out.struct_size = sizeof out;
    out.rank = rank_;
    out.world_size = world_size_;
    return out;
  }

  void all_reduce(void* buffer, int64_t count, pllm_dtype dtype, pllm_reduce_op op, void* stream) {
    const std::string what = cat("all_reduce #", ++sequence_, " (", count, " elements)");
    require_usable(what);
    if (op != PLLM_REDUCE_SUM) throw pllm::Error(PLLM_ERROR_UNSUPPORTED, cat(what, ": unsupported op ", int(op)));
    ncclDataType_t type = ncclFloat32;
    if (dtype == PLLM_DTYPE_F16) {
      type = ncclFloat16;
    } else if (dtype == PLLM_DTYPE_BF16) {
      type = ncclBfloat16;
    } else if (dtype != PLLM_DTYPE_F32) {
      throw pllm::Error(PLLM_ERROR_UNSUPPORTED, what + ": all_reduce sums f32, f16 or bf16");
    }
    check_cuda(cudaSetDevice(device_), what);
    auto s = static_cast<cudaStream_t>(stream);
    check_nccl(ncclAllReduce(buffer, buffer, static_cast<size_t>(count), type, ncclSum, comm_, s), what);
    wait_stream(s, what);
  }

  void all_gather(const void* send, void* recv, int64_t count, pllm_dtype dtype, void* stream) {
    const std::string what = cat("all_gather #", ++sequence_, " (", count, " elements)");
    require_usable(what);
    const int64_t element = pllm_dtype_size(dtype);
    if (element == 0) throw pllm::Error(PLLM_ERROR_UNSUPPORTED, what + ": unknown dtype");
    check_cuda(cudaSetDevice(device_), what);
    auto s = static_cast<cudaStream_t>(stream);
    check_nccl(ncclAllGather(send, recv, static_cast<size_t>(count * element), ncclUint8, comm_, s), what);
    wait_stream(s, what);
  }

  void broadcast(void* buffer, int64_t bytes, int32_t root, void* stream) {
    const std::string what = cat("broadcast #", ++sequence_, " (", bytes, " bytes from rank ", root, ")");
    require_usable(what);
    if (root < 0 || root >= world_size_) {
      throw pllm::Error(PLLM_ERROR_INVALID_ARGUMENT,
                        cat(what, ": root ", root, " is not a rank of this group of ", world_size_));
    }
    check_cuda(cudaSetDevice(device_), what);
    auto s = static_cast<cudaStream_t>(stream);
    check_nccl(ncclBroadcast(buffer, buffer, static_cast<size_t>(bytes), ncclUint8, root, comm_, s), what);
    wait_stream(s, what);
  }

  // NCCL has no barrier: an all-reduce of one float every rank must join.
  void barrier() {
    const std::string what = cat("barrier #", ++sequence_);
    require_usable(what);
    check_cuda(cudaSetDevice(device_), what);
    check_nccl(ncclAllReduce(barrier_scratch_, barrier_scratch_, 1, ncclFloat32, ncclSum, comm_, nullptr), what);
    wait_stream(nullptr, what);
  }

  static void plugin_shutdown() { pagedllm::mpi_runtime::finalise(); }

 private:
  void require_usable(const std::string& what) const {
    if (!failure_.empty()) {
      throw pllm::Error(PLLM_ERROR_COMMUNICATION, cat("collectives_nccl rank ", rank_, " of ", world_size_, ": ",
                                                      what, ": the communicator is broken since ", failure_));
    }
  }

  [[noreturn]] void fail(const std::string& message) {
    failure_ = message;
    if (comm_) (void)ncclCommAbort(comm_);
    comm_ = nullptr;
    throw pllm::Error(PLLM_ERROR_COMMUNICATION,
                      cat("collectives_nccl rank ", rank_, " of ", world_size_, ": ", message));
  }

  void check_cuda(cudaError_t rc, const std::string& what) {
    if (rc != cudaSuccess) {
      throw pllm::Error(PLLM_ERROR_DEVICE, cat("collectives_nccl on cuda:", device_, ": ", what, ": ",
                                               cudaGetErrorString(rc)));
    }
  }

  void check_nccl(ncclResult_t rc, const std::string& what) {
    if (rc != ncclSuccess && rc != ncclInProgress) fail(cat(what, " failed: ", ncclGetErrorString(rc)));
  }

  // A non-blocking communicator's pending work (init, an enqueue) finishes or fails.
  void wait_comm(const std::string& what) {
    ncclResult_t state = ncclInProgress;
    const bool done = pagedllm::mpi_runtime::poll_until([&] {
      if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) state = ncclInternalError;
      return state != ncclInProgress;
    }, timeout_);
    if (!done) fail(cat(what, " timed out after ", timeout_seconds_, " s (options.timeout_seconds)"));
    check_nccl(state, what);
  }

  // The collective on `stream` completes, or the communicator reports an
  // error, or the timeout passes (a rank that never joins): the call returns
  // only with the data in place or with the communicator aborted.
  void wait_stream(cudaStream_t stream, const std::string& what) {
    wait_comm(what);
    cudaError_t stream_state = cudaErrorNotReady;
    ncclResult_t comm_state = ncclSuccess;
    const bool done = pagedllm::mpi_runtime::poll_until([&] {
      stream_state = cudaStreamQuery(stream);
      if (ncclCommGetAsyncError(comm_, &comm_state) != ncclSuccess) comm_state = ncclInternalError;
      return stream_state != cudaErrorNotReady || (comm_state != ncclSuccess && comm_state != ncclInProgress);
    }, timeout_);
    if (!done) {
      fail(cat(what, " timed out after ", timeout_seconds_,
               " s (options.timeout_seconds): another rank did not join it — it is stopped, stuck, or making "
               "different calls"));
    }
    check_nccl(comm_state, what);
    if (stream_state != cudaSuccess) fail(cat(what, ": the stream failed: ", cudaGetErrorString(stream_state)));
  }

  Clock::duration timeout_;
  double timeout_seconds_;
  int device_;
  ncclComm_t comm_ = nullptr;
  void* barrier_scratch_ = nullptr;
  int rank_ = 0;
  int world_size_ = 1;
  uint64_t sequence_ = 0;
  std::string failure_;
};

}  // namespace

PAGEDLLM_PLUGIN(NcclCollectives, "collectives_nccl", "0.1.0",
                "Collectives over NCCL for CUDA ranks (bootstrapped over MPI)")
