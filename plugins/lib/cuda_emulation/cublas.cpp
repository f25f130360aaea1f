// The cuBLAS stand-in: the handle calls and the GEMMs the project makes
// (cublasGemmEx, and its strided-batched form), defined against the
// toolkit's cublas_api.h. A GEMM accumulates in double and rounds once to
// the output type; its arguments are checked as cuBLAS documents
// (CUBLAS_STATUS_INVALID_VALUE for a negative size, an unknown operation or
// a leading dimension below its minimum; CUBLAS_STATUS_NOT_SUPPORTED for a
// type combination cublasGemmEx does not list), then its operands must lie
// inside device allocations (a fault otherwise, as the GPU would take), and
// it is ordered on the handle's stream like a kernel.

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "internal.h"

struct cublasContext {
  cudaStream_t stream = nullptr;
  cublasMath_t math = CUBLAS_DEFAULT_MATH;
};

namespace {

namespace detail = pagedllm::cuda::emulation::detail;
using pagedllm::cuda::emulation::Access;

int type_bytes(cudaDataType t) {
  switch (t) {
    case CUDA_R_16F:
    case CUDA_R_16BF: return 2;
    case CUDA_R_32F: return 4;
    case CUDA_R_64F: return 8;
    default: return 0;
  }
}

double load(const void* base, int64_t i, cudaDataType t) {
  switch (t) {
    case CUDA_R_16F: return double(__half2float(static_cast<const __half*>(base)[i]));
    case CUDA_R_16BF: return double(__bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]));
    case CUDA_R_32F: return double(static_cast<const float*>(base)[i]);
    case CUDA_R_64F: return static_cast<const double*>(base)[i];
    default: return 0.0;
  }
}

void store(void* base, int64_t i, cudaDataType t, double v) {
  switch (t) {
    case CUDA_R_16F: static_cast<__half*>(base)[i] = __double2half(v); break;
    case CUDA_R_16BF: static_cast<__nv_bfloat16*>(base)[i] = __double2bfloat16(v); break;
    case CUDA_R_32F: static_cast<float*>(base)[i] = float(v); break;
    case CUDA_R_64F: static_cast<double*>(base)[i] = v; break;
    default: break;
  }
}

// cublasGemmEx's table of supported (compute, A/B, C) combinations.
bool supported(cublasComputeType_t compute, cudaDataType ab, cudaDataType c) {
  switch (compute) {
    case CUBLAS_COMPUTE_32F:
    case CUBLAS_COMPUTE_32F_PEDANTIC:
      return (ab == CUDA_R_32F && c == CUDA_R_32F) || (ab == CUDA_R_16F && (c == CUDA_R_16F || c == CUDA_R_32F)) ||
             (ab == CUDA_R_16BF && (c == CUDA_R_16BF || c == CUDA_R_32F));
    case CUBLAS_COMPUTE_32F_FAST_16F:
    case CUBLAS_COMPUTE_32F_FAST_16BF:
    case CUBLAS_COMPUTE_32F_FAST_TF32:
      return ab == CUDA_R_32F && c == CUDA_R_32F;
    case CUBLAS_COMPUTE_64F:
    case CUBLAS_COMPUTE_64F_PEDANTIC:
      return ab == CUDA_R_64F && c == CUDA_R_64F;
    default:
      return false;
  }
}

bool valid_op(cublasOperation_t op) { return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C; }

struct Gemm {
  cublasOperation_t transa, transb;
  int m, n, k;
  const void *alpha, *a, *b, *beta;
  void* c;
  cudaDataType atype, btype, ctype;
  int lda, ldb, ldc;
  long long stride_a, stride_b, stride_c;
  int batch;
  cublasComputeType_t compute;
};

cublasStatus_t run(cublasHandle_t handle, const Gemm& g, const char* call) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (g.m < 0 || g.n < 0 || g.k < 0 || g.batch < 0 || !valid_op(g.transa) || !valid_op(g.transb) || !g.alpha ||
      !g.beta) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const int a_rows = g.transa == CUBLAS_OP_N ? g.m : g.k, a_cols = g.transa == CUBLAS_OP_N ? g.k : g.m;
  const int b_rows = g.transb == CUBLAS_OP_N ? g.k : g.n, b_cols = g.transb == CUBLAS_OP_N ? g.n : g.k;
  if (g.lda < std::max(1, a_rows) || g.ldb < std::max(1, b_rows) || g.ldc < std::max(1, g.m)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (g.atype != g.btype || !supported(g.compute, g.atype, g.ctype)) return CUBLAS_STATUS_NOT_SUPPORTED;
  if (g.m == 0 || g.n == 0 || g.batch == 0) return CUBLAS_STATUS_SUCCESS;

  const bool f64_scale = g.compute == CUBLAS_COMPUTE_64F || g.compute == CUBLAS_COMPUTE_64F_PEDANTIC;
  const double alpha = f64_scale ? *static_cast<const double*>(g.alpha) : double(*static_cast<const float*>(g.alpha));
  const double beta = f64_scale ? *static_cast<const double*>(g.beta) : double(*static_cast<const float*>(g.beta));
  const std::string what = std::string(call) + " (m=" + std::to_string(g.m) + ", n=" + std::to_string(g.n) +
                           ", k=" + std::to_string(g.k) + ", batch=" + std::to_string(g.batch) + ")";

  // The operands as the kernel would read them, each inside one allocation.
  auto extent = [&](int rows, int cols, int ld, long long stride, int bytes) {
    return (int64_t(g.batch - 1) * stride + int64_t(cols - 1) * ld + rows) * bytes;
  };
  std::vector<Access> accesses;
  struct Operand {
    const void* p;
    int64_t bytes;
    bool write;
    const char* name;
  };
  const Operand operands[] = {
      {g.a, g.k > 0 ? extent(a_rows, a_cols, g.lda, g.stride_a, type_bytes(g.atype)) : 0, false, "A"},
      {g.b, g.k > 0 ? extent(b_rows, b_cols, g.ldb, g.stride_b, type_bytes(g.btype)) : 0, false, "B"},
      {g.c, extent(g.m, g.n, g.ldc, g.stride_c, type_bytes(g.ctype)), true, "C"}};
  for (const Operand& o : operands) {
    if (o.bytes == 0) continue;
    if (!o.p) {
      detail::fault(cudaErrorIllegalAddress, what + ": operand " + o.name + " is a null pointer");
      return CUBLAS_STATUS_EXECUTION_FAILED;
    }
    if (detail::check_range(what + ": operand " + o.name, o.p, std::size_t(o.bytes)) != cudaSuccess) {
      return CUBLAS_STATUS_EXECUTION_FAILED;
    }
    accesses.push_back({o.p, o.write});
  }
  if (detail::begin_operation(handle->stream, what, accesses) != cudaSuccess) return CUBLAS_STATUS_EXECUTION_FAILED;
  detail::count_gemm_call();

  std::vector<double> col(std::size_t(g.k));
  for (int batch = 0; batch < g.batch; ++batch) {
    const int64_t a0 = int64_t(batch) * g.stride_a, b0 = int64_t(batch) * g.stride_b, c0 = int64_t(batch) * g.stride_c;
    for (int j = 0; j < g.n; ++j) {
      for (int l = 0; l < g.k; ++l) {
        col[std::size_t(l)] = load(g.b, b0 + (g.transb == CUBLAS_OP_N ? int64_t(j) * g.ldb + l : int64_t(l) * g.ldb + j),
                                   g.btype);
      }
      for (int i = 0; i < g.m; ++i) {
        double sum = 0.0;
        for (int l = 0; l < g.k; ++l) {
          const int64_t ai = g.transa == CUBLAS_OP_N ? int64_t(l) * g.lda + i : int64_t(i) * g.lda + l;
          sum += load(g.a, a0 + ai, g.atype) * col[std::size_t(l)];
        }
        const int64_t ci = c0 + int64_t(j) * g.ldc + i;
        // beta == 0: C is not read (it may hold NaN), as cuBLAS documents.
        const double v = alpha * sum + (beta != 0.0 ? beta * load(g.c, ci, g.ctype) : 0.0);
        store(g.c, ci, g.ctype, v);
      }
    }
  }
  if (detail::check_guards(what, accesses) != cudaSuccess) return CUBLAS_STATUS_EXECUTION_FAILED;
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

extern "C" {

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    return CUBLAS_STATUS_NOT_INITIALIZED;
  }
  *handle = new cublasContext;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasGetStream_v2(cublasHandle_t handle, cudaStream_t* stream) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!stream) return CUBLAS_STATUS_INVALID_VALUE;
  *stream = handle->stream;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->math = mode;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t* mode) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!mode) return CUBLAS_STATUS_INVALID_VALUE;
  *mode = handle->math;
  return CUBLAS_STATUS_SUCCESS;
}

const char* cublasGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}
const char* cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "an absent device architectural feature is required";
    case CUBLAS_STATUS_MAPPING_ERROR: return "an access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute (see the CUDA emulation's message)";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    case CUBLAS_STATUS_LICENSE_ERROR: return "error detected trying to check the license";
  }
  return "unknown error";
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                            int k, const void* alpha, const void* A, cudaDataType Atype, int lda, const void* B,
                            cudaDataType Btype, int ldb, const void* beta, void* C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t computeType, cublasGemmAlgo_t /*algo: one algorithm here*/) {
  return run(handle,
             Gemm{transa, transb, m, n, k, alpha, A, B, beta, C, Atype, Btype, Ctype, lda, ldb, ldc, 0, 0, 0, 1,
                  computeType},
             "cublasGemmEx");
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                                          int m, int n, int k, const void* alpha, const void* A, cudaDataType Atype,
                                          int lda, long long int strideA, const void* B, cudaDataType Btype, int ldb,
                                          long long int strideB, const void* beta, void* C, cudaDataType Ctype,
                                          int ldc, long long int strideC, int batchCount,
                                          cublasComputeType_t computeType, cublasGemmAlgo_t /*algo*/) {
  return run(handle,
             Gemm{transa, transb, m, n, k, alpha, A, B, beta, C, Atype, Btype, Ctype, lda, ldb, ldc, strideA, strideB,
                  strideC, batchCount, computeType},
             "cublasGemmStridedBatchedEx");
}

}  // extern "C"
