#ifndef PAGEDLLM_SDK_COLLECTIVES_H
#define PAGEDLLM_SDK_COLLECTIVES_H

#include <stdint.h>

#include "pagedllm/sdk/status.h"
#include "pagedllm/sdk/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Collectives (SDK 2.1): the communication between the ranks of a
 * tensor-parallel group — every rank runs the same host with its shard of the
 * model, and the model's layers meet through these calls. A collectives plugin
 * wraps an existing distributed engine (the in-tree ones: Open MPI for the CPU,
 * NCCL for CUDA); it never invents a transport.
 *
 * Every rank makes the same calls in the same order with the same counts,
 * dtypes and roots (the MPI and NCCL rule); a call that differs between ranks is
 * the caller's bug and may fail, hang until the timeout, or mix data.
 *
 * Failure is a status, never a hang:
 *   - every collective fails with PLLM_ERROR_COMMUNICATION when the
 *     communicator's transport reports an error, or when the other ranks have
 *     not all joined within the plugin's timeout (its documented option); the
 *     message names the operation, its sequence number on the communicator and
 *     the timeout;
 *   - after one failure the communicator is broken: every later call fails at
 *     once with PLLM_ERROR_COMMUNICATION naming the first failure. The caller
 *     stops (the host ends with an error); destroy() then tears the group down
 *     without waiting for the other ranks (an implementation documents how:
 *     MPI_Abort for MPI, ncclCommAbort for NCCL).
 * What an implementation can and cannot detect is in its README.
 *
 * Buffers live on the communicator's device (create args); `stream` is the
 * device stream to order the operation on (cudaStream_t; NULL on the CPU and
 * for CUDA's default stream). The data is complete in the buffers when the
 * call returns, on every device (so that a failure is reported by the call
 * that met it). In place is allowed where stated. */
typedef struct pllm_communicator pllm_communicator;

typedef struct pllm_collectives_create_args {
  uint32_t struct_size;
  const char* options_json;
  pllm_device device; /* where every buffer handed to this communicator lives */
} pllm_collectives_create_args;

/* Output of get_info (caller-allocated, struct_size set by the caller). */
typedef struct pllm_communicator_info {
  uint32_t struct_size;
  int32_t rank;       /* this process's rank, 0 .. world_size - 1 */
  int32_t world_size; /* ranks in the group; 1 for a process alone */
} pllm_communicator_info;

typedef enum pllm_reduce_op {
  PLLM_REDUCE_INVALID = 0,
  PLLM_REDUCE_SUM = 1,
  PLLM_REDUCE_FORCE_32BIT = 0x7fffffff /* keeps the enum 32 bits wide; never an operation */
} pllm_reduce_op;

typedef struct pllm_collectives_api {
  uint32_t struct_size;
  /* Joins the group of ranks this process was launched in (mpirun's, for the
   * in-tree plugins). Collective: every rank creates its communicator. */
  pllm_status (*create)(const pllm_collectives_create_args* args, pllm_communicator** out, pllm_error* error);
  void (*destroy)(pllm_communicator* comm);
  pllm_status (*get_info)(pllm_communicator* comm, pllm_communicator_info* out, pllm_error* error);
  /* In place: `buffer` holds `count` elements of `dtype` (F32, F16 or BF16) on
   * every rank; afterwards each rank's holds the element-wise `op` over all
   * ranks, the same bits on every rank. F16 and BF16 are accumulated as the
   * implementation documents (the MPI plugin: in f32, rounded once). */
  pllm_status (*all_reduce)(pllm_communicator* comm, void* buffer, int64_t count, pllm_dtype dtype,
                            pllm_reduce_op op, void* stream, pllm_error* error);
  /* `send` holds `count` elements of `dtype` (any dtype); `recv` receives
   * world_size * count elements, rank r's at r * count. `send` may be recv +
   * rank * count (in place). */
  pllm_status (*all_gather)(pllm_communicator* comm, const void* send, void* recv, int64_t count, pllm_dtype dtype,
                            void* stream, pllm_error* error);
  /* `bytes` bytes of `buffer` on rank `root` are copied into `buffer` on every
   * other rank. */
  pllm_status (*broadcast)(pllm_communicator* comm, void* buffer, int64_t bytes, int32_t root, void* stream,
                           pllm_error* error);
  /* Returns once every rank has called it (or fails like any collective). */
  pllm_status (*barrier)(pllm_communicator* comm, pllm_error* error);
} pllm_collectives_api;

/* A communicator another plugin uses (a model's tensor-parallel group, SDK
 * 2.1): held by pointer so that it can grow; the caller sets struct_size. The
 * user calls it on the thread it is called on, never concurrently with the
 * host's own calls (the host makes none while the user runs). */
typedef struct pllm_collectives_ref {
  uint32_t struct_size;
  const pllm_collectives_api* api;
  pllm_communicator* comm;
} pllm_collectives_ref;

#ifdef __cplusplus
}
#endif

#endif
