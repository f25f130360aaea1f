#ifndef PAGEDLLM_SDK_TENSOR_H
#define PAGEDLLM_SDK_TENSOR_H

#include <stdint.h>

#include "pagedllm/sdk/version.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pllm_dtype {
  PLLM_DTYPE_INVALID = 0, /* deliberately illegal: an unset dtype fails loudly */
  PLLM_DTYPE_F32 = 1,
  PLLM_DTYPE_F16 = 2,
  PLLM_DTYPE_BF16 = 3,
  PLLM_DTYPE_I32 = 4,
  PLLM_DTYPE_I64 = 5,
  PLLM_DTYPE_U8 = 6,
  PLLM_DTYPE_I8 = 7,
  PLLM_DTYPE_FORCE_32BIT = 0x7fffffff /* keeps the enum 32 bits wide; never a dtype */
} pllm_dtype;

typedef enum pllm_device_type {
  PLLM_DEVICE_INVALID = 0,
  PLLM_DEVICE_CPU = 1,
  PLLM_DEVICE_CUDA = 2,
  PLLM_DEVICE_FORCE_32BIT = 0x7fffffff /* keeps the enum 32 bits wide; never a device */
} pllm_device_type;

/* Frozen for the whole major (no struct_size): embedded by value in tensors and
 * create args, and a (type, ordinal) pair is all that names a device. */
typedef struct pllm_device {
  pllm_device_type type;
  int32_t index; /* CUDA ordinal; 0 for the CPU */
} pllm_device;

#define PLLM_TENSOR_MAX_DIMS 8

/* A view of memory someone else owns: the descriptor says nothing about who
 * frees it. Strides are in elements, not bytes.
 *
 * Growable (SDK 2.0): whoever fills a tensor sets struct_size to its
 * sizeof(pllm_tensor), and a later minor may append fields (quantisation
 * scales, layouts). A struct holding a tensor holds it by pointer, so the
 * holder's layout does not change when the tensor grows. A consumer checks
 * PLLM_HAS_FIELD before reading a field appended after 2.0 and refuses a
 * tensor without the 2.0 fields (struct_size 0 is a descriptor nobody set). */
typedef struct pllm_tensor {
  uint32_t struct_size;
  void* data;
  pllm_dtype dtype;
  pllm_device device;
  int32_t ndim;
  int64_t shape[PLLM_TENSOR_MAX_DIMS];
  int64_t strides[PLLM_TENSOR_MAX_DIMS];
} pllm_tensor;

static inline int64_t pllm_dtype_size(pllm_dtype dtype) {
  switch (dtype) {
    case PLLM_DTYPE_F32: return 4;
    case PLLM_DTYPE_F16: return 2;
    case PLLM_DTYPE_BF16: return 2;
    case PLLM_DTYPE_I32: return 4;
    case PLLM_DTYPE_I64: return 8;
    case PLLM_DTYPE_U8: return 1;
    case PLLM_DTYPE_I8: return 1;
    case PLLM_DTYPE_INVALID: return 0;
    case PLLM_DTYPE_FORCE_32BIT: return 0;
  }
  return 0;
}

#ifdef __cplusplus
}
#endif

#endif
