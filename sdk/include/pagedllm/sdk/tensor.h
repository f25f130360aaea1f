#ifndef PAGEDLLM_SDK_TENSOR_H
#define PAGEDLLM_SDK_TENSOR_H

#include <stdint.h>

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
  PLLM_DTYPE_I8 = 7
} pllm_dtype;

typedef enum pllm_device_type {
  PLLM_DEVICE_INVALID = 0,
  PLLM_DEVICE_CPU = 1,
  PLLM_DEVICE_CUDA = 2
} pllm_device_type;

typedef struct pllm_device {
  pllm_device_type type;
  int32_t index; /* CUDA ordinal; 0 for the CPU */
} pllm_device;

#define PLLM_TENSOR_MAX_DIMS 8

/* A view of memory someone else owns: the descriptor says nothing about who
 * frees it. Strides are in elements, not bytes. */
typedef struct pllm_tensor {
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
  }
  return 0;
}

#ifdef __cplusplus
}
#endif

#endif
